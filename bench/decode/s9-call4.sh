#!/usr/bin/env bash
# Session 9's last decode call: test/gpu/decode-tma.test.ts again after the fix of its NaN test (its paged calls
# had no keyValueSeqLengths in call B), with memcheck and racecheck of that test (dense, pages of 16 and 64).
# From the worktree copy's root, .device and .kcache carried:
#   cd .wt-decode && bash ../.device/on-gpu.sh bash bench/decode/s9-call4.sh      (logs: $OUT/logs.tar.xz)
# Expected ~60 s of command (caps 100 s).
set -u
out=$OUT; L=/tmp/s9-lib; mkdir -p $L; t0=$SECONDS
export ATTNLAB_CACHE_DIR=/tmp/attnlab-verify-cache NO_COLOR=1 ATTNLAB_COMMIT=$(cat COMMIT 2>/dev/null || echo unknown)
mkdir -p $ATTNLAB_CACHE_DIR && tar -C $ATTNLAB_CACHE_DIR -xJf ../.kcache/kernels.tar.xz
logs=$L; cap=100; source scripts/gpu-lib.sh
shard decode-tma - test/gpu/decode-tma.test.ts
sanitize memcheck-tma-nan memcheck --test-name-pattern='NaN in V and K' test/gpu/decode-tma.test.ts
sanitize racecheck-tma-nan racecheck --test-name-pattern='NaN in V and K' test/gpu/decode-tma.test.ts
wait
echo "tests done $((SECONDS-t0))s"
grep -h "Race reported\|Invalid\|ERROR SUMMARY\|RACECHECK SUMMARY" $L/*.san | sort | uniq -c | head -12
summary 22 20 20
grep -hE '^\s*(not )?ok' $L/decode-tma.tap
tar -C $L -cf - . | xz -T8 -6 > $out/logs.tar.xz
echo "total $((SECONDS-t0))s"
