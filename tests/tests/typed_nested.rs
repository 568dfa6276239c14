//! The same nested records written by peer libraries as Parquet and ORC (pyarrow) and as Avro
//! (fastavro), `tests/fixtures/nested/cloudtrail.{parquet,orc,avro}` (NULLs at every level:
//! a NULL struct, nested struct, list, element, element field, map and map value, empty lists
//! and maps), read by three different readers (arrow-rs's Parquet reader, arrow-avro,
//! orc-rust) through the converter's one reading of Arrow arrays: the three outputs are equal
//! row by row, with struct, array and map columns, columns read by path (a struct field, a
//! list element's field, a map's key) and JSON texts read into a `json` column (compacted).

use std::fs::File;

use arrow_array::cast::AsArray;
use arrow_array::{Array, RecordBatch};
use bytes::Bytes;
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use serde_json::{Value, json};
use tidemark::convert::{ConvertSpec, InputFormat, convert};
use tidemark::schema::ColumnSpec;

fn fixture(name: &str) -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fixtures/nested")
        .join(name)
}

/// The typed fixtures' schema, the JSON texts read as `json`, and columns read by path.
fn columns() -> Vec<ColumnSpec> {
    let mut schema: Vec<Value> =
        serde_json::from_reader(File::open(fixture("cloudtrail-typed.schema.json")).unwrap())
            .unwrap();
    for c in &mut schema {
        if c["name"] == "requestParameters" || c["name"] == "responseElements" {
            c["type"] = json!("json");
        }
    }
    schema.extend([
        json!({"name": "user_arn", "path": "userIdentity.arn", "type": "string"}),
        json!({"name": "issuer_type", "path": "userIdentity.sessionContext.sessionIssuer.type", "type": "string"}),
        json!({"name": "first_arn", "path": "resources[0].ARN", "type": "string"}),
        json!({"name": "signature", "path": "additionalEventData.SignatureVersion", "type": "string"}),
    ]);
    serde_json::from_value(Value::Array(schema)).unwrap()
}

fn read(format: InputFormat, ext: &str) -> RecordBatch {
    let spec = ConvertSpec::with_columns(format, &columns());
    let mut out = Vec::new();
    let stats = convert(
        File::open(fixture(&format!("cloudtrail.{ext}"))).unwrap(),
        &spec,
        &mut out,
    )
    .unwrap_or_else(|e| panic!("{ext}: {e}"));
    assert_eq!(stats.rows, 120, "{ext}");
    assert!(stats.ignored.is_empty(), "{ext}: {:?}", stats.ignored);
    let reader = ParquetRecordBatchReaderBuilder::try_new(Bytes::from(out))
        .unwrap()
        .build()
        .unwrap();
    let batches: Vec<RecordBatch> = reader.map(Result::unwrap).collect();
    arrow_select::concat::concat_batches(&batches[0].schema(), &batches).unwrap()
}

#[test]
fn nested_files_read_alike_from_parquet_avro_and_orc() {
    let parquet = read(InputFormat::Parquet, "parquet");
    let avro = read(InputFormat::Avro, "avro");
    let orc = read(InputFormat::Orc, "orc");
    for (name, other) in [("avro", &avro), ("orc", &orc)] {
        assert_eq!(other.schema(), parquet.schema(), "{name}");
        for (i, field) in parquet.schema().fields().iter().enumerate() {
            assert_eq!(
                other.column(i).as_ref(),
                parquet.column(i).as_ref(),
                "{name}: column {}",
                field.name()
            );
        }
    }
    // The path columns hold what the nested columns hold at their paths.
    let column = |name: &str| parquet.column_by_name(name).unwrap().clone();
    let user = column("userIdentity");
    let arns = user
        .as_struct()
        .column_by_name("arn")
        .unwrap()
        .as_string::<i32>()
        .clone();
    let user_arn = column("user_arn");
    for row in 0..parquet.num_rows() {
        let nested = (!user.is_null(row) && !arns.is_null(row)).then(|| arns.value(row));
        let by_path = (!user_arn.is_null(row)).then(|| user_arn.as_string::<i32>().value(row));
        assert_eq!(nested, by_path, "row {row}");
    }
    let signatures = column("signature");
    assert!(
        signatures.null_count() > 0 && signatures.null_count() < signatures.len(),
        "a map key is found in some rows and absent in others"
    );
    // JSON texts come out compact, keys in their order.
    let params = column("requestParameters");
    let text = params.as_string::<i32>();
    let row = (0..text.len())
        .find(|&r| text.is_valid(r) && text.value(r).contains('{'))
        .unwrap();
    let value = text.value(row);
    assert!(!value.contains(": ") && !value.contains(", "), "{value}");
    let parsed: Value = serde_json::from_str(value).unwrap();
    assert!(parsed.is_object(), "{value}");
}
