# Groups of scripts/gpu-verify.sh's steps that other device scripts run too, so that a
# run re-checking one part of the suite runs exactly what the full verification runs there.
# Sourced after scripts/gpu-lib.sh (they call its shard and sanitize); not run.

# flash.test.ts with the Hopper kernel in place of the mma.sync one wherever it runs (HOPPER_BY_DEFAULT's
# condition), one shard per 16-bit type.
wgmma_type_shards() {
  for p in bfloat16 float16; do
    shard "wgmma-$p" ATTNLAB_FLASH_KERNEL=wgmma --test-name-pattern="· $p\$" test/gpu/forward/flash.test.ts
  done
}

# The rest of flash.test.ts (other tile configurations, the suite's own tests) on the Hopper kernel.
wgmma_other_shard() {
  shard wgmma-other ATTNLAB_FLASH_KERNEL=wgmma --test-name-pattern='other tile configurations|^cuda flash kernel$' \
    test/gpu/forward/flash.test.ts
}

# memcheck on the three-consumer D=128 tile of long T,
# and the dynamic persistent grid (work counter, item slot) under all three, on its D=128 case with
# lengths and a batch without keys.
hopper_dynamic_sanitizers() {
  sanitize memcheck-hopper-long memcheck --test-name-pattern='^H=128 long T: T=8192 S=300 MQA \(bfloat16\)$' \
    test/gpu/forward/hopper.test.ts
  for tool in memcheck racecheck synccheck; do
    sanitize "$tool-hopper-dynamic" "$tool" --test-name-pattern='^dynamic grid: D=128 ' test/gpu/forward/hopper.test.ts
  done
}
