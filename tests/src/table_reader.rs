//! Delta tables on the backend pairs, and an independent reader of them: the Python
//! `deltalake` package (`tests/readers/read_delta.py`, in the virtualenv
//! `.local/venv-readers` that `infra/test.sh` installs).

use std::path::PathBuf;
use std::process::Command;

use serde_json::Value;
use tidemark::config::Source;
use tidemark_delta::TableStore;

use crate::Backends;

/// Where the tables of `b` live: under the folder store's root, or on the S3 emulator.
pub fn tables(b: &Backends) -> TableStore {
    match b.folder_root() {
        Some(root) => TableStore::Local { root },
        None => TableStore::s3_from_env(),
    }
}

/// A committer of `config`'s tables on `b`, backing off briefly between attempts (the
/// suites' races resolve in milliseconds).
pub fn publisher(
    b: &Backends,
    config: &std::sync::Arc<tidemark::config::Config>,
) -> tidemark_delta::Publisher {
    let mut p = tidemark_delta::Publisher::new(
        config.clone(),
        b.ledger.clone(),
        b.store.clone(),
        tables(b),
        std::sync::Arc::new(b.clock.clone()),
    );
    p.settings.backoff_base = std::time::Duration::from_millis(5);
    p.settings.backoff_max = std::time::Duration::from_millis(200);
    p
}

/// The URI of `source`'s table for the reader: a folder, or `s3://…`.
pub fn table_uri(b: &Backends, source: &Source) -> String {
    let url = tables(b).url(source).expect("table URL");
    match url.scheme() {
        "file" => url
            .to_file_path()
            .expect("a file URL is a path")
            .display()
            .to_string(),
        _ => url.to_string(),
    }
}

/// The Python of the readers' virtualenv (asserted to exist: the suites never skip).
pub fn reader_python() -> PathBuf {
    let python =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../.local/venv-readers/bin/python");
    assert!(
        python.exists(),
        "{} is missing: the Delta reader suites need the `deltalake` Python package. Run them \
         with `infra/test.sh`, which installs it into .local/venv-readers",
        python.display()
    );
    python
}

fn reader_script() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("readers/read_delta.py")
}

/// The table at `uri` read by the Python `deltalake` package (latest version, or `version`):
/// the JSON object `read_delta.py` prints (version, files, rows, columns, the sorted values
/// of the first column, sums, every row).
pub fn read_table(uri: &str, version: Option<i64>) -> Value {
    let mut cmd = Command::new(reader_python());
    cmd.arg(reader_script()).arg(uri);
    if let Some(v) = version {
        cmd.arg(v.to_string());
    }
    let out = cmd.output().expect("run the Delta reader");
    assert!(
        out.status.success(),
        "the Delta reader failed on {uri}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("reader output is JSON")
}
