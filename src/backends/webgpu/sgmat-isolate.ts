/**
 * Small kernels that take the sgmat kernel's first wrong value apart, each one matrix load (or the
 * score product around it) with one thing changed from the kernel (benchmarks/harnesses/
 * webgpu-sgmat-isolate.ts runs them). The H100's trace of the kernel (sgmat-check.ts:
 * traceExpectation) found K's right matrices, loaded column-major from K's workgroup tile with the
 * tile's row stride, holding the tile's values 4 f16 (8 bytes) from where scalar code put them,
 * while the same operations in kernels of their own were exact. The cases split the hypotheses:
 *   ordering    the tile written by both subgroups, or by the loading subgroup alone (its own
 *               copy); a barrier, storageBarrier after it, two barriers, or a workgroupUniformLoad
 *               whose zero the offsets add;
 *   addresses   the kernel's row strides (72, 64, 96 f16: rows padded by 16, 0, 64 bytes) and
 *               offsets (kb·N·stride + h·K) against offset 0; kᵀ loaded row-major; the stride
 *               read from a buffer at run time;
 *   placement   the tile beside a workgroup array of 4, 8, 12 or 16 bytes, declared before or
 *               after it; among the kernel's own workgroup variables (sgmat-source.ts:
 *               sgmatWorkgroupDeclarations), with and without alignedTiles;
 *   pressure    q's H/K left matrices and a score accumulator live around the products, q staged
 *               through the same tile first, as the kernel's phases A and B run.
 * Each case knows what every loaded element should hold; a wrong matrix is fitted by the element
 * shift that explains all of it (got = tile[address − shift]), so a shift of 4 names a load that
 * addressed its tile 8 bytes early.
 */
import { decodeValue } from '../../tensor/dtype.js';
import { checkInputs, checkVariant } from './sgmat-check.js';
import { type MatrixShape, sgmatWords, sgmatWorkgroupDeclarations } from './sgmat-source.js';

/** Keys and head dims of K's tile (the device check's H and key tile). */
const BC = 64;
const H = 64;
/** Subgroups a workgroup. */
const S = 2;

export interface IsolateCase {
  readonly name: string;
  /** What the case changes from `load` (K's right matrices loaded as the kernel's phase B does). */
  readonly changes: string;
  /** Row stride of K's tile in f16 (the kernel's H + pad/2: 72, 64, 96). */
  readonly stride: number;
  /** Each subgroup writes its own copy of the tile and loads from it (else all write, all load). */
  readonly selfWrite?: boolean;
  /** Between the tile's writes and the loads (default: one workgroupBarrier). */
  readonly between?: 'storage-barrier' | 'two-barriers' | 'uniform-load';
  /** Only the block at offset 0, else every (key block, head block) at the kernel's offsets. */
  readonly offsetZero?: boolean;
  /** K's tile stored as kᵀ (H rows of keys) and loaded row-major, as with kTransposed. */
  readonly transposed?: boolean;
  /** The stride read from a buffer at run time (a value the compiler cannot fold). */
  readonly runtimeStride?: boolean;
  /** A workgroup array of this many u32 declared before (or after) the tile. */
  readonly lead?: { readonly words: number; readonly before: boolean };
  /** The tile is the kernel's kv_tile among the kernel's own workgroup variables. */
  readonly kernelVariables?: { readonly aligned: boolean };
  /** q staged through the tile into left matrices, then K written and S = q·kᵀ computed. */
  readonly scores?: boolean;
  /**
   * A result matrix (f32, from a storage buffer) stored row-major to an f32 workgroup tile of row
   * stride `stride` (the score tile's: 68) and read back by scalar loads: the store, not the load.
   */
  readonly store?: boolean;
}

const kernel = (stride: number) => ({ stride });
/** The cases, the kernel's own K load first. */
export const ISOLATE_CASES: readonly IsolateCase[] = [
  { name: 'load', changes: "none: K's right matrices as phase B loads them", ...kernel(72) },
  { name: 'load-stride64', changes: 'rows unpadded (128 bytes)', ...kernel(64) },
  { name: 'load-stride96', changes: 'rows padded by 64 bytes (192 bytes)', ...kernel(96) },
  {
    name: 'load-self-write',
    changes: 'each subgroup writes its own copy of the tile',
    ...kernel(72),
    selfWrite: true,
  },
  {
    name: 'load-storage-barrier',
    changes: 'storageBarrier after the barrier',
    ...kernel(72),
    between: 'storage-barrier',
  },
  { name: 'load-two-barriers', changes: 'a second workgroupBarrier', ...kernel(72), between: 'two-barriers' },
  {
    name: 'load-uniform-load',
    changes: "a workgroupUniformLoad's zero added to the offsets",
    ...kernel(72),
    between: 'uniform-load',
  },
  { name: 'load-offset0', changes: 'only the block at offset 0', ...kernel(72), offsetZero: true },
  { name: 'load-transposed', changes: 'kᵀ in the tile, loaded row-major', ...kernel(72), transposed: true },
  { name: 'load-runtime-stride', changes: 'the stride read at run time', ...kernel(72), runtimeStride: true },
  ...[1, 2, 3, 4].flatMap((words) =>
    [true, false].map((before) => ({
      name: `lead${words * 4}-${before ? 'before' : 'after'}`,
      changes: `a ${words * 4}-byte workgroup array declared ${before ? 'before' : 'after'} the tile`,
      ...kernel(72),
      lead: { words, before },
    })),
  ),
  {
    name: 'lead8-before-runtime-stride',
    changes: 'an 8-byte array declared before the tile, the stride read at run time',
    ...kernel(72),
    lead: { words: 2, before: true },
    runtimeStride: true,
  },
  {
    name: 'lead8-after-runtime-stride',
    changes: 'an 8-byte array declared after the tile, the stride read at run time',
    ...kernel(72),
    lead: { words: 2, before: false },
    runtimeStride: true,
  },
  {
    name: 'kernel-variables',
    changes: "the tile is kv_tile among the kernel's workgroup variables (rows padded by 16 bytes)",
    ...kernel(72),
    kernelVariables: { aligned: false },
  },
  {
    name: 'kernel-variables-stride64',
    changes: "the same with the kernel's unpadded rows",
    ...kernel(64),
    kernelVariables: { aligned: false },
  },
  {
    name: 'kernel-variables-aligned',
    changes: "the kernel's workgroup variables with alignedTiles",
    ...kernel(72),
    kernelVariables: { aligned: true },
  },
  {
    name: 'kernel-variables-aligned-stride64',
    changes: "the kernel's workgroup variables with alignedTiles, unpadded rows",
    ...kernel(64),
    kernelVariables: { aligned: true },
  },
  {
    name: 'scores',
    changes: "q's left matrices live, the score product (phases A and B)",
    ...kernel(72),
    scores: true,
  },
  {
    name: 'scores-kernel-variables',
    changes: "the score product among the kernel's workgroup variables",
    ...kernel(72),
    scores: true,
    kernelVariables: { aligned: false },
  },
  {
    name: 'scores-kernel-variables-aligned',
    changes: "the score product among the kernel's workgroup variables with alignedTiles",
    ...kernel(72),
    scores: true,
    kernelVariables: { aligned: true },
  },
  {
    name: 'store',
    changes: 'an f32 result matrix stored to a workgroup tile (stride 68), read back',
    ...kernel(68),
    store: true,
  },
  ...[1, 2, 3].flatMap((words) =>
    [true, false].map((before) => ({
      name: `store-lead${words * 4}-${before ? 'before' : 'after'}`,
      changes: `the store, a ${words * 4}-byte workgroup array declared ${before ? 'before' : 'after'} the tile`,
      ...kernel(68),
      store: true,
      lead: { words, before },
    })),
  ),
];

/** Elements of the tile (its rows and a spare one, as the kernel's), per copy. */
function tileLength(c: IsolateCase, M = 16): number {
  return Math.ceil((((c.store ? S * M : BC) + 1) * c.stride) / 64) * 64;
}

/** Where element (key, d) of K lies in the tile (in f16 from the tile's start). */
function address(c: IsolateCase, key: number, d: number): number {
  return c.transposed ? d * c.stride + key : key * c.stride + d;
}

/** The blocks a subgroup loads: (key block, head block) pairs. */
function blocks(c: IsolateCase, shape: MatrixShape): [number, number][] {
  if (c.offsetZero) return [[0, 0]];
  const out: [number, number][] = [];
  for (let kb = 0; kb < BC / shape.N; kb++) for (let h = 0; h < H / shape.K; h++) out.push([kb, h]);
  return out;
}

/** The case's WGSL for matrices of `shape` (M×N×K, subgroup size shape.sg). */
export function isolateSource(c: IsolateCase, shape: MatrixShape): string {
  const { M, N, K, sg } = shape;
  const WG = S * sg;
  const left = `subgroup_matrix_left<f16, ${K}, ${M}>`;
  const right = `subgroup_matrix_right<f16, ${N}, ${K}>`;
  const result = `subgroup_matrix_result<f32, ${N}, ${M}>`;
  const stride = c.runtimeStride ? 'stride' : `${c.stride}u`;
  const copies = c.selfWrite ? S : 1;
  const TILE = tileLength(c, M);
  // The tile, and what the case declares around it.
  const variant = c.kernelVariables
    ? checkVariant({ ...shape, pad: (c.stride - H) * 2, alignedTiles: c.kernelVariables.aligned }, BC)
    : null;
  const tile = variant ? 'kv_tile' : 'tile';
  const words = variant ? sgmatWords(variant.matrix as MatrixShape) : null;
  const lead = c.lead ? `var<workgroup> lead: array<u32, ${c.lead.words}>;` : '';
  const zero = c.between === 'uniform-load' ? 'var<workgroup> zero_words: array<u32, 4>;' : '';
  const declarations = variant
    ? sgmatWorkgroupDeclarations(variant)
    : [
        c.lead?.before ? lead : '',
        `var<workgroup> tile: array<${c.store ? 'f32' : 'f16'}, ${copies * TILE}>;`,
        c.lead?.before ? '' : lead,
      ]
        .filter(Boolean)
        .join('\n');
  // Every declared variable written by invocation 0 and read back into SINK, so none is dropped.
  const touch = words
    ? `if (lid == 0u) {
    s_tile[0] = 1.0; p_tile[0] = f16(2.0); row_lo[0] = 3; row_hi[0] = 4;
    atomicStore(&${words.blockLo}, 5); atomicStore(&${words.blockHi}, 6); atomicStore(&${words.tileFlags}, 7u);
    ${words.rangeLo} = 8; ${words.rangeHi} = 9; ${words.tileFlagsRead} = 10u;
  }`
    : c.lead
      ? `if (lid < ${c.lead.words}u) { lead[lid] = lid + 1u; }`
      : '';
  const sink = words
    ? `SINK[0] = u32(s_tile[0]) + u32(p_tile[0]) + u32(row_lo[0] + row_hi[0]) + u32(atomicLoad(&${words.blockLo}) + atomicLoad(&${words.blockHi})) + atomicLoad(&${words.tileFlags}) + u32(${words.rangeLo} + ${words.rangeHi}) + ${words.tileFlagsRead};`
    : c.lead
      ? `var t = 0u; for (var i = 0u; i < ${c.lead.words}u; i++) { t += lead[i]; } SINK[0] = t;`
      : 'SINK[0] = 1u;';
  const between = {
    barrier: 'workgroupBarrier();\n  let f = 0u;',
    'storage-barrier': 'workgroupBarrier();\n  storageBarrier();\n  let f = 0u;',
    'two-barriers': 'workgroupBarrier();\n  workgroupBarrier();\n  let f = 0u;',
    'uniform-load': 'let f = workgroupUniformLoad(&zero_words[0]);',
  }[c.between ?? 'barrier'];
  // The subgroup's copy of the tile (every subgroup shares copy 0 unless each writes its own).
  const base = c.selfWrite ? `sg * ${TILE}u` : '0u';
  // K's tile from SRC (rows of H), by every invocation or by each subgroup into its own copy.
  const writeK = c.selfWrite
    ? `for (var e = lid % ${sg}u; e < ${BC * H}u; e += ${sg}u) { ${tile}[${base} + ${addressWgsl(c, 'e')}] = f16(SRC[e]); }`
    : `for (var e = lid; e < ${BC * H}u; e += ${WG}u) { ${tile}[${addressWgsl(c, 'e')}] = f16(SRC[e]); }`;
  const kAt = (kb: string, h: string) =>
    c.transposed
      ? `${base} + ${h} * ${K}u * ${stride} + ${kb} * ${N}u + f`
      : `${base} + ${kb} * ${N}u * ${stride} + ${h} * ${K}u + f`;
  const load = (kb: string, h: string) =>
    `subgroupMatrixLoad<${right}>(&${tile}, ${kAt(kb, h)}, ${c.transposed ? 'false' : 'true'}, ${stride})`;
  let body: string;
  if (c.store) {
    // Rows sg·M… of K (f32 in SRC) as M×N result blocks, stored where the score tile keeps a
    // subgroup's block, then every row read back by scalar loads.
    body = `for (var kb = 0u; kb < ${BC / N}u; kb++) {
    let m = subgroupMatrixLoad<${result}>(&SRC, sg * ${M * H}u + kb * ${N}u, false, ${H}u);
    subgroupMatrixStore(&tile, sg * ${M}u * ${stride} + kb * ${N}u, m, false, ${stride});
  }
  workgroupBarrier();
  for (var e = lid; e < ${S * M * BC}u; e += ${WG}u) { OUT32[e] = tile[(e / ${BC}u) * ${stride} + e % ${BC}u]; }`;
  } else if (c.scores) {
    // q's rows (S·M of them, after K's rows in SRC) staged through the tile, each subgroup's M rows
    // as H/K left matrices, then K's tile over them, as the kernel's prologue and phase A do.
    const QB = H / K;
    body = `for (var e = lid; e < ${S * M * H}u; e += ${WG}u) { ${tile}[(e / ${H}u) * ${stride} + e % ${H}u] = f16(SRC[${BC * H}u + e]); }
  workgroupBarrier();
  ${Array.from({ length: QB }, (_, h) => `let q${h} = subgroupMatrixLoad<${left}>(&${tile}, sg * ${M}u * ${stride} + ${h * K}u, false, ${stride});`).join('\n  ')}
  workgroupBarrier();
  ${writeK}
  ${between}
  for (var kb = 0u; kb < ${BC / N}u; kb++) {
    var s = ${result}();
    ${Array.from({ length: QB }, (_, h) => `s = subgroupMatrixMultiplyAccumulate(q${h}, ${load('kb', `${h}u`)}, s);`).join('\n    ')}
    subgroupMatrixStore(&OUT32, sg * ${M * BC}u + kb * ${N}u, s, false, ${BC}u);
  }`;
  } else {
    const loop = c.offsetZero
      ? `{ let kb = 0u; let h = 0u;`
      : `for (var kb = 0u; kb < ${BC / N}u; kb++) {
    for (var h = 0u; h < ${H / K}u; h++) {`;
    body = `${writeK}
  ${between}
  ${loop}
      let km = ${load('kb', 'h')};
      subgroupMatrixStore(&OUT, sg * ${BC * H}u + kb * ${N}u * ${H}u + h * ${K}u, km, true, ${H}u);
    }${c.offsetZero ? '' : '\n  }'}`;
  }
  return `diagnostic(off, chromium.subgroup_matrix_uniformity);
enable f16;
enable subgroups;
enable chromium_experimental_subgroup_matrix;

@group(0) @binding(0) var<storage, read> SRC: array<f32>;
@group(0) @binding(1) var<storage, read> U: array<u32>;
@group(0) @binding(2) var<storage, read_write> OUT: array<f16>;
@group(0) @binding(3) var<storage, read_write> OUT32: array<f32>;
@group(0) @binding(4) var<storage, read_write> SINK: array<u32>;

${declarations}
${zero}

@compute @workgroup_size(${WG})
fn main(@builtin(local_invocation_index) lid: u32) {
  let sg = lid / ${sg}u;
  let stride = U[0];
  ${touch}
  ${body}
  workgroupBarrier();
  if (lid == 0u) {
    ${sink}
    // Never taken (U[1] is 0): keeps every binding in the layout.
    if (U[1] == 7u) { OUT[0] = f16(OUT32[0]); }
  }
}
`;
}

/** WGSL for the tile address of K's element e (row e / H, column e % H). */
function addressWgsl(c: IsolateCase, e: string): string {
  return c.transposed
    ? `(${e} % ${H}u) * ${c.stride}u + ${e} / ${H}u`
    : `(${e} / ${H}u) * ${c.stride}u + ${e} % ${H}u`;
}

export interface IsolateResult {
  readonly case: string;
  readonly changes: string;
  readonly stride: number;
  readonly maxError: number;
  readonly wrong: number;
  readonly of: number;
  /** The first wrong value: its subgroup, key (row of the score) and head dim (key column). */
  readonly first: { index: number; sg: number; row: number; col: number; got: number; want: number } | null;
  /**
   * Blocks by the element shift that explains all their values ("4": read 4 elements before the
   * address; for scores, "k4 q0": K's operand 4 early, q's exact), and those no shift explains.
   */
  readonly shifts: Record<string, number>;
}

/**
 * The shift s ≠ 0 in [−16, 16] for which every (value, tile address) pair holds tile[address − s],
 * or 'none'. Addresses outside the tile (another variable's memory) fit any shift.
 */
function fitShift(values: readonly [number, number][], tile: Float64Array): string {
  for (let s = -16; s <= 16; s++)
    if (s !== 0 && values.every(([g, a]) => a - s < 0 || a - s >= tile.length || g === tile[a - s]))
      return String(s);
  return 'none';
}

/** (K's shift, q's shift) pairs in [−8, 8]², smallest first, shifts ≥ 0 before negative ones. */
const SCORE_SHIFTS: readonly [number, number][] = Array.from(
  { length: 17 * 17 },
  (_, i): [number, number] => [Math.floor(i / 17) - 8, (i % 17) - 8],
).sort(
  ([a, b], [c, d]) =>
    Math.abs(a) + Math.abs(b) - Math.abs(c) - Math.abs(d) ||
    Number(a < 0) + Number(b < 0) - Number(c < 0) - Number(d < 0),
);

/** K's rows and q's rows of the check's problem (f16-exact multiples of 1/16). */
function inputs(): { k: Float64Array; q: Float64Array } {
  const { q, k } = checkInputs();
  return { k: k.slice(0, BC * H), q: q.slice(0, BC * H) };
}

/**
 * Compares what a case stored with what it should hold: K's rows per subgroup (OUT) or the scores
 * q·kᵀ (OUT32), and fits each wrong block by a shift of its operand addresses.
 */
export function judgeIsolate(c: IsolateCase, shape: MatrixShape, got: ArrayLike<number>): IsolateResult {
  const { M, N, K } = shape;
  const { k, q } = inputs();
  // The tile as scalar code left it: K at its addresses, zero elsewhere (Dawn zeroes workgroup memory).
  const TILE = tileLength(c, M);
  const tileK = new Float64Array(TILE);
  if (!c.store)
    for (let key = 0; key < BC; key++) for (let d = 0; d < H; d++) tileK[address(c, key, d)] = k[key * H + d];
  const at = (t: Float64Array, i: number) => (i >= 0 && i < t.length ? t[i] : 0);
  let maxError = 0;
  let wrong = 0;
  let of = 0;
  let first: IsolateResult['first'] = null;
  const shifts: Record<string, number> = {};
  const note = (key: string) => {
    shifts[key] = (shifts[key] ?? 0) + 1;
  };
  if (c.store) {
    // The f32 tile as the store should leave it: K's rows sg·M… at row stride c.stride.
    for (let i = 0; i < S * M; i++) for (let j = 0; j < BC; j++) tileK[i * c.stride + j] = k[i * H + j];
    for (let sg = 0; sg < S; sg++)
      for (let kb = 0; kb < BC / N; kb++) {
        const values: [number, number][] = [];
        let blockWrong = false;
        for (let r = 0; r < M; r++)
          for (let n = 0; n < N; n++) {
            const i = sg * M + r;
            const j = kb * N + n;
            const want = k[i * H + j];
            const g = got[i * BC + j];
            values.push([g, i * c.stride + j]);
            const e = Math.abs(g - want);
            of++;
            if (!(e <= maxError)) maxError = e;
            if (!(e === 0)) {
              wrong++;
              blockWrong = true;
              first ??= { index: i * BC + j, sg, row: i, col: j, got: g, want };
            }
          }
        if (blockWrong) note(fitShift(values, tileK));
      }
    return { case: c.name, changes: c.changes, stride: c.stride, maxError, wrong, of, first, shifts };
  }
  if (c.scores) {
    // q staged row-major (stride c.stride) in the tile before K.
    const tileQ = new Float64Array(TILE);
    for (let i = 0; i < S * M; i++) for (let d = 0; d < H; d++) tileQ[i * c.stride + d] = q[i * H + d];
    const score = (i: number, j: number, qs: number, ks: number) => {
      let x = 0;
      for (let d = 0; d < H; d++) x += at(tileQ, i * c.stride + d - qs) * at(tileK, address(c, j, d) - ks);
      return x;
    };
    for (let sg = 0; sg < S; sg++)
      for (let kb = 0; kb < BC / N; kb++) {
        let blockWrong = false;
        for (let r = 0; r < M; r++)
          for (let n = 0; n < N; n++) {
            const i = sg * M + r;
            const j = kb * N + n;
            const want = score(i, j, 0, 0);
            const g = got[sg * M * BC + r * BC + j];
            const e = Math.abs(g - want);
            of++;
            if (!(e <= maxError)) maxError = e;
            if (!(e === 0)) {
              wrong++;
              blockWrong = true;
              first ??= { index: sg * M * BC + r * BC + j, sg, row: i, col: j, got: g, want };
            }
          }
        if (!blockWrong) continue;
        const fits = (qs: number, ks: number) => {
          for (let r = 0; r < M; r++)
            for (let n = 0; n < N; n++)
              if (got[sg * M * BC + r * BC + kb * N + n] !== score(sg * M + r, kb * N + n, qs, ks))
                return false;
          return true;
        };
        // Only the operands' relative shift shows where the rows' padding is zero, so of the
        // shifts that fit, the smallest, reads before the address (the aligned-down kind) first.
        const found = SCORE_SHIFTS.find(([ks, qs]) => fits(qs, ks));
        note(found ? `k${found[0]} q${found[1]}` : 'none');
      }
    return { case: c.name, changes: c.changes, stride: c.stride, maxError, wrong, of, first, shifts };
  }
  for (let sg = 0; sg < S; sg++)
    for (const [kb, h] of blocks(c, shape)) {
      let blockWrong = false;
      const values: [number, number][] = [];
      for (let n = 0; n < N; n++)
        for (let d = 0; d < K; d++) {
          const key = kb * N + n;
          const col = h * K + d;
          const index = sg * BC * H + key * H + col;
          const want = k[key * H + col];
          const g = got[index];
          values.push([g, address(c, key, col)]);
          const e = Math.abs(g - want);
          of++;
          if (!(e <= maxError)) maxError = e;
          if (!(e === 0)) {
            wrong++;
            blockWrong = true;
            first ??= { index, sg, row: key, col, got: g, want };
          }
        }
      if (!blockWrong) continue;
      note(fitShift(values, tileK));
    }
  return { case: c.name, changes: c.changes, stride: c.stride, maxError, wrong, of, first, shifts };
}

/**
 * Runs a case on `device` (one workgroup) and judges what it stored; a string where it did not
 * build or run. `rewrite` changes the WGSL before it compiles (the tests emulate the matrix
 * operations in plain WGSL); `f32Only` says the rewrite made the f16 output buffer f32.
 */
export async function runIsolate(
  device: GPUDevice,
  c: IsolateCase,
  shape: MatrixShape,
  options: { rewrite?: (code: string) => string; f32Only?: boolean } = {},
): Promise<IsolateResult | string> {
  const { k, q } = inputs();
  const usage = { STORAGE: 128, COPY_SRC: 4, COPY_DST: 8, MAP_READ: 1 };
  const upload = (bytes: ArrayBuffer) => {
    const buffer = device.createBuffer({
      size: bytes.byteLength,
      usage: usage.STORAGE,
      mappedAtCreation: true,
    });
    new Uint8Array(buffer.getMappedRange()).set(new Uint8Array(bytes));
    buffer.unmap();
    return buffer;
  };
  const src = new Float32Array(2 * BC * H);
  src.set(k);
  src.set(q, BC * H);
  const outBytes = S * BC * H * (options.f32Only ? 4 : 2);
  const out32Bytes = S * shape.M * BC * 4;
  const buffers = [
    upload(src.buffer),
    upload(Uint32Array.from([c.stride, 0, 0, 0]).buffer),
    device.createBuffer({ size: outBytes, usage: usage.STORAGE | usage.COPY_SRC }),
    device.createBuffer({ size: out32Bytes, usage: usage.STORAGE | usage.COPY_SRC }),
    device.createBuffer({ size: 16, usage: usage.STORAGE }),
  ];
  const read = device.createBuffer({
    size: c.scores || c.store ? out32Bytes : outBytes,
    usage: usage.MAP_READ | usage.COPY_DST,
  });
  try {
    device.pushErrorScope('validation');
    const code = (options.rewrite ?? ((x: string) => x))(isolateSource(c, shape));
    const module = device.createShaderModule({ code, label: `sgmat isolate ${c.name}` });
    const pipeline = device.createComputePipeline({
      layout: 'auto',
      compute: { module, entryPoint: 'main' },
    });
    const encoder = device.createCommandEncoder();
    const pass = encoder.beginComputePass();
    pass.setPipeline(pipeline);
    pass.setBindGroup(
      0,
      device.createBindGroup({
        layout: pipeline.getBindGroupLayout(0),
        entries: buffers.map((buffer, binding) => ({ binding, resource: { buffer } })),
      }),
    );
    pass.dispatchWorkgroups(1);
    pass.end();
    encoder.copyBufferToBuffer(c.scores || c.store ? buffers[3] : buffers[2], 0, read, 0, read.size);
    device.queue.submit([encoder.finish()]);
    const error = await device.popErrorScope();
    if (error) return `did not build: ${error.message.split('\n')[0]}`;
    await read.mapAsync(1);
    const bytes = read.getMappedRange().slice(0);
    read.unmap();
    const got =
      c.scores || c.store || options.f32Only
        ? new Float32Array(bytes)
        : Float64Array.from(new Uint16Array(bytes), (x) => decodeValue(x, 'float16'));
    return judgeIsolate(c, shape, got);
  } catch (error) {
    return `failed: ${error instanceof Error ? error.message : String(error)}`;
  } finally {
    for (const buffer of [...buffers, read]) buffer.destroy();
  }
}
