/**
 * cuTensorMapEncodeTiled (CUDA 12.0+) through koffi: the TMA descriptors of the Hopper kernel.
 *
 * Bound on first use, apart from driver.ts's table, so that a driver without it (or a test's fake
 * libcuda) still loads every other function; a missing symbol surfaces as a DeviceError here.
 *
 * Prototype (cuda.h): CUresult cuTensorMapEncodeTiled(CUtensorMap *tensorMap, CUtensorMapDataType
 * dataType, cuuint32_t rank, void *globalAddress, const cuuint64_t *globalDim, const cuuint64_t
 * *globalStrides, const cuuint32_t *boxDim, const cuuint32_t *elementStrides, CUtensorMapInterleave,
 * CUtensorMapSwizzle, CUtensorMapL2promotion, CUtensorMapFloatOOBfill). The map is 128 opaque bytes.
 */
import { DeviceError } from '../../../errors.js';
import { checked, cu } from './driver.js';
import { loadLibrary } from './libraries.js';

/** CUtensorMapDataType values attnlab uses. */
export const TENSOR_MAP_DTYPE = { float16: 6, bfloat16: 9 } as const;
/** CU_TENSOR_MAP_SWIZZLE_128B, the interleave's zero value. */
const SWIZZLE_128B = 3;
const INTERLEAVE_NONE = 0;
/** CUtensorMapL2promotion: how far the L2 widens each request of a copy. */
const L2_PROMOTION = { none: 0, '64B': 1, '128B': 2, '256B': 3 } as const;
/** Out-of-bounds elements read as zeros (CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE). */
const OOB_FILL_ZERO = 0;

export interface TiledMapSpec {
  readonly dtype: keyof typeof TENSOR_MAP_DTYPE;
  readonly address: bigint;
  /** Sizes, innermost (contiguous) dimension first. */
  readonly dims: readonly number[];
  /** Byte strides of dims 1…rank−1 (multiples of 16). */
  readonly byteStrides: readonly number[];
  /** Box (elements per dimension) one copy moves; box[0] · element size ≤ 128 with the 128B swizzle. */
  readonly box: readonly number[];
  /**
   * L2 promotion, 256B unless said. The decode maps stream every byte once: their half-row boxes
   * (128 B of 256-byte rows) promoted to 256 B cost the L2 a quarter more sectors (ncu: 34.0 M against
   * 25.6 M at B=64 S=16k K=1) and 5% of the bandwidth (benchmarks/results/h200/decode/2026-12-01-paged-k1-limit).
   */
  readonly l2Promotion?: keyof typeof L2_PROMOTION;
}

type Encode = (...args: unknown[]) => void;
let encode: Encode | undefined;

function encoder(): Encode {
  if (encode) return encode;
  cu();
  const { lib } = loadLibrary('cuda');
  let fn: (...args: unknown[]) => unknown;
  try {
    fn = lib.func(
      'int cuTensorMapEncodeTiled(void *map, int dataType, uint32_t rank, uint64_t address, void *dims, ' +
        'void *strides, void *box, void *elementStrides, int interleave, int swizzle, int l2Promotion, int oobFill)',
    );
  } catch (error) {
    throw new DeviceError(
      'CUDA driver',
      'cuTensorMapEncodeTiled',
      'CUDA_ERROR_NOT_FOUND',
      `the driver has no cuTensorMapEncodeTiled (CUDA 12.0 or newer needed): ${String(error)}`,
    );
  }
  encode = checked('CUDA driver', 'cuTensorMapEncodeTiled', fn, (status) => [
    `CUresult ${status}`,
    'the tensor map was rejected (address or stride not a multiple of 16, or a box too large)',
  ]);
  return encode;
}

/** The 128-byte CUtensorMap of `spec` (128-byte swizzle, its L2 promotion, zero fill), as 16 words. */
export function encodeTiledMap(spec: TiledMapSpec): BigUint64Array {
  const rank = spec.dims.length;
  const map = new BigUint64Array(16);
  encoder()(
    map,
    TENSOR_MAP_DTYPE[spec.dtype],
    rank,
    spec.address,
    BigUint64Array.from(spec.dims, BigInt),
    BigUint64Array.from(spec.byteStrides, BigInt),
    Uint32Array.from(spec.box),
    new Uint32Array(rank).fill(1),
    INTERLEAVE_NONE,
    SWIZZLE_128B,
    L2_PROMOTION[spec.l2Promotion ?? '256B'],
    OOB_FILL_ZERO,
  );
  return map;
}

/**
 * encodeTiledMap's map of `spec`, kept: a map depends on the spec alone (address, shape, strides, box,
 * dtype; a freed and reallocated buffer at the same address and shape has the same map), and a decode
 * loop or a benchmark asks for the same maps every call — one FFI encode each otherwise (three per
 * Hopper forward, two per TMA decode step). At most MAP_CACHE_SIZE kept, the oldest dropped first.
 * Callers must not write to the returned words.
 */
const MAP_CACHE_SIZE = 64;
const maps = new Map<string, BigUint64Array>();

export function cachedTiledMap(spec: TiledMapSpec): BigUint64Array {
  // Joined element by element: a template of the three arrays (Array.prototype.join) took 0.45 µs of a
  // 1.2 µs hit, this 0.18 (fake driver, bench-style loop); a TMA decode step asks for two maps.
  let key = `${spec.dtype}:${spec.address}:${spec.l2Promotion ?? '256B'}`;
  for (const part of [spec.dims, spec.byteStrides, spec.box]) {
    key += ';';
    for (const x of part) key += `,${x}`;
  }
  let map = maps.get(key);
  if (!map) {
    map = encodeTiledMap(spec);
    if (maps.size >= MAP_CACHE_SIZE) maps.delete(maps.keys().next().value as string);
    maps.set(key, map);
  }
  return map;
}
