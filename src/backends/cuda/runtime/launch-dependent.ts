/**
 * cuLaunchKernelEx's CUlaunchConfig with one attribute, programmatic stream serialization: the launch of
 * a programmatic dependent (sm_90). Such a kernel may start while the work before it on the stream
 * finishes, once that work's blocks have all run griddepcontrol.launch_dependents or exited; it must run
 * griddepcontrol.wait (decode_common.cuh's grid_dependency_wait) before it reads memory the earlier work
 * writes. What it gains is the launch latency: the TMA decode kernel's combine starts as its split kernel's
 * last blocks finish (benchmarks/results/h200/decode/2026-12-02-k1-loop-overheads, H200, each call alone: B=1 S=32k K=1 555 → 600
 * GB/s, B=64 S=16k 3774 → 3882). What it cost: library calls of the one-split kernel back to back took
 * 146 µs each against 125 (benchmarks/results/h200/decode/2026-12-02-k1-vs-pytorch-call-timing); decode-tma.ts (tmaDependentLaunches) says
 * where the library launches this way and ATTNLAB_DEPENDENT_LAUNCH (config.ts) overrides it.
 *
 * Layouts from cuda.h (CUDA 12/13), checked with offsetof on x86-64: CUlaunchConfig is 7 uint32 (grid,
 * block, shared bytes), then at 32 the stream, at 40 the attribute array, at 48 their count, 56 bytes in
 * all; CUlaunchAttribute is the uint32 id, 4 bytes of padding, and a 64-byte value union (72 bytes), whose
 * first int is programmaticStreamSerializationAllowed for this id.
 */

/** CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION. */
export const PROGRAMMATIC_STREAM_SERIALIZATION = 6;
export const LAUNCH_CONFIG_BYTES = 56;
export const LAUNCH_ATTRIBUTE_BYTES = 72;

export interface DependentLaunch {
  readonly grid: readonly [number, number, number];
  readonly block: readonly [number, number, number];
  readonly sharedBytes: number;
  readonly stream: bigint;
}

/**
 * Writes the config at `at` of `view` and its attribute right after it (LAUNCH_CONFIG_BYTES +
 * LAUNCH_ATTRIBUTE_BYTES bytes); `address` is the native address of view's byte 0. Returns the config's
 * address, cuLaunchKernelEx's first argument.
 */
export function writeDependentLaunch(
  view: DataView,
  at: number,
  address: bigint,
  launch: DependentLaunch,
): bigint {
  const attribute = at + LAUNCH_CONFIG_BYTES;
  new Uint8Array(view.buffer, view.byteOffset + at, LAUNCH_CONFIG_BYTES + LAUNCH_ATTRIBUTE_BYTES).fill(0);
  [...launch.grid, ...launch.block, launch.sharedBytes].forEach((value, i) => {
    view.setUint32(at + 4 * i, value, true);
  });
  view.setBigUint64(at + 32, launch.stream, true);
  view.setBigUint64(at + 40, address + BigInt(attribute), true);
  view.setUint32(at + 48, 1, true);
  view.setUint32(attribute, PROGRAMMATIC_STREAM_SERIALIZATION, true);
  view.setInt32(attribute + 8, 1, true);
  return address + BigInt(at);
}
