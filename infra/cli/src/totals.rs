//! Exact rows and column sums: as the ledger recorded them (the committed versions of a
//! source) and as the lake holds them (its Parquet outputs, read back). Integer and decimal
//! sums are added in `i128`, never through floats, so two totals that should match match
//! exactly; float columns are added in `f64`.

use std::collections::BTreeMap;

use serde::Serialize;
use tidemark::config::Source;
use tidemark::convert::SumValue;
use tidemark::model::{Record, Target};
use tidemark::ports::GetOutcome;
use tidemark::process::Pipeline;
use tokio::io::AsyncReadExt;

use crate::Error;

/// Rows and the sums of a source's `sum_columns`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Totals {
    /// Rows.
    pub rows: u64,
    /// Sum of each configured column (serialized as exact decimal strings).
    pub sums: BTreeMap<String, SumValue>,
}

/// `a + b`, exactly; `None` on overflow or when they are not sums of one column type.
pub fn add_sums(a: SumValue, b: SumValue) -> Option<SumValue> {
    use SumValue::{Decimal, Float, Int};
    match (a, b) {
        (Int(x), Int(y)) => x.checked_add(y).map(Int),
        (
            Decimal {
                unscaled: x,
                scale: s,
            },
            Decimal {
                unscaled: y,
                scale: t,
            },
        ) if s == t => x
            .checked_add(y)
            .map(|unscaled| Decimal { unscaled, scale: s }),
        (Float(x), Float(y)) => Some(Float(x + y)),
        _ => None,
    }
}

impl Totals {
    /// No rows, and a zero of the right type for each of the source's sum columns.
    pub fn zero(source: &Source) -> Self {
        let sums = source
            .doc
            .sum_columns
            .iter()
            .filter_map(|name| {
                let column = source.doc.schema.iter().find(|c| &c.name == name)?;
                let zero = SumValue::parse_for(&column.ty.scalar()?, "0").ok()?;
                Some((name.clone(), zero))
            })
            .collect();
        Self { rows: 0, sums }
    }

    /// Add rows and sums (columns the totals do not track are ignored).
    pub fn add(&mut self, rows: u64, sums: &BTreeMap<String, SumValue>) -> Result<(), Error> {
        self.rows += rows;
        for (name, value) in sums {
            if let Some(total) = self.sums.get_mut(name) {
                *total = add_sums(*total, *value)
                    .ok_or_else(|| format!("sum of {name}: {total} + {value} does not add up"))?;
            }
        }
        Ok(())
    }

    /// Add rows and sums as the ledger records them (exact decimal strings), each read back
    /// for its column's type.
    pub fn add_recorded(
        &mut self,
        source: &Source,
        rows: u64,
        sums: &BTreeMap<String, String>,
    ) -> Result<(), Error> {
        let mut parsed = BTreeMap::new();
        for (name, text) in sums {
            let Some(ty) = source
                .doc
                .schema
                .iter()
                .find(|c| &c.name == name)
                .and_then(|c| c.ty.scalar())
            else {
                continue;
            };
            let value = SumValue::parse_for(&ty, text)
                .map_err(|e| format!("source {}: recorded sum of {name}: {e}", source.id()))?;
            parsed.insert(name.clone(), value);
        }
        self.add(rows, &parsed)
    }

    /// The sum of `column`, as text (`-` when not tracked).
    pub fn sum_text(&self, column: &str) -> String {
        self.sums
            .get(column)
            .map_or_else(|| "-".to_string(), ToString::to_string)
    }
}

/// Rows and sums the ledger records for a source: over every record with a committed
/// version (done, or waiting for a newer version while the committed one is in the lake).
/// A delete contributes nothing.
pub fn ledger_totals(source: &Source, records: &[Record]) -> Result<Totals, Error> {
    let mut t = Totals::zero(source);
    for r in records {
        if let Some(c) = &r.committed
            && matches!(c.target, Target::Version(_))
        {
            t.add_recorded(source, c.rows, &c.sums)?;
        }
    }
    Ok(t)
}

/// One Parquet output, read back.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct OutputFile {
    /// Bucket.
    pub bucket: String,
    /// Key.
    pub key: String,
    /// ETag.
    pub etag: String,
    /// Size in bytes.
    pub bytes: u64,
    /// Rows and sums in it.
    pub totals: Totals,
}

/// Every output of a source (the `.parquet` objects under its output prefix), read back:
/// the files and their rows and sums.
pub async fn lake(pipeline: &Pipeline, source: &Source) -> Result<Vec<OutputFile>, Error> {
    let out = &source.doc.output;
    let mut files = Vec::new();
    let mut token: Option<String> = None;
    loop {
        let page = pipeline
            .store
            .list(&out.bucket, &out.prefix, token.as_deref())
            .await?;
        // Not the late rows and bookmark index of a source with bookmark keys (`_late/`,
        // `_bookmark/`: hidden from Athena and Hive as well).
        let hidden = |k: &str| {
            k.strip_prefix(out.prefix.as_str())
                .is_some_and(|rest| rest.starts_with('_'))
        };
        for o in page
            .objects
            .iter()
            .filter(|o| o.key.ends_with(".parquet") && !hidden(&o.key))
        {
            let GetOutcome::Found { mut body, meta } =
                pipeline.store.get(&out.bucket, &o.key, None).await?
            else {
                continue; // deleted since the listing
            };
            let mut bytes = Vec::with_capacity(meta.size as usize);
            body.read_to_end(&mut bytes).await?;
            let (rows, sums) = tidemark::convert::tally_parquet(
                bytes::Bytes::from(bytes),
                &source.doc.sum_columns,
            )
            .map_err(|e| format!("s3://{}/{}: {e}", out.bucket, o.key))?;
            let mut totals = Totals::zero(source);
            totals.add(rows, &sums)?;
            files.push(OutputFile {
                bucket: out.bucket.clone(),
                key: o.key.clone(),
                etag: meta.etag,
                bytes: meta.size,
                totals,
            });
        }
        match page.next {
            Some(next) => token = Some(next),
            None => return Ok(files),
        }
    }
}

/// Rows and sums over a source's whole lake.
pub fn lake_totals(source: &Source, files: &[OutputFile]) -> Result<Totals, Error> {
    let mut t = Totals::zero(source);
    for f in files {
        t.add(f.totals.rows, &f.totals.sums)?;
    }
    Ok(t)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sums_add_exactly_and_refuse_mixed_types() {
        let d = |unscaled| SumValue::Decimal { unscaled, scale: 2 };
        assert_eq!(add_sums(d(10), d(-3)), Some(d(7)));
        assert_eq!(add_sums(SumValue::Int(i128::MAX), SumValue::Int(1)), None);
        assert_eq!(add_sums(SumValue::Int(1), d(1)), None);
        assert_eq!(
            add_sums(SumValue::Float(0.5), SumValue::Float(0.25)),
            Some(SumValue::Float(0.75))
        );
    }
}
