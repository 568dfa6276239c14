//! The CSV converter against arrow-csv (csv-core) itself, on text columns: wherever the
//! converter reads a file it reads the same records, and it refuses a file arrow-csv reads
//! only for csv-core's leniency (text after a closing quote, a quote never closed) or for
//! invalid UTF-8 that arrow-csv's check misses; the scan that cuts batches at record
//! boundaries never loses track of csv-core's records.
#![no_main]

use std::sync::Arc;

use arrow_array::Array;
use arrow_array::RecordBatch;
use arrow_array::cast::AsArray;
use arrow_schema::{DataType, Field, Schema};
use libfuzzer_sys::fuzz_target;
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use tidemark::convert::{ConvertSpec, CsvOptions, InputFormat, convert, count};

/// Every cell of a batch of text columns, row by row.
fn batch_cells(batch: &RecordBatch) -> Vec<Option<String>> {
    (0..batch.num_rows())
        .flat_map(|r| {
            batch.columns().iter().map(move |c| {
                let s = c.as_string::<i32>();
                s.is_valid(r).then(|| s.value(r).to_string())
            })
        })
        .collect()
}

/// Every cell of a Parquet file of text columns.
fn cells(parquet: bytes::Bytes) -> Vec<Option<String>> {
    ParquetRecordBatchReaderBuilder::try_new(parquet)
        .expect("the converter writes valid Parquet")
        .build()
        .expect("reader")
        .flat_map(|b| batch_cells(&b.expect("batch")))
        .collect()
}

fuzz_target!(|data: &[u8]| {
    let Some((&a, input)) = data.split_first() else {
        return;
    };
    if input.starts_with(b"\xef\xbb\xbf") {
        return; // the converter drops a byte order mark, arrow-csv does not
    }
    let options = CsvOptions {
        delimiter: if a & 1 != 0 { b';' } else { b',' },
        quote: if a & 2 != 0 { b'\'' } else { b'"' },
        escape: (a & 4 != 0).then_some(b'\\'),
        header: a & 8 != 0,
    };
    let columns = 1 + usize::from(a >> 4 & 3);
    let fields: Vec<Field> = (0..columns)
        .map(|i| Field::new(format!("c{i}"), DataType::Utf8, true))
        .collect();
    let schema = Arc::new(Schema::new(fields));
    let mut spec = ConvertSpec::new(InputFormat::Csv(options), schema.clone());
    spec.batch_rows = 1 + usize::from(a >> 6);
    spec.batch_bytes = 1 + usize::from(a >> 5);

    let mut parquet = Vec::new();
    let ours = convert(input, &spec, &mut parquet).map(|_| cells(parquet.into()));
    assert_eq!(
        count(input, &spec).is_ok(),
        ours.is_ok(),
        "count and convert agree"
    );
    let mut builder = arrow_csv::ReaderBuilder::new(schema)
        .with_header(options.header)
        .with_delimiter(options.delimiter)
        .with_quote(options.quote)
        .with_batch_size(7);
    if let Some(e) = options.escape {
        builder = builder.with_escape(e);
    }
    let theirs: Result<Vec<Option<String>>, _> = builder
        .build(input)
        .expect("reader")
        .map(|batch| batch.map(|b| batch_cells(&b)))
        .collect::<Result<Vec<_>, _>>()
        .map(|b| b.concat());
    match (ours, theirs) {
        (Ok(ours), Ok(theirs)) => assert_eq!(ours, theirs, "the same records"),
        (Ok(rows), Err(e)) => panic!("we read {rows:?} where csv-core fails: {e}"),
        (Err(e), Ok(_)) => {
            // csv-core's leniencies, and arrow-csv's UTF-8 check, which sees the fields of
            // a batch joined (a character split across two fields passes it).
            let e = e.to_string();
            let utf8 = e.ends_with("invalid UTF-8") && std::str::from_utf8(input).is_err();
            assert!(
                e.contains("closing quote") || e.contains("still open") || utf8,
                "refused for something csv-core accepts: {e}"
            );
        }
        (Err(e), Err(_)) => assert!(!e.to_string().contains("internal"), "{e}"),
    }
});
