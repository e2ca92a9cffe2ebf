#!/usr/bin/env bash
# Session 12, call 1 (library, no code change to the kernels): (1) the K=1 decode shapes beside PyTorch with
# 20 calls between each event pair on both sides (decode-bench's new default) and, for two shapes, with one
# call a pair as sessions 5–11 timed; (2) at B=1, S=2k/8k/32k, the TMA kernel forced in its rule's form, in
# row groups and in the one-block form, and row groups at split counts 8–64 (the rule runs the row-tile
# kernel there: the harness read 725–730 GB/s with row groups at S=32k against 446 for it, s11-decode).
#   bash .device/on-gpu.sh bash bench/s12/call1.sh "$OUT"   (.device and .kcache carried)
set -u
out=${1:?output folder}
export NO_COLOR=1 ATTNLAB_CACHE_DIR=/tmp/attnlab-s12-cache
export ATTNLAB_COMMIT=${ATTNLAB_COMMIT:-$(cat .device/commit 2>/dev/null || echo unknown)}
mkdir -p "$ATTNLAB_CACHE_DIR" "$out/runs"
[ -f .kcache/kernels.tar.xz ] && tar -C "$ATTNLAB_CACHE_DIR" -xJf .kcache/kernels.tar.xz
py=/opt/torch/.venv/bin/python
small=1:2048:1,1:8192:1,1:32768:1
run() { # name, cap (s), decode-bench arguments
  local name=$1 cap=$2
  shift 2
  timeout --kill-after=5 "$cap" node --import tsx bench/decode/decode-bench.ts --out "$out/runs/$name.json" \
    --no-uncached "$@" 2>&1 | grep -v "UserWarning\|call = lambda" > "$out/runs/$name.txt"
  echo "$name rc=${PIPESTATUS[0]} at ${SECONDS} s"
}
run base 150 --torch $py --impl flash,cudnn --table-room --shapes 64:16384:1,$small
run percall 90 --torch $py --impl flash --batch 1 --shapes 64:16384:1,1:32768:1
run tma-rule 120 --torch none --tuning '{"kernel":"tma"}' --shapes $small
run tma-r2 90 --torch none --tuning '{"kernel":"tma","rowGroups":2}' --shapes $small
run tma-r1 90 --torch none --tuning '{"kernel":"tma","rowGroups":1}' --shapes $small
for sp in 8 16 32 64; do
  run r2-s$sp 60 --torch none --tuning "{\"kernel\":\"tma\",\"rowGroups\":2,\"splits\":$sp}" --shapes 1:8192:1,1:32768:1
done
tar -C "$ATTNLAB_CACHE_DIR" -cJf "$out/kernels.tar.xz" .
tar -C "$out" -cJf "$out/runs.tar.xz" runs
python3 - "$out/runs" > "$out/table.txt" <<'PY'
import json, sys, glob, os
for f in sorted(glob.glob(sys.argv[1] + "/*.json")):
    d = json.load(open(f))
    for r in d["rows"]:
        v = r.get("variant") or r.get("reason", "")[:60]
        gbs = f'{r["bandwidthGBs"]:.0f}' if r.get("bandwidthGBs") else "-"
        print(f'{os.path.basename(f)[:-5]:9} {r["B"]:>3} {r["S"]:>6} {r["label"][:22]:22} {gbs:>6} {v[-58:]}')
PY
rm -rf "$out/runs"
cat "$out/table.txt"
