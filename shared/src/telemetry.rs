//! Logging: JSON lines with structured fields (source, bucket, key, version, outcome, rows,
//! duration), filtered by `RUST_LOG` (default `info`).

/// Install the JSON subscriber once; later calls do nothing.
pub fn init() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let _ = tracing_subscriber::fmt()
        .json()
        .with_env_filter(filter)
        .with_current_span(false)
        .with_target(false)
        .try_init();
}
