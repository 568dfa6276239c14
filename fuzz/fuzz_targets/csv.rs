//! The CSV converter on arbitrary bytes (options from the first bytes, a fixed small
//! schema, output to a sink, decompression bounded): never a panic, never unbounded
//! memory, and the same outcome in small batches as in one.
#![no_main]

use libfuzzer_sys::fuzz_target;

mod common;

fuzz_target!(|data: &[u8]| {
    if let Some((spec, input)) = common::spec(data, true) {
        common::check(input, &spec);
    }
});
