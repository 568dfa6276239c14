//! An Avro Object Container File of arbitrary bytes converted under one of a few schemas and
//! policies (from the first byte; the rest is the file), output to a sink, decoded bytes
//! bounded at 8 MiB: never a panic, never unbounded memory, and the same outcome, rows, sums,
//! rescued rows and ignored values in batches of 1, 7 or 100 rows as in one. A panic of
//! arrow-avro that the converter catches (`convert::guarded`: the file fails as invalid) is
//! not a crash; any other panic is.
//!
//! arrow-avro 60.1 loops forever on a block holding more data than its count of objects: such
//! inputs end in libFuzzer's timeout, which `fuzz/run.sh` counts and goes past.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tidemark::convert::InputFormat;

mod common;

fuzz_target!(|data: &[u8]| {
    common::tolerate_caught_reader_panics();
    if let Some((spec, file)) = common::typed_spec(InputFormat::Avro, data) {
        common::check_by(file, &spec, common::full_summary);
    }
});
