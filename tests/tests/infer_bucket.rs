//! `tidemark infer s3://bucket/prefix/` on both backend pairs: the same objects landed in the
//! S3 emulator and in the embedded backend's folders give the same proposal, sampled across
//! the listing, each file named by its `s3://` URL, and every sampled object converts.

use std::path::Path;
use std::process::ExitCode;

use tidemark_tests::Stack;

async fn infer(argv: &[&str]) -> (ExitCode, serde_json::Value) {
    let cli = tidemark_cli::parse_args(argv).expect("valid command line");
    let mut out = Vec::new();
    let code = tidemark_cli::execute(cli, &mut out)
        .await
        .expect("infer runs");
    let report = serde_json::from_slice(&out).expect("a JSON report");
    (code, report)
}

fn sample_files() -> Vec<(String, Vec<u8>)> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../infra/sample/landing");
    let mut files = Vec::new();
    for dir in ["orders/2026/11/29"] {
        let mut names: Vec<_> = std::fs::read_dir(root.join(dir))
            .expect("sample folder")
            .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        for name in names {
            let bytes = std::fs::read(root.join(dir).join(&name)).expect("sample file");
            files.push((format!("{dir}/{name}"), bytes));
        }
    }
    files
}

fn schema(report: &serde_json::Value) -> String {
    report["source"]["schema"].to_string()
}

#[tokio::test]
async fn a_bucket_prefix_is_sampled_alike_on_both_backend_pairs() {
    let files = sample_files();
    assert_eq!(files.len(), 3);
    // The S3 emulator.
    let stack = Stack::new().await;
    for (key, bytes) in &files {
        stack
            .s3
            .put_object()
            .bucket(&stack.landing)
            .key(key)
            .body(bytes.clone().into())
            .send()
            .await
            .expect("land a sample file");
    }
    let url = format!("s3://{}/orders/", stack.landing);
    let (code, on_s3) = infer(&[
        "tidemark",
        "--backend",
        "aws",
        "--json",
        "infer",
        "--sample-files",
        "2",
        &url,
    ])
    .await;
    assert_eq!(code, ExitCode::SUCCESS, "{on_s3:#}");
    assert_eq!(on_s3["checked"], true);
    let paths: Vec<&str> = on_s3["files"]
        .as_array()
        .expect("files")
        .iter()
        .map(|f| f["path"].as_str().expect("path"))
        .collect();
    assert_eq!(
        paths,
        [
            format!("{url}2026/11/29/orders-0001.csv"),
            format!("{url}2026/11/29/orders-0002.csv.gz"),
        ],
        "two of three, spread over the listing, named by URL"
    );
    assert!(
        on_s3["notes"]
            .to_string()
            .contains("2 of 3 listed objects sampled"),
        "{}",
        on_s3["notes"]
    );
    // The embedded pair: the same files in the bucket's folder under a root.
    let root = tempfile::tempdir().expect("tempdir");
    for (key, bytes) in &files {
        let path = root.path().join("buckets/landing").join(key);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, bytes).unwrap();
    }
    let root_arg = root.path().display().to_string();
    let (code, embedded) = infer(&[
        "tidemark",
        "--backend",
        "local",
        "--root",
        &root_arg,
        "--json",
        "infer",
        "--sample-files",
        "2",
        "s3://landing/orders/",
    ])
    .await;
    assert_eq!(code, ExitCode::SUCCESS, "{embedded:#}");
    assert_eq!(
        schema(&embedded),
        schema(&on_s3),
        "the same proposal on both pairs"
    );
    // All three: the malformed one makes `quantity` text, said in a note.
    let (_, all) = infer(&["tidemark", "--backend", "aws", "--json", "infer", &url]).await;
    let quantity = all["source"]["schema"]
        .as_array()
        .expect("schema")
        .iter()
        .find(|c| c["name"] == "quantity")
        .expect("quantity");
    assert_eq!(quantity["type"], "string", "{}", schema(&all));
    assert!(all["notes"].to_string().contains("two"), "{}", all["notes"]);
}
