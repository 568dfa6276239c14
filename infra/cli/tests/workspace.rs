//! The embedded workspace: `tidemark init` makes it, every other command needs it, so a
//! mistyped `--root` or a missing landing bucket is an error naming it — never an empty
//! listing that looks like "nothing new".

use std::path::Path;
use std::process::ExitCode;

use serde_json::Value;

/// `tidemark --root ROOT --config DOC ARGS`, as `main` runs it: exit code and stdout, or the
/// error `main` would print.
async fn tidemark(root: &Path, doc: &Path, args: &[&str]) -> Result<(ExitCode, String), String> {
    let (root, doc) = (root.display().to_string(), doc.display().to_string());
    let mut argv = vec![
        "tidemark",
        "--backend",
        "local",
        "--root",
        &root,
        "--config",
        &doc,
    ];
    argv.extend(args);
    let cli = tidemark_cli::parse_args(&argv).expect("valid command line");
    let mut out = Vec::new();
    match tidemark_cli::execute(cli, &mut out).await {
        Ok(code) => Ok((code, String::from_utf8(out).unwrap())),
        Err(e) => Err(e.to_string()),
    }
}

fn states(json: &str) -> Vec<(String, String)> {
    let report: Value = serde_json::from_str(json).unwrap();
    report["checked"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            let name = c["name"].as_str().unwrap();
            let name = Path::new(name).file_name().unwrap().to_string_lossy();
            (name.to_string(), c["state"].as_str().unwrap().to_string())
        })
        .collect()
}

#[tokio::test]
async fn commands_need_a_workspace_that_init_makes() {
    let dir = tempfile::tempdir().unwrap();
    let doc = dir.path().join("sources.json");
    std::fs::write(&doc, tidemark_cli::demo::sources_document().to_string()).unwrap();
    let root = dir.path().join("ws");

    // A root that does not exist: every command says so, names it and creates nothing.
    for args in [
        &["run"][..],
        &["status"],
        &["audit"],
        &["reset", "--source", "orders"],
    ] {
        let err = tidemark(&root, &doc, args).await.unwrap_err();
        assert!(
            err.contains(&format!("no workspace at {}", root.display()))
                && err.contains("the folder does not exist")
                && err.contains("tidemark init"),
            "{args:?}: {err}"
        );
    }
    assert!(!root.exists());
    // A folder that is not a workspace (no ledger) is refused too.
    std::fs::create_dir(&root).unwrap();
    let err = tidemark(&root, &doc, &["status"]).await.unwrap_err();
    assert!(err.contains("it has no ledger.db"), "{err}");
    assert!(!root.join("ledger.db").exists());

    // init makes the ledger and a folder per bucket the sources name; again, finds them.
    let (code, json) = tidemark(&root, &doc, &["init", "--json"]).await.unwrap();
    assert_eq!(code, ExitCode::SUCCESS);
    let made = |state: &str| {
        vec![
            ("ws".to_string(), "exists".to_string()),
            ("ledger.db".into(), state.into()),
            ("landing".into(), state.into()),
            ("lake".into(), state.into()),
        ]
    };
    assert_eq!(states(&json), made("created"));
    let (_, json) = tidemark(&root, &doc, &["init", "--json"]).await.unwrap();
    assert_eq!(states(&json), made("exists"));
    let (code, text) = tidemark(&root, &doc, &["run"]).await.unwrap();
    assert_eq!(code, ExitCode::SUCCESS, "{text}");
    assert!(text.contains("total"), "{text}");

    // A landing bucket that is gone is an error naming it, not "LISTED 0".
    std::fs::remove_dir(root.join("buckets/landing")).unwrap();
    let err = tidemark(&root, &doc, &["run"]).await.unwrap_err();
    assert!(
        err.contains("s3://landing/") && err.contains("NoSuchBucket"),
        "{err}"
    );
}
