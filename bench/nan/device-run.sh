#!/bin/bash
# Issue 12 §1 on the H200, in one call: the NaN GPU tests (test/gpu/nan.test.ts, one process per
# backend so that their NVRTC compiles and cuDNN plan builds run side by side), PyTorch's SDPA backends
# on the same classes (torch-probe.py), then the NaN repair's cost beside a cudnn call
# (repair-cost.ts). Logs under $OUT; a short table last. Run from the project root via .device/on-gpu.sh.
out=${OUT:-/tmp/nan-out}
mkdir -p "$out"
test_part() {  # $1: a name pattern of nan.test.ts's suites
  timeout 50 node --import tsx --test --test-reporter=tap --test-name-pattern="$1" test/gpu/nan.test.ts \
    > "$out/nan-$1.tap" 2>&1
  echo "nan.test.ts [$1] rc=$?" >> "$out/summary.txt"
}
: > "$out/summary.txt"
timeout 25 python3 bench/nan/torch-probe.py > "$out/torch-probe.jsonl" 2> "$out/torch-probe.err" &
test_part naive & test_part flash & test_part cudnn & test_part FP8 &
wait
timeout 15 node --import tsx bench/nan/repair-cost.ts > "$out/repair-cost.json" 2>&1
echo "repair-cost rc=$?" >> "$out/summary.txt"
{
  for f in "$out"/nan-*.tap; do echo "$f: $(grep -E '^# (pass|fail|skipped)' "$f" | tr '\n' ' ')"; done
  grep -hE '^ *not ok' "$out"/nan-*.tap | head -40
  python3 - "$out/torch-probe.jsonl" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
print(rows[0] if rows else "no probe output")
for r in rows[1:]:
    if "refused" in r:
        print(f"{r['case']:34} {r['backend']:9} refused: {r['refused'][:70]}")
    else:
        print(f"{r['case']:34} {r['backend']:9} rule={r['matches_rule']!s:5} missing={r['missing']} "
              f"extra={r['extra']} finite_rows={r['rows_expected_nan_but_finite']} zeros={r['zeros_where_nan_expected']}")
PY
  cat "$out/repair-cost.json"
} >> "$out/summary.txt" 2>&1
cat "$out/summary.txt"
