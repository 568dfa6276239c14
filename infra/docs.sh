#!/usr/bin/env bash
# Build the documentation site (docs/mkdocs.yml, pages in docs/pages) into .local/site.
#
# Usage: infra/docs.sh          build, strict: a broken link or anchor, a page missing from the
#                               nav, or a nav entry without its page fails the build
#        infra/docs.sh serve    serve it on http://127.0.0.1:8000 while writing
#
# Installs MkDocs and its theme (docs/requirements.txt, pinned) into .local/venv-docs on first
# use. Also checks that every relative link of README.md and BENCHMARKS.md names a file that
# exists, since those two pages live outside the site.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
VENV="$ROOT/.local/venv-docs"
REQS="$ROOT/docs/requirements.txt"

if ! cmp -s "$REQS" "$VENV/.requirements" 2>/dev/null || [[ ! -x "$VENV/bin/mkdocs" ]]; then
    if [[ ! -x "$VENV/bin/python" ]]; then
        python3 -m venv "$VENV"
    fi
    echo "installing MkDocs (docs/requirements.txt) into ${VENV#"$ROOT/"}"
    "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check -r "$REQS"
    cp "$REQS" "$VENV/.requirements"
fi

# Relative links of the two top-level pages: each must name a file or folder of the repository.
"$VENV/bin/python" - <<'PY'
import re, sys, pathlib
bad = []
for page in ("README.md", "BENCHMARKS.md"):
    text = pathlib.Path(page).read_text()
    text = re.sub(r"```.*?```", "", text, flags=re.S)
    for target in re.findall(r"\]\(([^)\s]+)\)", text):
        if re.match(r"[a-z]+:", target) or target.startswith("#"):
            continue
        path = target.split("#")[0]
        if path and not pathlib.Path(path).exists():
            bad.append(f"{page}: link to {target}: no such file")
if bad:
    print("\n".join(bad), file=sys.stderr)
    sys.exit(1)
PY

if [[ "${1:-}" == serve ]]; then
    exec "$VENV/bin/mkdocs" serve -f docs/mkdocs.yml
fi
NO_MKDOCS_2_WARNING=1 "$VENV/bin/mkdocs" build --strict --clean -f docs/mkdocs.yml
echo "docs: built into .local/site ($(find .local/site -name '*.html' | wc -l) pages)"
