#!/usr/bin/env bash
# Times the README's first command (line 1 of its first code block) in a fresh virtual environment with
# an empty pip cache, and writes the record: bash benchmarks/first_command.sh OUT.json
set -euo pipefail
out=${1:?usage: first_command.sh OUT.json}
root=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
line=$(awk '/^```bash/{getline; print; exit}' "$root/README.md")
python3 -m venv "$work/venv"
start=$(date +%s.%N)
(cd "$root" && PIP_CACHE_DIR="$work/cache" PATH="$work/venv/bin:$PATH" bash -c "$line") > "$work/log.txt" 2>&1
rc=$?
end=$(date +%s.%N)
python3 - "$out" "$rc" "$start" "$end" "$line" "$work/log.txt" <<'PY'
import json, os, sys
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(sys.argv[1])), "..", ".."))
out, rc, start, end, line, log = sys.argv[1:]
sys.path.insert(0, "benchmarks")
from record_meta import meta
tail = open(log).read().splitlines()[-12:]
json.dump({"meta": meta(command=["bash", "benchmarks/first_command.sh", out], settings={"pip_cache": "empty", "venv": "fresh"}),
           "line": line, "rc": int(rc), "seconds": round(float(end) - float(start), 1), "output_tail": tail},
          open(out, "w"), indent=1)
print(f"rc {rc}, {float(end) - float(start):.0f} s")
PY
