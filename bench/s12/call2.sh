#!/usr/bin/env bash
# Session 12, call 2: decode-bench's kernels-alone columns (src/bench/hidden-host.ts: each batch enqueued
# behind a GPU spin, PyTorch's behind torch.cuda._sleep) at B=1, S=2k/8k/32k, K=1 and 8, for the rule's
# choice, cuDNN, PyTorch, and the TMA kernel forced in each form; the TMA kernel forced at B=64 S=16k K=8
# (the rule never takes it at K=8); and test/gpu/hidden-host.test.ts.
#   bash .device/on-gpu.sh bash bench/s12/call2.sh "$OUT"   (.device and .kcache carried)
set -u
out=${1:?output folder}
export NO_COLOR=1 ATTNLAB_CACHE_DIR=/tmp/attnlab-s12-cache
export ATTNLAB_COMMIT=${ATTNLAB_COMMIT:-$(cat .device/commit 2>/dev/null || echo unknown)}
mkdir -p "$ATTNLAB_CACHE_DIR" "$out/runs"
[ -f .kcache/kernels.tar.xz ] && tar -C "$ATTNLAB_CACHE_DIR" -xJf .kcache/kernels.tar.xz
timeout --kill-after=5 60 node --import tsx --test test/gpu/hidden-host.test.ts > "$out/runs/hidden-host.tap" 2>&1
echo "hidden-host test rc=$? $(grep -E '^# (pass|fail)' "$out/runs/hidden-host.tap" | tr '\n' ' ')"
py=/opt/torch/.venv/bin/python
k1=1:2048:1,1:8192:1,1:32768:1
k8=1:2048:8,1:8192:8,1:32768:8
run() { # name, cap (s), decode-bench arguments
  local name=$1 cap=$2
  shift 2
  timeout --kill-after=5 "$cap" node --import tsx bench/decode/decode-bench.ts --out "$out/runs/$name.json" \
    --no-uncached "$@" 2>&1 | grep -v "UserWarning\|call = lambda" > "$out/runs/$name.txt"
  echo "$name rc=${PIPESTATUS[0]} at ${SECONDS} s"
}
run k1 120 --torch $py --impl flash,cudnn --table-room --shapes $k1
run k1-tma 60 --torch none --tuning '{"kernel":"tma"}' --shapes $k1
run k1-r2 60 --torch none --tuning '{"kernel":"tma","rowGroups":2}' --shapes $k1
run k1-r1 60 --torch none --tuning '{"kernel":"tma","rowGroups":1}' --shapes $k1
run k8 120 --torch $py --impl flash,cudnn --table-room --shapes $k8
run k8-tma 90 --torch none --tuning '{"kernel":"tma"}' --shapes $k8,64:16384:8
run b64 120 --torch $py --impl flash,cudnn --table-room --shapes 64:16384:1,64:16384:8
tar -C "$ATTNLAB_CACHE_DIR" -cJf "$out/kernels.tar.xz" .
tar -C "$out" -cJf "$out/runs.tar.xz" runs
python3 - "$out/runs" > "$out/table.txt" <<'PY'
import json, sys, glob, os
for f in sorted(glob.glob(sys.argv[1] + "/*.json")):
    d = json.load(open(f))
    for r in d["rows"]:
        v = r.get("variant") or r.get("reason", "")[:50]
        f0 = lambda x: f"{x:.0f}" if x else "-"
        print(f'{os.path.basename(f)[:-5]:7} {r["B"]:>3} {r["S"]:>6} {r["K"]} {r["label"][8:22] if r["label"].startswith("attnlab") else r["label"][:14]:14} '
              f'{f0(r.get("bandwidthGBs")):>5} {f0(r.get("kernelsGBs")):>5} {r.get("hostUsPerCall", 0):5.1f} {v[-46:]}')
PY
rm -rf "$out/runs"
cat "$out/table.txt"
