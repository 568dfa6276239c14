#!/usr/bin/env bash
# The project's single test command.
#
# Usage: infra/test.sh [extra args for cargo test]
#   e.g. infra/test.sh -p tidemark-tests -- --nocapture
#
# Steps, in order; the first failure stops the run with a non-zero exit:
#   1. local stack   infra/localstack.sh start (DynamoDB Local + moto S3; installs
#                    them into .local/ on first use), then sources .local/stack.env;
#                    the Delta table reader (Python deltalake) into .local/venv-readers
#   2. template      cfn-lint template.yaml, checkov (security scan), sam validate --lint
#                    when the SAM CLI can be installed, and the template invariants
#                    (pytest infra/deploy/test_template.py); installs the tools on first use
#   3. fmt           cargo fmt --all -- --check
#   4. docs          infra/docs.sh: the documentation site's strict MkDocs build (a broken
#                    link or anchor fails), MkDocs installed into .local/venv-docs on first
#                    use; the pages' console blocks and the generated references are checked
#                    by the CLI's tests (infra/cli/tests/docs.rs, reference.rs) in step 6
#   5. clippy        cargo clippy --workspace --all-targets -- -D warnings
#   6. test          cargo test --workspace [extra args]
# On exit the local stack is stopped again, unless it was already running
# before this script started (then it is left alone for whoever started it).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
LOCALSTACK="$ROOT/infra/localstack.sh"

if ! command -v cargo >/dev/null && [[ -x "$HOME/.cargo/bin/cargo" ]]; then
    PATH="$HOME/.cargo/bin:$PATH"
fi

# A CI checkout is built once: incremental caches only cost disk there.
if [[ -n "${CI:-}" ]]; then
    export CARGO_INCREMENTAL="${CARGO_INCREMENTAL:-0}"
fi

STEP_NO=0
STEP_TOTAL=6

banner() { printf '\n==== [%s] %s ====\n' "$(date '+%Y-%m-%d %H:%M:%S')" "$*"; }

# The space left where the build and the tests write: a fresh build's target/ takes about
# 5.5 GB (5.4 GB on 2026-12-07 with CI set, after clippy and the test build; 6.0 GB before the
# CLI's integration tests became one binary), and the suites' objects (folders and the S3 emulator's spool, 100 MB objects among
# them) take up to 1 GB more under the temporary directory while they run. A disk that
# fills fails tests with errors that do not say so (an emulator's 500, a file not created):
# the space is printed before the run and again when a step fails.
disk() {
    local tmp="${TMPDIR:-/tmp}"
    echo "disk: $(df -h --output=avail "$ROOT" | tail -1 | tr -d ' ') free for $ROOT," \
        "$(df -h --output=avail "$tmp" | tail -1 | tr -d ' ') for $tmp"
    local free_kb
    free_kb=$(df -k --output=avail "$ROOT" | tail -1 | tr -d ' ')
    if ((free_kb < 8 * 1024 * 1024)) && [[ ! -d "$ROOT/target/debug" ]]; then
        echo "disk: WARNING: less than 8 GB free for a fresh build and its tests"
    fi
}

# step NAME CMD... : run CMD under a banner; on failure say which step failed and exit.
step() {
    local name="$1" start=$SECONDS rc=0
    shift
    STEP_NO=$((STEP_NO + 1))
    banner "step $STEP_NO/$STEP_TOTAL: $name: $*"
    "$@" || rc=$?
    if ((rc != 0)); then
        banner "FAILED: step $STEP_NO/$STEP_TOTAL ($name), exit code $rc, after $((SECONDS - start))s"
        disk
        exit "$rc"
    fi
    echo "---- $name passed in $((SECONDS - start))s"
}

STOP_STACK=0
cleanup() {
    local rc=$?
    if ((STOP_STACK)); then
        bash "$LOCALSTACK" stop || echo "test.sh: warning: could not stop the local stack" >&2
    fi
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# The independent readers of the suites, in a venv of their own: the `deltalake` Python
# package and pyarrow (the Delta suites, tests/tests/delta_table.rs and nested.rs; the CSV and
# time readings compared with pyarrow's), DuckDB and fastavro (the nested-data model,
# tests/fixtures/nested/check.py, whose pyarrow and DuckDB read every output back). Installed
# here, before the tests run in parallel, rather than by the first test that needs them.
readers_venv() {
    local venv="$ROOT/.local/venv-readers"
    "$venv/bin/python" -c 'import deltalake, pyarrow, duckdb, fastavro' >/dev/null 2>&1 && return 0
    if [[ ! -x "$venv/bin/python" ]]; then
        python3 -m venv "$venv" || return
    fi
    echo "installing deltalake, pyarrow, duckdb and fastavro into ${venv#"$ROOT/"}"
    "$venv/bin/python" -m pip install --quiet --disable-pip-version-check "deltalake>=1.6,<2" "pyarrow>=20" \
        "duckdb>=1.1" "fastavro>=1.9" || return
    "$venv/bin/python" -c 'import deltalake, pyarrow, duckdb, fastavro'
}

start_stack() {
    readers_venv || return
    if ! bash "$LOCALSTACK" env >/dev/null 2>&1; then
        STOP_STACK=1 # we start it, so we stop it
    fi
    # (set -e does not apply inside step's "||": return on errors explicitly)
    bash "$LOCALSTACK" start || return
    # shellcheck source=/dev/null
    source "$ROOT/.local/stack.env" || return
}

# venv_tool VENV PACKAGE EXE: make sure VENV/bin/EXE runs, pip-installing PACKAGE (quietly)
# into VENV, created if missing, on first use.
venv_tool() {
    local venv="$1" package="$2" exe="$1/bin/$3"
    "$exe" --version >/dev/null 2>&1 && return 0
    if [[ ! -x "$venv/bin/python" ]]; then
        python3 -m venv "$venv" || return
    fi
    echo "installing $package into ${venv#"$ROOT/"}"
    "$venv/bin/python" -m pip install --quiet --disable-pip-version-check "$package" || return
    "$exe" --version >/dev/null 2>&1
}

# The SAM template: cfn-lint and checkov must both pass (suppressions live in the template,
# each with its reason). checkov and the SAM CLI pin boto3 (checkov 1.35.x, SAM 1.43.x) and
# other libraries below what the project venv holds for moto, so each gets its own venv.
check_template() {
    local venv="$ROOT/.local/venv" checkov_venv="$ROOT/.local/venv-checkov" sam_venv="$ROOT/.local/venv-sam"
    venv_tool "$venv" cfn-lint cfn-lint || return
    venv_tool "$checkov_venv" checkov checkov || return
    echo "-- cfn-lint $("$venv/bin/cfn-lint" --version)"
    "$venv/bin/cfn-lint" template.yaml || return
    echo "-- checkov $("$checkov_venv/bin/checkov" --version)"
    "$checkov_venv/bin/checkov" -f template.yaml --framework cloudformation \
        --compact --quiet --skip-download || return
    # Optional: SAM's own translation (works offline, no credentials needed).
    if venv_tool "$sam_venv" aws-sam-cli sam; then
        echo "-- $("$sam_venv/bin/sam" --version)"
        SAM_CLI_TELEMETRY=0 "$sam_venv/bin/sam" validate --lint --region us-east-1 \
            --template-file template.yaml || return
    else
        echo "test.sh: warning: aws-sam-cli could not be installed; sam validate --lint skipped" >&2
    fi
    template_invariants
}

# The invariants of the template (least privilege against the code's SDK calls, environment
# against what the code reads, DLQs, alarms, buckets, ...): pytest, with cfn-lint's YAML
# decoder and the SAM translator, in a venv of their own. pytest exits 5 when it collected
# no test: that is a failure here too, said out loud.
template_invariants() {
    local venv="$ROOT/.local/venv-template" tests="infra/deploy/test_template.py" rc=0
    if ! "$venv/bin/python" -c 'import pytest, cfnlint, samtranslator' >/dev/null 2>&1; then
        if [[ ! -x "$venv/bin/python" ]]; then
            python3 -m venv "$venv" || return
        fi
        echo "installing pytest, cfn-lint and aws-sam-translator into ${venv#"$ROOT/"}"
        "$venv/bin/python" -m pip install --quiet --disable-pip-version-check \
            pytest cfn-lint aws-sam-translator || return
    fi
    echo "-- template invariants: $("$venv/bin/python" -m pytest --version 2>&1) $tests"
    PYTHONDONTWRITEBYTECODE=1 "$venv/bin/python" -m pytest -q -p no:cacheprovider "$tests" || rc=$?
    if ((rc == 5)); then
        echo "test.sh: pytest collected no test from $tests: the template invariants did not run" >&2
    fi
    return "$rc"
}

begin=$SECONDS
disk
step "local stack" start_stack
step "template" check_template
step "fmt" cargo fmt --all -- --check
step "docs" bash infra/docs.sh
step "clippy" cargo clippy --workspace --all-targets -- -D warnings
step "test" cargo test --workspace "$@"
banner "all $STEP_TOTAL steps passed in $((SECONDS - begin))s"
