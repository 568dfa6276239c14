//! `outputs SOURCE`: the source's Parquet outputs, read back: rows and sums per file and in
//! total (what the lake holds, independent of the ledger).

use std::process::ExitCode;

use super::print_json;
use crate::backend::Backend;
use crate::render::Table;
use crate::totals::{lake, lake_totals};
use crate::{Error, Out};

/// `tidemark outputs`.
pub async fn outputs_command(
    backend: &Backend,
    source: &str,
    json: bool,
    out: Out<'_>,
) -> Result<ExitCode, Error> {
    let source = backend.source(source)?;
    let files = lake(&backend.pipeline, source).await?;
    let total = lake_totals(source, &files)?;
    if json {
        print_json(
            out,
            &serde_json::json!({"source_id": source.id(), "files": files, "total": total}),
        )?;
        return Ok(ExitCode::SUCCESS);
    }
    let columns: Vec<String> = source.doc.sum_columns.clone();
    let mut headers = vec![">ROWS".to_string(), ">BYTES".to_string()];
    headers.extend(columns.iter().map(|c| format!(">SUM({c})")));
    headers.push("OUTPUT".into());
    let mut t = Table::new(&headers.iter().map(String::as_str).collect::<Vec<_>>());
    for f in &files {
        let mut row = vec![f.totals.rows.to_string(), f.bytes.to_string()];
        row.extend(columns.iter().map(|c| f.totals.sum_text(c)));
        row.push(format!("s3://{}/{}", f.bucket, f.key));
        t.row(row);
    }
    let mut row = vec![total.rows.to_string(), String::new()];
    row.extend(columns.iter().map(|c| total.sum_text(c)));
    row.push(format!("total of {} file(s)", files.len()));
    t.row(row);
    write!(out, "{}", t.render())?;
    Ok(ExitCode::SUCCESS)
}
