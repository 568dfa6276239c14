//! Why a conversion failed: [`ConvertError`], whose messages name the line and column.

use super::*;

/// Why a conversion failed. The messages read well after a prefix naming the object,
/// such as `s3://bucket/key: `.
#[derive(Debug, thiserror::Error)]
pub enum ConvertError {
    /// The input is not valid for the format and schema: a value that does not parse,
    /// a wrong number of fields, invalid UTF-8, a NULL in a non-nullable column, a JSON
    /// line that is not one object…, or a sum that overflows.
    #[error("{}{message}", location(.record, .line, .column))]
    Parse {
        /// 1-based physical line of the decompressed input where the offending record
        /// starts (the CSV header is line 1), when known.
        line: Option<u64>,
        /// 1-based ordinal of the offending record, for formats whose records are not
        /// lines (JSON documents: the n-th record of the file, whatever its line).
        record: Option<std::num::NonZeroU64>,
        /// The offending column, when known.
        column: Option<String>,
        /// What is wrong.
        message: String,
    },
    /// The compressed stream is corrupt or truncated.
    #[error("cannot decompress input: {message}")]
    Decompress {
        /// Decompressor's complaint, prefixed with the compression.
        message: String,
    },
    /// The decompressed input exceeds [`ConvertSpec::max_decoded_bytes`].
    #[error("decompressed input exceeds the limit of {limit} bytes")]
    TooLarge {
        /// The limit.
        limit: u64,
    },
    /// The Parquet writer failed (including failures of the output).
    #[error("cannot write Parquet: {message}")]
    Encode {
        /// Writer's complaint.
        message: String,
    },
    /// Reading the input failed.
    #[error("cannot read input: {0}")]
    Io(#[source] std::io::Error),
    /// The conversion made no progress and was abandoned, or its thread died (the
    /// watchdog's verdict, [`progress::Abandoned`]).
    #[error("{0}")]
    Abandoned(#[from] progress::Abandoned),
    /// The spec itself is unusable (unknown or unsummable sum column, unsupported column
    /// type, zero batch or row group size, invalid zstd level…); no input was read.
    #[error("invalid conversion spec: {message}")]
    InvalidSpec {
        /// What is wrong.
        message: String,
    },
}

fn location(
    record: &Option<std::num::NonZeroU64>,
    line: &Option<u64>,
    column: &Option<String>,
) -> String {
    let line = match (record, line) {
        (Some(r), Some(l)) => format!("record {r} (line {l}): "),
        (Some(r), None) => format!("record {r}: "),
        (None, Some(l)) => format!("line {l}: "),
        (None, None) => String::new(),
    };
    let column = column
        .as_ref()
        .map(|c| format!("column {c:?}: "))
        .unwrap_or_default();
    line + &column
}

impl From<std::io::Error> for ConvertError {
    /// Unwraps the classified errors that [`input`] sends through `io::Read`.
    fn from(e: std::io::Error) -> Self {
        e.downcast::<ConvertError>()
            .unwrap_or_else(ConvertError::Io)
    }
}

impl From<parquet::errors::ParquetError> for ConvertError {
    fn from(e: parquet::errors::ParquetError) -> Self {
        Self::Encode {
            message: e.to_string(),
        }
    }
}

impl ConvertError {
    pub(crate) fn parse(
        line: Option<u64>,
        column: Option<&str>,
        message: impl Into<String>,
    ) -> Self {
        Self::Parse {
            line,
            record: None,
            column: column.map(str::to_owned),
            message: message.into(),
        }
    }

    pub(crate) fn invalid_spec(message: impl Into<String>) -> Self {
        Self::InvalidSpec {
            message: message.into(),
        }
    }
}
