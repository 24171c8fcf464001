#!/usr/bin/env bash
# File a GPU lease's output (the folder results/gpu_session.sh wrote as $OUT) into the checkout:
# records appended to results/records/<tag>.jsonl (each record once; the race's tta-*.jsonl to the study's
# studies/fashion_mnist_race/records/, followed by the race's headline check on them), run folders under results/runs/.
# Both are made portable on the way in, as the harness keeps them: no machine paths, and run folders
# with only what the report reads (run.json and the TensorBoard scalars).
#
#   results/gpu_collect.sh <folder> [<folder> ...]      then: make report
#   DEST=DIR files into DIR/records and DIR/runs instead of results/, RACE_DEST=DIR the race's records into DIR
#   (the tests file into a temporary folder)
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-.venv/bin/python}
[ -x "$PY" ] || PY=python3
DEST=${DEST:-results}
RACE_DEST=${RACE_DEST:-studies/fashion_mnist_race/records}
mkdir -p "$DEST/records" "$DEST/runs"
[ $# -gt 0 ] || { echo "usage: results/gpu_collect.sh <folder with <tag>.jsonl and runs-*.tgz> ..." >&2; exit 2; }
for dir in "$@"; do
    [ -d "$dir" ] || { echo "error: $dir is not a folder; pass the \$OUT folder of a gpu_session.sh run" >&2; exit 2; }
    unpacked=$(mktemp -d)
    for tgz in "$dir"/runs-*.tgz; do [ -e "$tgz" ] && tar xzf "$tgz" -C "$unpacked"; done
    for src in "$dir"/*.jsonl; do
        [ -e "$src" ] || continue
        case $(basename "$src") in
            tta-*) mkdir -p "$RACE_DEST"; dst=$RACE_DEST/$(basename "$src") ;;  # the race study's records
            *) dst=$DEST/records/$(basename "$src") ;;
        esac
        touch "$dst"
        # a record is identified by its sweep and point name: append only the ones not filed yet
        "$PY" - "$src" "$dst" <<'PYEOF'
import json, sys
from hpc_imagenet.harness.core.records import append, identity
src, dst = sys.argv[1:]
have = {identity(json.loads(l)) for l in open(dst) if l.strip()}
new = [r for r in (json.loads(l) for l in open(src) if l.strip()) if identity(r) not in have]
for record in new:  # one atomic line each (made portable): a crash leaves whole records behind
    append(dst, record)
print(f"{src}: {len(new)} new record(s) -> {dst}")
PYEOF
        # a race round's records: whether they make the headline, and if not, which rule they break (filed either way)
        case $(basename "$src") in tta-*) "$PY" -m studies.fashion_mnist_race check --records "$dst" || true ;; esac
    done
    "$PY" - "$unpacked" "$DEST/runs" <<'PYEOF'
import sys
from pathlib import Path
from hpc_imagenet.harness.runners.train_bench import keep_artifacts
root = Path(sys.argv[1]) / "results" / "runs"
for run_json in sorted(root.glob("*/*/run.json")) if root.is_dir() else []:
    keep_artifacts(run_json.parent, Path(sys.argv[2]) / run_json.parent.relative_to(root))
    print(f"kept {run_json.parent.relative_to(root)}")
PYEOF
    rm -rf "$unpacked"
done
