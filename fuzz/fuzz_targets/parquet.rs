//! A Parquet file of arbitrary bytes converted under one of a few schemas and policies (from the
//! first byte; the rest is the file), output to a sink, the spool bounded at 8 MiB: never a
//! panic, never unbounded memory, and the same outcome, rows, sums, rescued rows and ignored
//! values in batches of 1, 7 or 100 rows as in one. A panic of parquet-rs (or arrow-rs under
//! it) that the converter catches (`convert::guarded`: the file fails as invalid) is not a
//! crash; any other panic is.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tidemark::convert::InputFormat;

mod common;

fuzz_target!(|data: &[u8]| {
    common::tolerate_caught_reader_panics();
    if let Some((spec, file)) = common::typed_spec(InputFormat::Parquet, data) {
        common::check_by(file, &spec, common::full_summary);
    }
});
