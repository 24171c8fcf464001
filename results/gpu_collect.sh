#!/usr/bin/env bash
# File a GPU lease's output (the folder results/gpu_session.sh wrote as $OUT) into the checkout:
# records appended to results/records/<tag>.jsonl (each record once), run folders under results/runs/.
#
#   results/gpu_collect.sh <folder> [<folder> ...]      then: make report
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# -gt 0 ] || { echo "usage: results/gpu_collect.sh <folder with <tag>.jsonl and runs-*.tgz> ..." >&2; exit 2; }
for dir in "$@"; do
    [ -d "$dir" ] || { echo "error: $dir is not a folder; pass the \$OUT folder of a gpu_session.sh run" >&2; exit 2; }
    for tgz in "$dir"/runs-*.tgz; do [ -e "$tgz" ] && tar xzf "$tgz"; done
    for src in "$dir"/*.jsonl; do
        [ -e "$src" ] || continue
        dst=results/records/$(basename "$src")
        touch "$dst"
        # a record is identified by its sweep and point name: append only the ones not filed yet
        python3 - "$src" "$dst" <<'PYEOF'
import json, sys
src, dst = sys.argv[1:]
key = lambda r: (r["sweep"], json.dumps(r["point"], sort_keys=True))
have = {key(json.loads(l)) for l in open(dst) if l.strip()}
new = [l for l in open(src) if l.strip() and key(json.loads(l)) not in have]
open(dst, "a").writelines(new)
print(f"{src}: {len(new)} new record(s) -> {dst}")
PYEOF
    done
done
