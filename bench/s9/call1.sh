#!/usr/bin/env bash
# Session 9, device call 1: three prepared checks in one cold start (the machine is released 30 s after a
# call, so every call pays ~60-70 s to start). From the project root with .device, .kcache, .wt-decode and
# .wt-hopper carried (stripped copies of branches decode-s9 and hopper-s9 with their harness binaries):
#   1. decode-s9's harness call (bench/decode/s9-call1.sh: ws decode kernel checked, sanitized, timed, PyTorch);
#   2. hopper-s9's harness call (bench/hopper/s9-call1.sh: dynamic persistent grid checked, sanitized, timed);
#   3. main's bench/decode/s8-host-check.sh (decode suites + paged K=1/K=4 through the library after 9c93d9c).
# Logs: $OUT/all.tgz; each step's summary printed last.
set -u
r=/tmp/r; mkdir -p $r/dec $r/hop $r/host
( cd .wt-decode && OUT=$r/dec timeout -s KILL 230 bash bench/decode/s9-call1.sh > $r/dec.txt 2>&1 )
( cd .wt-hopper && timeout -s KILL 170 bash bench/hopper/s9-call1.sh $r/hop bin/harness 150 > $r/hop.txt 2>&1 )
OUT=$r/host timeout -s KILL 170 bash .device/on-gpu.sh bash bench/decode/s8-host-check.sh > $r/host.txt 2>&1
tar -czf "$OUT/all.tgz" -C $r .
echo "=== decode-s9"; tail -c 3800 $r/dec.txt
echo "=== hopper-s9"; tail -c 4200 $r/hop.txt
echo "=== host check"; tail -c 3600 $r/host.txt
