/**
 * Whether two int32 arrays hold the same ints, as one byte compare (memcmp): ~3 µs for the 65k
 * entries of a B=64, S=16k, block-16 table on the build machine's CPU, where an element loop took
 * ~96 µs (benchmarks/harnesses/decode-host-steps.ts). Paged decode compares its block table on every call: against
 * the table last validated (api/kv-layout.ts) and against the device copies kept
 * (backends/cuda/runtime/int32-cache.ts).
 */
const bytesOf = (a: Int32Array) => Buffer.from(a.buffer, a.byteOffset, a.byteLength);

export function sameInts(a: Int32Array, b: Int32Array): boolean {
  if (a.length !== b.length) return false;
  // Short lists (a decode step's lengths and table rows) by an element loop: two Buffer views cost more
  // than comparing them. A browser has no Buffer (the attnlab/webgpu entry): the loop there too.
  if (a.length <= SHORT || typeof Buffer === 'undefined') {
    for (let i = 0; i < a.length; i++) if (a[i] !== b[i]) return false;
    return true;
  }
  return bytesOf(a).equals(bytesOf(b));
}

/** Up to this many ints the element loop compares (memcmp through Buffer wins on long block tables). */
const SHORT = 64;
