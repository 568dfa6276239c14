//! The converter as a whole: every format through [`convert`] and its variants.

use std::io::{self, Read, Write};

use super::testutil::*;
use super::writer::*;
use super::*;

#[test]
fn csv_of_every_type_round_trips() {
    let spec = csv_spec(ALL_TYPES);
    let (stats, parquet) = run(ALL_TYPES_CSV, &spec);
    assert_eq!(parquet.rows, all_types_rows());
    assert_eq!(stats.rows, 3);
    assert_eq!(stats.row_groups, 1);
    assert_eq!(stats.bytes_read, ALL_TYPES_CSV.len() as u64);
    assert_eq!(stats.bytes_decoded, ALL_TYPES_CSV.len() as u64);
    assert!(!parquet.schema.field(0).is_nullable(), "id stays required");
}

#[test]
fn json_lines_give_the_same_rows_and_sums_as_csv() {
    let sum_columns: Vec<String> = ["id", "qty", "price", "ratio", "weight"]
        .map(String::from)
        .into();
    let mut csv = csv_spec(ALL_TYPES);
    csv.sum_columns = sum_columns.clone();
    let mut json = json_spec(ALL_TYPES);
    json.sum_columns = sum_columns;
    let (csv_stats, csv_file) = run(ALL_TYPES_CSV, &csv);
    let (json_stats, json_file) = run(ALL_TYPES_JSONL, &json);
    assert_eq!(json_file.rows, csv_file.rows);
    assert_eq!(json_stats.sums, csv_stats.sums);
    let sums: Vec<String> = csv_stats.sums.values().map(ToString::to_string).collect();
    // BTreeMap order: id, price, qty, ratio, weight
    assert_eq!(sums, ["6", "-12.00", "7", "1000.5", "3.75"]);
}

#[test]
fn sums_are_exact_and_typed() {
    let mut spec = csv_spec(
        r#"[{"name":"a","type":"decimal(12,2)"},{"name":"b","type":"int64"},{"name":"c","type":"float64"}]"#,
    );
    spec.sum_columns = vec!["a".into(), "b".into(), "c".into(), "a".into()];
    let (stats, _) = run(
        "a,b,c\n0.10,9223372036854775807,0.1\n0.20,9223372036854775807,0.2\n,,\n",
        &spec,
    );
    assert_eq!(
        stats.sums["a"],
        SumValue::Decimal {
            unscaled: 30,
            scale: 2
        }
    );
    assert_eq!(stats.sums["a"].to_string(), "0.30");
    assert_eq!(stats.sums["b"].to_string(), "18446744073709551614");
    assert_eq!(stats.sums["c"], SumValue::Float(0.1 + 0.2));
    let json = serde_json::to_value(&stats).unwrap();
    assert_eq!(
        json["sums"],
        serde_json::json!({"a": "0.30", "b": "18446744073709551614", "c": "0.30000000000000004"})
    );
}

#[test]
fn zero_rows_give_a_valid_file_with_the_schema() {
    let mut csv = csv_spec(ALL_TYPES);
    csv.sum_columns = vec!["price".into()];
    let (stats, parquet) = run(ALL_TYPES_CSV.lines().next().unwrap(), &csv);
    assert_eq!(
        (stats.rows, stats.row_groups, parquet.rows.len()),
        (0, 0, 0)
    );
    assert_eq!(stats.sums["price"].to_string(), "0.00");
    for input in ["", "\n\n"] {
        let (stats, parquet) = run(input, &json_spec(ALL_TYPES));
        assert_eq!((stats.rows, parquet.rows.len()), (0, 0));
        assert_eq!(parquet.schema.fields().len(), 9);
    }
    let (stats, _) = run("", &csv);
    assert_eq!(stats.rows, 0, "not even a header");
}

#[test]
fn gzip_and_zstd_inputs() {
    let mut spec = csv_spec(ALL_TYPES);
    for (compression, bytes) in [
        (Compression::Gzip, gzip(ALL_TYPES_CSV.as_bytes())),
        (Compression::Zstd, zstd(ALL_TYPES_CSV.as_bytes())),
    ] {
        spec.compression = compression;
        let (stats, parquet) = run(&bytes, &spec);
        assert_eq!(parquet.rows, all_types_rows(), "{compression}");
        assert_eq!(stats.bytes_read, bytes.len() as u64);
        assert_eq!(stats.bytes_decoded, ALL_TYPES_CSV.len() as u64);
    }
}

#[test]
fn multi_member_gzip_is_read_to_the_end() {
    let (header, body) = ALL_TYPES_CSV.split_once('\n').unwrap();
    let mut spec = csv_spec(ALL_TYPES);
    spec.compression = Compression::Gzip;
    let input = [
        gzip(format!("{header}\n").as_bytes()),
        gzip(body.as_bytes()),
        gzip(body.as_bytes()),
    ]
    .concat();
    let (stats, parquet) = run(&input, &spec);
    assert_eq!(stats.rows, 6);
    assert_eq!(parquet.rows[3..], all_types_rows()[..]);
}

#[test]
fn corrupt_compressed_input_is_a_decompression_error() {
    let gz = gzip(ALL_TYPES_CSV.as_bytes());
    let zst = zstd(ALL_TYPES_CSV.as_bytes());
    let mut spec = csv_spec(ALL_TYPES);
    for (compression, input) in [
        (Compression::Gzip, &gz[..gz.len() - 10]),
        (Compression::Gzip, &gz[..gz.len() / 2]),
        (Compression::Gzip, ALL_TYPES_CSV.as_bytes()),
        (Compression::Zstd, &zst[..zst.len() - 3]),
        (Compression::Zstd, ALL_TYPES_CSV.as_bytes()),
    ] {
        spec.compression = compression;
        let err = fail(input, &spec);
        assert!(
            matches!(err, ConvertError::Decompress { .. }),
            "{compression}: {err:?}"
        );
        assert!(
            err.to_string()
                .starts_with(&format!("cannot decompress input: {compression}: ")),
            "{err}"
        );
    }
}

/// Yields `data`, then fails.
struct Failing<'a>(&'a [u8]);

impl Read for Failing<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self.0.read(buf)? {
            0 => Err(io::Error::new(
                io::ErrorKind::ConnectionReset,
                "connection reset",
            )),
            n => Ok(n),
        }
    }
}

#[test]
fn a_failing_source_is_an_io_error_even_under_a_decompressor() {
    let gz = gzip(ALL_TYPES_CSV.as_bytes());
    for (compression, input) in [
        (Compression::None, ALL_TYPES_CSV.as_bytes()),
        (Compression::Gzip, &gz[..20]),
    ] {
        let mut spec = csv_spec(ALL_TYPES);
        spec.compression = compression;
        let err = convert(Failing(input), &spec, Vec::new()).unwrap_err();
        match err {
            ConvertError::Io(e) => assert_eq!(e.kind(), io::ErrorKind::ConnectionReset),
            e => panic!("{compression}: {e:?}"),
        }
    }
}

/// A gzip member of `MIB` MiB of zeros, compressed once and streamed as often as
/// asked: a bomb of any size in little memory.
struct Bomb {
    member: Vec<u8>,
    left: usize,
    at: usize,
}

const MIB: usize = 1 << 20;

impl Bomb {
    fn new(mib: usize) -> Self {
        Self {
            member: gzip(&vec![0; MIB]),
            left: mib,
            at: 0,
        }
    }
}

impl Read for Bomb {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if self.at == self.member.len() {
            if self.left == 0 {
                return Ok(0);
            }
            (self.left, self.at) = (self.left - 1, 0);
        }
        let n = (&self.member[self.at..]).read(buf)?;
        self.at += n;
        Ok(n)
    }
}

#[test]
fn a_gzip_bomb_is_stopped_at_the_limit() {
    let mut spec = csv_spec(ALL_TYPES);
    spec.compression = Compression::Gzip;
    spec.max_decoded_bytes = Some(10 * MIB as u64);
    // Zeros are one endless record: the record limit would stop them first.
    spec.max_record_bytes = usize::MAX;
    let err = convert(Bomb::new(1024), &spec, Vec::new()).unwrap_err();
    assert!(
        matches!(err, ConvertError::TooLarge { limit } if limit == 10 * MIB as u64),
        "{err:?}"
    );
    assert_eq!(
        err.to_string(),
        "decompressed input exceeds the limit of 10485760 bytes"
    );

    let mut spec = json_spec(ALL_TYPES);
    spec.max_decoded_bytes = Some(ALL_TYPES_JSONL.len() as u64 - 1);
    assert!(matches!(
        fail(ALL_TYPES_JSONL, &spec),
        ConvertError::TooLarge { .. }
    ));
    spec.max_decoded_bytes = Some(ALL_TYPES_JSONL.len() as u64);
    assert_eq!(
        run(ALL_TYPES_JSONL, &spec).0.rows,
        3,
        "the limit itself is allowed"
    );
}

/// `head`, then `filler` up to `len` bytes in all, made as they are read, counting
/// what was read: a line of any length in no memory.
struct Endless {
    head: &'static [u8],
    filler: u8,
    len: u64,
    pulled: Arc<std::sync::atomic::AtomicU64>,
}

impl Read for Endless {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let at = self.pulled.load(std::sync::atomic::Ordering::Relaxed);
        let n = buf.len().min((self.len - at) as usize);
        for (i, b) in buf[..n].iter_mut().enumerate() {
            *b = *self.head.get(at as usize + i).unwrap_or(&self.filler);
        }
        self.pulled
            .store(at + n as u64, std::sync::atomic::Ordering::Relaxed);
        Ok(n)
    }
}

#[test]
fn a_100_mb_line_is_refused_after_reading_a_bounded_part_of_it() {
    const LINE: u64 = 100 << 20;
    let limit = DEFAULT_MAX_RECORD_BYTES as u64;
    for (head, spec, error) in [
        (
            &b"id,qty,price,ratio,weight,name,ok,day,at\n1,2,3,4,5,"[..],
            csv_spec(ALL_TYPES),
            r#"line 2: column "name": the record is longer than the limit of 8388608 bytes (max_record_bytes)"#,
        ),
        (
            b"id,qty,price,ratio,weight,name,ok,day,at\n1,2,3,4,5,\"a\n",
            csv_spec(ALL_TYPES),
            r#"line 2: column "name": the record is longer than the limit of 8388608 bytes (max_record_bytes)"#,
        ),
        (
            b"{\"id\":1}\n{\"id\":2,\"name\":\"",
            json_spec(ALL_TYPES),
            "line 2: the line is longer than the limit of 8388608 bytes (max_record_bytes)",
        ),
    ] {
        let pulled = Arc::new(std::sync::atomic::AtomicU64::new(0));
        let input = Endless {
            head,
            filler: if head.ends_with(b"\n") { b'\n' } else { b'x' },
            len: LINE,
            pulled: pulled.clone(),
        };
        let err = convert(input, &spec, io::sink()).unwrap_err();
        assert_eq!(err.to_string(), error);
        // The record limit, and a buffer or two of 64 KiB: never the whole line.
        let pulled = pulled.load(std::sync::atomic::Ordering::Relaxed);
        assert!(pulled < limit + (256 << 10), "read {pulled} bytes");
    }
}

#[test]
fn rows_are_split_into_row_groups() {
    let mut spec = csv_spec(r#"[{"name":"n","type":"int32","nullable":false}]"#);
    spec.row_group_rows = 5000;
    spec.sum_columns = vec!["n".into()];
    let input: String = (0..20_000).map(|i| format!("{i}\n")).collect();
    let (stats, parquet) = run(format!("n\n{input}"), &spec);
    assert_eq!((stats.rows, stats.row_groups), (20_000, 4));
    assert_eq!(stats.sums["n"], SumValue::Int(19_999 * 20_000 / 2));
    assert_eq!(parquet.rows[12_345], ["12345"]);
}

#[test]
fn row_groups_close_at_their_byte_size() {
    let mut spec = csv_spec(r#"[{"name":"s","type":"string","nullable":false}]"#);
    // Distinct hex strings that compress poorly: ≈ 3 MB encoded.
    let value = |i: u64| {
        format!(
            "{:016x}{:016x}",
            i.wrapping_mul(0x9e37_79b9_7f4a_7c15),
            i.wrapping_mul(0xc2b2_ae3d_27d4_eb4f)
        )
    };
    let input: String = (0..200_000).map(|i| format!("{}\n", value(i))).collect();
    let (whole, _) = run(format!("s\n{input}"), &spec);
    assert_eq!(whole.row_groups, 1);
    spec.row_group_bytes = 1 << 20;
    let (split, parquet) = run(format!("s\n{input}"), &spec);
    assert!(split.row_groups >= 3, "{} row groups", split.row_groups);
    assert_eq!((split.rows, parquet.rows.len()), (200_000, 200_000));
    assert_eq!(parquet.rows[54_321], [value(54_321)]);
}

#[test]
fn pages_past_the_memory_budget_wait_in_a_file_and_give_the_same_bytes() {
    let mut spec =
        csv_spec(r#"[{"name":"s","type":"string","nullable":false},{"name":"n","type":"int64"}]"#);
    spec.threads = 1; // the spill counter is the encoding thread's
    spec.row_group_bytes = 1 << 19;
    let value = |i: u64| format!("{:016x}", i.wrapping_mul(0x9e37_79b9_7f4a_7c15));
    let input: String = (0..100_000u64)
        .map(|i| format!("{},{}\n", value(i), i % 7))
        .collect();
    let input = format!("s,n\n{input}");
    let mut outputs = Vec::new();
    for budget in [usize::MAX, 100 << 10, 0] {
        spec.page_memory_bytes = budget;
        let before = pages::SPILLED.with(|s| s.get());
        let mut out = Vec::new();
        let stats = convert(input.as_bytes(), &spec, &mut out).unwrap();
        let spilled = pages::SPILLED.with(|s| s.get()) - before;
        assert!(stats.row_groups >= 2, "{} row groups", stats.row_groups);
        match budget {
            usize::MAX => assert_eq!(spilled, 0),
            // Everything but the budget, of a file of ≈ 2 MB.
            b => assert!(
                spilled + b >= out.len() / 2,
                "{spilled} of {} bytes spilled",
                out.len()
            ),
        }
        outputs.push(out);
    }
    assert!(
        outputs.windows(2).all(|w| w[0] == w[1]),
        "the same file whatever the budget"
    );
    // And the file reads back whole.
    let parquet = read_parquet(outputs[2].clone());
    assert_eq!(parquet.rows.len(), 100_000);
    assert_eq!(parquet.rows[777], [value(777), "0".into()]);
}

#[test]
fn a_byte_order_mark_is_skipped() {
    let (stats, parquet) = run(format!("\u{feff}{ALL_TYPES_CSV}"), &csv_spec(ALL_TYPES));
    assert_eq!(parquet.rows, all_types_rows());
    assert_eq!(stats.bytes_decoded, ALL_TYPES_CSV.len() as u64 + 3);
    let (_, parquet) = run(format!("\u{feff}{ALL_TYPES_JSONL}"), &json_spec(ALL_TYPES));
    assert_eq!(parquet.rows, all_types_rows());
    let mut spec = csv_spec(ALL_TYPES);
    spec.compression = Compression::Gzip;
    let (_, parquet) = run(gzip(format!("\u{feff}{ALL_TYPES_CSV}").as_bytes()), &spec);
    assert_eq!(parquet.rows, all_types_rows());
}

#[test]
fn unusable_specs_are_rejected() {
    let with = |change: fn(&mut ConvertSpec)| {
        let mut spec = csv_spec(ALL_TYPES);
        change(&mut spec);
        match fail(ALL_TYPES_CSV, &spec) {
            ConvertError::InvalidSpec { message } => message,
            e => panic!("{e:?}"),
        }
    };
    assert!(
        with(|s| s.sum_columns = vec!["nope".into()]).contains("\"nope\" is not in the schema")
    );
    assert!(with(|s| s.sum_columns = vec!["day".into()]).contains("date, which cannot be summed"));
    assert!(with(|s| s.batch_rows = 0).contains("positive"));
    assert!(with(|s| s.row_group_rows = 0).contains("positive"));
    assert!(with(|s| s.row_group_bytes = 0).contains("row_group_bytes must be positive"));
    assert!(with(|s| s.zstd_level = 99).contains("99"));
    assert!(with(|s| s.page_bytes = 0).contains("page_bytes must be positive"));
    let unsupported = |s: &mut ConvertSpec| {
        s.schema = Arc::new(Schema::new(vec![arrow_schema::Field::new(
            "x",
            arrow_schema::DataType::UInt8,
            true,
        )]))
    };
    assert!(with(unsupported).contains("unsupported type UInt8"));
    assert!(with(|s| s.schema = Arc::new(Schema::empty())).contains("no columns"));
    let duplicate = |s: &mut ConvertSpec| {
        s.schema = schema(r#"[{"name":"a","type":"int32"},{"name":"a","type":"int32"}]"#)
    };
    assert!(with(duplicate).contains("duplicate column \"a\""));
}

#[test]
fn random_bytes_never_panic() {
    const ALPHABET: &[u8] = b",;\"\\\n\r{}[]:.-+e019aZ \xff\xef\xbb\xbf\0";
    let mut next = xorshift(0x2545_f491_4f6c_dd1d_u64);
    for round in 0..3000 {
        let len = (next() % 120) as usize;
        let input: Vec<u8> = (0..len)
            .map(|_| ALPHABET[next() as usize % ALPHABET.len()])
            .collect();
        let mut spec = match round % 3 {
            0 => csv_spec(ALL_TYPES),
            1 => json_spec(ALL_TYPES),
            _ => csv_spec(r#"[{"name":"s","type":"string","nullable":false}]"#),
        };
        spec.batch_rows = 1 + round % 4;
        spec.empty_strings = if round % 2 == 0 {
            EmptyStrings::Empty
        } else {
            EmptyStrings::Null
        };
        if let Ok(stats) = convert(&input[..], &spec, Vec::new()) {
            assert_eq!(stats.bytes_decoded, len as u64);
        }
        spec.compression = Compression::Gzip;
        assert!(convert(&input[..], &spec, Vec::new()).is_err() || input.is_empty());
    }
}

#[test]
fn serde_spellings() {
    assert_eq!(
        serde_json::to_string(&Compression::Zstd).unwrap(),
        r#""zstd""#
    );
    assert_eq!(
        serde_json::from_str::<Compression>(r#""gzip""#).unwrap(),
        Compression::Gzip
    );
    assert_eq!(
        serde_json::from_str::<EmptyStrings>(r#""empty""#).unwrap(),
        EmptyStrings::Empty
    );
}

#[test]
fn the_parquet_output_fails_as_an_encode_error() {
    struct Full;
    impl Write for Full {
        fn write(&mut self, _: &[u8]) -> io::Result<usize> {
            Err(io::Error::new(io::ErrorKind::StorageFull, "disk full"))
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }
    for threads in [1, 2] {
        let mut spec = csv_spec(ALL_TYPES);
        spec.threads = threads;
        let err = convert(ALL_TYPES_CSV.as_bytes(), &spec, Full).unwrap_err();
        assert!(matches!(err, ConvertError::Encode { .. }), "{err:?}");
        assert!(err.to_string().contains("disk full"), "{err}");
    }
}

#[test]
fn data_pages_close_at_the_page_size() {
    use parquet::basic::PageType;
    use parquet::file::reader::{FileReader, SerializedFileReader};

    // 20,000 distinct 40-byte strings, ≈ 0.8 MB of plain values in one row group.
    let rows: String = (0..20_000u64)
        .map(|i| format!("{i},{:040x}\n", i.wrapping_mul(0x9E37_79B9_7F4A_7C15)))
        .collect();
    let csv = format!("n,s\n{rows}");
    let columns = r#"[{"name":"n","type":"int64"},{"name":"s","type":"string"}]"#;
    let pages = |page_bytes: usize, threads: usize| {
        let mut spec = csv_spec(columns);
        spec.page_bytes = page_bytes;
        spec.dictionary_bytes = 0;
        spec.threads = threads;
        let mut out = Vec::new();
        let stats = convert(csv.as_bytes(), &spec, &mut out).unwrap();
        assert_eq!((stats.rows, stats.row_groups), (20_000, 1));
        let out = bytes::Bytes::from(out);
        let file = SerializedFileReader::new(out.clone()).unwrap();
        let group = file.get_row_group(0).unwrap();
        let count = group
            .get_column_page_reader(1)
            .unwrap()
            .map(|page| page.unwrap())
            .filter(|page| page.page_type() == PageType::DATA_PAGE)
            .count();
        (count, out)
    };
    let (default, whole) = pages(DEFAULT_PAGE_BYTES, 1);
    let (small, split) = pages(64 << 10, 1);
    // The default closes at ≈ 1 MiB (one page), 64 KiB at ≈ 13 pages.
    assert_eq!(default, 1);
    assert!((12..=14).contains(&small), "{small} pages");
    // The same values either way, and the same bytes on two threads.
    let rows = |file: &bytes::Bytes| read_parquet(file.to_vec()).rows;
    assert_eq!(rows(&whole), rows(&split));
    assert_eq!(rows(&split).len(), 20_000);
    assert_eq!(pages(64 << 10, 2).1, split);
}

#[test]
fn dictionaries_that_would_outgrow_their_memory_are_left_off() {
    use parquet::basic::Encoding;
    use parquet::file::reader::{FileReader, SerializedFileReader};

    // 2,000 product codes (14 bytes each in a dictionary page) and their 2,000 numbers,
    // and 4 statuses, over 20,000 rows: built, the codes' dictionary takes ≈ 2,000 ×
    // (14 + 32) = 92 KB and the numbers' ≈ 2,000 × (8 + 16) = 48 KB.
    let mut csv = String::from("sku,product,status\n");
    for i in 0..20_000 {
        let p = i * 7_919 % 2_000;
        csv += &format!(
            "SKU-{p:06},{p},{}\n",
            ["new", "paid", "sent", "done"][i % 4]
        );
    }
    let columns = r#"[{"name":"sku","type":"string"},{"name":"product","type":"int64"},{"name":"status","type":"string"}]"#;
    let with_dictionary = |out: Vec<u8>, rows: i64| {
        let file = SerializedFileReader::new(bytes::Bytes::from(out)).unwrap();
        let group = file.metadata().row_group(0);
        assert_eq!(group.num_rows(), rows);
        (0..3)
            .map(|c| {
                group
                    .column(c)
                    .encodings()
                    .any(|e| e == Encoding::RLE_DICTIONARY)
            })
            .collect::<Vec<_>>()
    };
    let dictionaries = |kib: usize| {
        let mut spec = csv_spec(columns);
        spec.dictionary_bytes = kib << 10;
        let mut out = Vec::new();
        convert(csv.as_bytes(), &spec, &mut out).unwrap();
        let chosen = with_dictionary(out, 20_000);
        // A bookmark source's split, the first 10,000 rows kept and the others set
        // aside: each file chooses as the whole file does (each half holds every code,
        // product and status).
        let (mut kept, mut aside, mut seen) = (Vec::new(), Vec::new(), 0);
        let mut halves = |b: &RecordBatch| {
            let rows = |first: bool| {
                let keep = (seen..seen + b.num_rows()).map(|i| Some((i < 10_000) == first));
                let keep = arrow_array::BooleanArray::from_iter(keep);
                arrow_select::filter::filter_record_batch(b, &keep).unwrap()
            };
            let halves = (rows(true), Some(rows(false)));
            seen += b.num_rows();
            Ok(halves)
        };
        convert_split(
            csv.as_bytes(),
            &spec,
            &mut kept,
            &mut halves,
            Some(&mut aside),
        )
        .unwrap();
        assert_eq!(
            with_dictionary(kept, 10_000),
            chosen,
            "kept rows at {kib} KiB"
        );
        assert_eq!(
            with_dictionary(aside, 10_000),
            chosen,
            "rows set aside at {kib} KiB"
        );
        chosen
    };
    assert_eq!(
        dictionaries(1024),
        [true, true, true],
        "the default: all fit"
    );
    assert_eq!(
        dictionaries(64),
        [false, true, true],
        "the codes' would not"
    );
    assert_eq!(dictionaries(32), [false, false, true], "nor the numbers'");
    assert_eq!(dictionaries(0), [false, false, false], "none");
}

/// `rows` lines of an id (distinct), a status (4 values) and a note (distinct text).
fn orders(rows: usize) -> (String, ConvertSpec) {
    let mut csv = String::from("id,status,note\n");
    for i in 0..rows {
        csv += &format!(
            "{i},{},\"note {}, {i}\"\n",
            ["new", "paid", "sent", "done"][i % 4],
            i * 7
        );
    }
    let columns = r#"[{"name":"id","type":"int64"},{"name":"status","type":"string"},{"name":"note","type":"string"}]"#;
    let mut spec = csv_spec(columns);
    spec.sum_columns = vec!["id".into()];
    (csv, spec)
}

#[test]
fn decoding_beside_encoding_writes_the_same_file() {
    let (csv, mut spec) = orders(30_000);
    spec.row_group_rows = 10_000;
    let bad = csv.replace("\n20000,", "\n2000x,");
    // Compressed input is inflated ahead by the encoding threads (see `input`).
    for (compression, pack) in [
        (Compression::None, (|b| b.to_vec()) as fn(&[u8]) -> Vec<u8>),
        (Compression::Gzip, gzip),
        (Compression::Zstd, zstd),
    ] {
        spec.compression = compression;
        let input = pack(csv.as_bytes());
        let mut files = Vec::new();
        for threads in [1, 2, 3] {
            spec.threads = threads;
            let mut out = Vec::new();
            let stats = convert(&input[..], &spec, &mut out).unwrap();
            let case = format!("{compression}, {threads} threads");
            assert_eq!((stats.rows, stats.row_groups), (30_000, 3), "{case}");
            assert_eq!(stats.sums["id"].to_string(), "449985000", "{case}");
            assert_eq!(stats.bytes_read, input.len() as u64, "{case}");
            assert_eq!(stats.bytes_decoded, csv.len() as u64, "{case}");
            files.push(out);
        }
        assert!(
            files[0] == files[1] && files[1] == files[2],
            "{compression}: byte for byte"
        );
        let bad = pack(bad.as_bytes());
        for threads in [1, 2] {
            spec.threads = threads;
            let e = convert(&bad[..], &spec, Vec::new()).unwrap_err();
            assert_eq!(
                e.to_string(),
                r#"line 20002: column "id": cannot parse "2000x" as int64"#,
                "{compression}, {threads} threads"
            );
        }
    }
}

#[test]
fn a_split_conversion_is_the_same_whatever_the_threads() {
    let (csv, mut spec) = orders(30_000);
    spec.row_group_rows = 10_000;
    // Rows whose id ends in 7 are set aside; a batch holding row 25,000 fails when
    // `fail` says so.
    let run = |spec: &ConvertSpec, fail: bool| {
        let (mut kept, mut aside) = (Vec::new(), Vec::new());
        let mut split = |b: &RecordBatch| {
            let ids = arrow_array::cast::AsArray::as_primitive::<arrow_array::types::Int64Type>(
                b.column(0),
            );
            if fail && ids.values().contains(&25_000) {
                return Err(ConvertError::parse(None, None, "split failed"));
            }
            let rows = |aside: bool| {
                let keep = ids.values().iter().map(|i| Some((i % 10 == 7) == aside));
                let keep = arrow_array::BooleanArray::from_iter(keep);
                arrow_select::filter::filter_record_batch(b, &keep).unwrap()
            };
            Ok((rows(false), Some(rows(true))))
        };
        convert_split(
            csv.as_bytes(),
            spec,
            &mut kept,
            &mut split,
            Some(&mut aside),
        )
        .map(|stats| (stats, kept, aside))
    };
    let mut files = Vec::new();
    for threads in [1, 2, 3] {
        spec.threads = threads;
        let (stats, kept, aside) = run(&spec, false).unwrap();
        assert_eq!(
            (stats.rows, stats.row_groups),
            (27_000, 3),
            "{threads} threads"
        );
        // 0 + 1 + … + 29,999 less the 3,000 ids ending in 7 (their sum: 3,000 × 7 +
        // 10 × (0 + … + 2,999)).
        assert_eq!(
            stats.sums["id"].to_string(),
            (449_985_000 - 21_000 - 44_985_000).to_string()
        );
        let ids = |file: &Vec<u8>| -> Vec<String> {
            read_parquet(file.clone())
                .rows
                .into_iter()
                .map(|r| r[0].clone())
                .collect()
        };
        let (kept_ids, aside_ids) = (ids(&kept), ids(&aside));
        assert_eq!((kept_ids.len(), aside_ids.len()), (27_000, 3_000));
        assert!(kept_ids.iter().all(|i| !i.ends_with('7')));
        assert!(aside_ids.iter().all(|i| i.ends_with('7')));
        files.push((kept, aside));
    }
    assert!(
        files[0] == files[1] && files[1] == files[2],
        "byte for byte"
    );
    for threads in [1, 2] {
        spec.threads = threads;
        let error = run(&spec, true).expect_err("the split fails");
        assert_eq!(error.to_string(), "split failed", "{threads} threads");
    }
}

#[test]
fn the_distinct_values_of_a_row_group_are_predicted_from_the_first_ones() {
    let close = |got: f64, want: f64| (got - want).abs() <= want * 0.02;
    assert_eq!(
        expected_distinct(9_500, 9_500, 500_000),
        500_000.0,
        "all distinct"
    );
    assert!(
        close(expected_distinct(10_000, 100, 500_000), 100.0),
        "a vocabulary of 100"
    );
    // 9,500 draws from 30,000 values give ~8,140 distinct: the 30,000 are found again.
    let seen = 30_000.0 * -(-9_500.0_f64 / 30_000.0).exp_m1();
    let got = expected_distinct(9_500, seen.round() as usize, 500_000);
    assert!(close(got, 30_000.0), "{got}");
}

#[test]
fn values_that_keep_arriving_new_are_not_taken_for_a_vocabulary() {
    use arrow_array::{Int64Array, StringArray};
    let rows = 500_000;
    let expected =
        |column: &dyn arrow_array::Array| profile(column).unwrap().expected_distinct(rows);
    // Times in order, one to three rows a second: 1,352 rows, ~680 distinct, and the
    // halves share only the second between them.
    let times: Int64Array = (0..1_352_i64)
        .map(|i| Some(1_700_000_000 + i / 2))
        .collect();
    assert_eq!(expected(&times), rows as f64, "times in order");
    // Draws from a vocabulary of 3,000 codes: the same estimate as before, both ways.
    let mut rng = 0x2545_f491_4f6c_dd1d_u64;
    let codes: StringArray = (0..1_352)
        .map(|_| {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            Some(format!("code-{}", rng % 3_000))
        })
        .collect();
    let got = expected(&codes);
    assert!(
        (2_400.0..3_600.0).contains(&got),
        "a vocabulary of 3,000: {got}"
    );
    // A column sorted by a few values (one in each half): a vocabulary, not fresh values.
    let sorted: StringArray = (0..1_352)
        .map(|i| Some(if i < 676 { "a" } else { "b" }))
        .collect();
    assert!(expected(&sorted) < 3.0, "two values");
}

#[test]
fn mostly_distinct_columns_are_written_without_a_dictionary() {
    use parquet::basic::Encoding;
    use parquet::file::reader::{FileReader, SerializedFileReader};

    // Batches of 300 rows: wide rows fill a batch's bytes before 1,000 rows, and the
    // choice is then made from the first batches together.
    for batch_rows in [None, Some(300)] {
        let (csv, mut spec) = orders(5_000);
        if let Some(rows) = batch_rows {
            spec.batch_rows = rows;
        }
        let mut out = Vec::new();
        convert(csv.as_bytes(), &spec, &mut out).unwrap();
        let file = SerializedFileReader::new(bytes::Bytes::from(out)).unwrap();
        let group = file.metadata().row_group(0);
        let dictionary = |c: usize| {
            group
                .column(c)
                .encodings()
                .any(|e| matches!(e, Encoding::RLE_DICTIONARY | Encoding::PLAIN_DICTIONARY))
        };
        assert!(!dictionary(0), "id: every value distinct ({batch_rows:?})");
        assert!(
            group
                .column(0)
                .encodings()
                .any(|e| e == Encoding::DELTA_BINARY_PACKED),
            "id: counting up, stored as differences ({batch_rows:?})"
        );
        assert!(dictionary(1), "status: four values ({batch_rows:?})");
        assert!(
            !dictionary(2),
            "note: every value distinct ({batch_rows:?})"
        );
        assert_eq!(group.num_rows(), 5_000);
    }
    // Too few rows to tell: the dictionary stays on.
    let (csv, spec) = orders(50);
    let mut out = Vec::new();
    convert(csv.as_bytes(), &spec, &mut out).unwrap();
    let file = SerializedFileReader::new(bytes::Bytes::from(out)).unwrap();
    let column = file.metadata().row_group(0).column(0).clone();
    assert!(column.encodings().any(|e| e == Encoding::RLE_DICTIONARY));
}

#[test]
fn lineage_columns_are_functions_of_the_object_version() {
    let mut spec = csv_spec(r#"[{"name":"id","type":"int64"}]"#);
    spec.lineage = vec![
        ("_key".into(), Lineage::Key),
        ("_version".into(), Lineage::VersionId),
        ("_etag".into(), Lineage::Etag),
        ("_modified".into(), Lineage::LastModified),
        ("_row".into(), Lineage::RowNumber),
    ];
    spec.object = Some(ObjectInfo {
        key: "in/a.csv".into(),
        version_id: None,
        etag: "9b2cf535f27731c974343645a3985328".into(),
        last_modified_ms: 1_733_300_000_123,
    });
    spec.batch_rows = 2;
    let input = "id\n1\n2\n3\n";
    let (stats, file) = run(input, &spec);
    let row = |id: &str, n: &str| {
        format!("{id}|in/a.csv|∅|9b2cf535f27731c974343645a3985328|2024-12-04T08:13:20.123Z|{n}")
    };
    assert_eq!(
        file.rows,
        text_rows(&[&row("1", "1"), &row("2", "2"), &row("3", "3")]),
        "row numbers count on across batches"
    );
    assert_eq!(stats.rows, 3);
    assert!(
        file.schema
            .field_with_name("_version")
            .unwrap()
            .is_nullable()
    );
    assert!(!file.schema.field_with_name("_row").unwrap().is_nullable());
    let again = run(input, &spec).1;
    assert_eq!(
        again.rows, file.rows,
        "the same version gives the same rows"
    );

    // A lineage column named like a schema column is refused before any input is read.
    spec.lineage.push(("id".into(), Lineage::Etag));
    let err = convert(input.as_bytes(), &spec, Vec::new()).unwrap_err();
    assert!(err.to_string().contains("duplicate column \"id\""), "{err}");
}

#[test]
fn the_rescued_column_follows_the_schema_and_is_null_when_nothing_is_rescued() {
    let mut spec = csv_spec(r#"[{"name":"id","type":"int64"}]"#);
    spec.bad_values = BadValues::Rescue;
    spec.rescue_column = "_extra".into();
    let (stats, file) = run("id\n1\n", &spec);
    assert_eq!(file.rows, text_rows(&["1|∅"]));
    let field = file.schema.field(1);
    assert_eq!(field.name(), "_extra");
    assert_eq!(FieldType::from_field(field), Some(FieldType::Json));
    assert_eq!(stats.rescued_rows, 0);
}
