//! The documentation's commands, run: every ```` ```console ```` block of `docs/pages` is a
//! test. Each `$ ` line is a command, the lines after it what it must print (stdout and
//! stderr); `[..]` matches the rest of a line, a line `...` any lines, `? failed` / `? 1` the
//! exit code (trycmd's syntax, as clap uses it for its own docs).
//!
//! The pages run on the embedded backends in a temporary folder, one per page:
//! - `getting-started.md` in a copy of `infra/sample` (the page copies that folder too), with
//!   `TIDEMARK_CONFIG_FILE=sources.json` as the page exports it;
//! - every other page in the demo's workspace (`tidemark demo --dir`), with `TIDEMARK_ROOT=.`
//!   and `TIDEMARK_CONFIG_FILE=sources.json`, the environment the demo tells its reader to set.
//!
//! Blocks other than `console` (`sh`, `text`, `json`) are not run: a page marks a command as
//! runnable by writing it in a `console` block.

use std::path::{Path, PathBuf};
use std::process::Command;

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .expect("the repository root")
}

fn tidemark() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_tidemark"))
}

/// Every page under `docs/pages` holding a console block.
fn pages_with_console_blocks() -> Vec<PathBuf> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        let mut entries: Vec<_> = std::fs::read_dir(dir)
            .expect("read docs/pages")
            .map(|e| e.expect("entry").path())
            .collect();
        entries.sort();
        for path in entries {
            if path.is_dir() {
                walk(&path, out);
            } else if path.extension().is_some_and(|e| e == "md")
                && std::fs::read_to_string(&path)
                    .expect("read a page")
                    .contains("```console")
            {
                out.push(path);
            }
        }
    }
    let mut out = Vec::new();
    walk(&repo_root().join("docs/pages"), &mut out);
    out
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).expect("create a folder");
    for entry in std::fs::read_dir(from).expect("read a folder") {
        let entry = entry.expect("entry");
        let target = to.join(entry.file_name());
        if entry.file_type().expect("file type").is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), &target).expect("copy a file");
        }
    }
}

/// The page as trycmd reads it: each console block's last output line followed by an empty
/// line (trycmd expects the output to end with a newline; pages need not show it).
fn with_final_newlines(text: &str) -> String {
    let mut out = String::new();
    let mut in_console = false;
    let mut previous_empty = true;
    for line in text.lines() {
        let fence = line.trim_start().starts_with("```");
        if fence && in_console {
            if !previous_empty {
                out.push('\n');
            }
            in_console = false;
        } else if fence && line.trim_start() == "```console" {
            in_console = true;
        }
        out.push_str(line);
        out.push('\n');
        previous_empty = line.is_empty();
    }
    out
}

/// A case folder for `page`: the page itself (trycmd reads `<name>.md`), its starting folder
/// `<name>.in` and an empty `<name>.out` (which makes trycmd run the page's commands one after
/// the other in one sandboxed copy of `<name>.in`).
struct Case {
    _dir: tempfile::TempDir,
    page: PathBuf,
    env: Vec<(&'static str, &'static str)>,
}

fn case(page: &Path, text: &str) -> Case {
    let dir = tempfile::tempdir().expect("a temporary folder");
    let relative = page
        .strip_prefix(repo_root().join("docs/pages"))
        .expect("a page under docs/pages");
    let name = relative
        .with_extension("")
        .to_string_lossy()
        .replace('/', "__");
    let copy = dir.path().join(format!("{name}.md"));
    std::fs::write(&copy, with_final_newlines(text)).expect("write the page");
    let start = dir.path().join(format!("{name}.in"));
    std::fs::create_dir_all(dir.path().join(format!("{name}.out"))).expect("the .out folder");
    std::fs::write(dir.path().join(format!("{name}.out/.keep")), "").expect(".keep");
    let env = if relative == Path::new("getting-started.md") {
        copy_dir(&repo_root().join("infra/sample"), &start);
        vec![("TIDEMARK_CONFIG_FILE", "sources.json")]
    } else {
        let status = Command::new(tidemark())
            .args(["demo", "--dir"])
            .arg(&start)
            .env_remove("TIDEMARK_ROOT")
            .env_remove("TIDEMARK_CONFIG_FILE")
            .stdout(std::process::Stdio::null())
            .status()
            .expect("run the demo");
        assert!(status.success(), "the demo failed, so the pages cannot run");
        vec![
            ("TIDEMARK_ROOT", "."),
            ("TIDEMARK_CONFIG_FILE", "sources.json"),
        ]
    };
    Case {
        _dir: dir,
        page: copy,
        env,
    }
}

/// Run one page's console blocks; panics (trycmd's report: the page, the command, the
/// difference) when a command prints something else or exits otherwise.
fn run(case: &Case) {
    let cases = trycmd::TestCases::new();
    cases
        .register_bin("tidemark", tidemark())
        .register_bin("cp", PathBuf::from("/bin/cp"))
        .register_bin("sed", PathBuf::from("/bin/sed"))
        .env("NO_COLOR", "1")
        .env("TIDEMARK_BACKEND", "local")
        .case(&case.page);
    for (key, value) in &case.env {
        cases.env(*key, *value);
    }
    cases.run();
}

#[test]
fn every_console_block_of_the_docs_prints_what_the_page_says() {
    let pages = pages_with_console_blocks();
    assert!(
        pages.iter().any(|p| p.ends_with("getting-started.md")),
        "Getting started has no console block: nothing of it would be tested"
    );
    for page in pages {
        let text = std::fs::read_to_string(&page).expect("read a page");
        eprintln!("docs: running the console blocks of {}", page.display());
        run(&case(&page, &text));
    }
}

/// The test above is not vacuous: a documented output changed by one word fails it.
#[test]
fn a_changed_output_on_a_page_fails_the_docs_test() {
    let page = repo_root().join("docs/pages/getting-started.md");
    let text = std::fs::read_to_string(&page).expect("read Getting started");
    let documented = "ledger  ./.tidemark/ledger.db  created";
    assert!(
        text.contains(documented),
        "Getting started no longer shows `tidemark init`'s ledger line; pick another line here"
    );
    let changed = text.replacen(documented, "ledger  ./.tidemark/ledger.db  made", 1);
    let case = case(&page, &changed);
    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| run(&case)));
    assert!(
        outcome.is_err(),
        "the docs test passed on a page whose `tidemark init` output was changed"
    );
}
