#!/usr/bin/env bash
# The project's single test command.
#
# Usage: infra/test.sh [extra args for cargo test]
#   e.g. infra/test.sh -p tidemark-tests -- --nocapture
#
# Steps, in order; the first failure stops the run with a non-zero exit:
#   1. local stack   infra/localstack.sh start (DynamoDB Local + moto S3; installs
#                    them into .local/ on first use), then sources .local/stack.env
#   2. fmt           cargo fmt --all -- --check
#   3. clippy        cargo clippy --workspace --all-targets -- -D warnings
#   4. test          cargo test --workspace [extra args]
# On exit the local stack is stopped again, unless it was already running
# before this script started (then it is left alone for whoever started it).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
LOCALSTACK="$ROOT/infra/localstack.sh"

if ! command -v cargo >/dev/null && [[ -x "$HOME/.cargo/bin/cargo" ]]; then
    PATH="$HOME/.cargo/bin:$PATH"
fi

STEP_NO=0
STEP_TOTAL=4

banner() { printf '\n==== [%s] %s ====\n' "$(date '+%Y-%m-%d %H:%M:%S')" "$*"; }

# step NAME CMD... : run CMD under a banner; on failure say which step failed and exit.
step() {
    local name="$1" start=$SECONDS rc=0
    shift
    STEP_NO=$((STEP_NO + 1))
    banner "step $STEP_NO/$STEP_TOTAL: $name: $*"
    "$@" || rc=$?
    if ((rc != 0)); then
        banner "FAILED: step $STEP_NO/$STEP_TOTAL ($name), exit code $rc, after $((SECONDS - start))s"
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

start_stack() {
    if ! bash "$LOCALSTACK" env >/dev/null 2>&1; then
        STOP_STACK=1 # we start it, so we stop it
    fi
    # (set -e does not apply inside step's "||": return on errors explicitly)
    bash "$LOCALSTACK" start || return
    # shellcheck source=/dev/null
    source "$ROOT/.local/stack.env" || return
}

begin=$SECONDS
step "local stack" start_stack
step "fmt" cargo fmt --all -- --check
step "clippy" cargo clippy --workspace --all-targets -- -D warnings
step "test" cargo test --workspace "$@"
banner "all $STEP_TOTAL steps passed in $((SECONDS - begin))s"
