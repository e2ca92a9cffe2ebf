#!/usr/bin/env bash
# Session 10's last decode call: the K=1 loader's ceiling by grid and copy engine (`harness ceiling`: TMA
# tensor copies of 128-byte half rows as the library's kernel, or one 32 KB bulk copy per K/V tile; the
# library's grid of 1/2/4 splits a sequence, or persistent grids of 128/132/264 blocks streaming equal
# runs of tiles), maps without L2 promotion and with 256 B. Harness only, ~10 s of wall time.
#   device: run(carry: [".wt-decode"], command: "cd .wt-decode && bash bench/decode/s10-call5.sh", timeout_s: 120)
set -u
dest=${OUT:-/tmp/out}
for l2 in none 256; do
  HARNESS_L2=$l2 timeout -s KILL 50 ./bench/decode/harness ceiling > "$dest/ceiling-l2$l2.txt" 2>&1
  echo "ceiling l2=$l2 rc=$?"
done
paste "$dest/ceiling-l2none.txt" "$dest/ceiling-l2256.txt" | awk '{print $1, $2, $3, $4, "none=" $6, "256=" $12}'
