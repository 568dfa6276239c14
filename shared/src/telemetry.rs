//! Logging: JSON lines on stderr with structured fields (source, bucket, key, version,
//! outcome, rows, duration), filtered by `RUST_LOG`.

/// Install the JSON subscriber once (later calls do nothing). `default` is the filter when
/// `RUST_LOG` is unset: `info` for the Lambdas, `warn` for the CLI.
pub fn init(default: &str) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default));
    let _ = tracing_subscriber::fmt()
        .json()
        .with_env_filter(filter)
        .with_current_span(false)
        .with_target(false)
        .with_writer(std::io::stderr)
        .try_init();
}
