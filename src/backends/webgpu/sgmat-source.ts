/**
 * The WGSL of the subgroup-matrix forward kernel: the tiled kernel's loop with its two products on
 * subgroup matrices (Dawn's chromium_experimental_subgroup_matrix: Vulkan's cooperative matrices,
 * the tensor cores on NVIDIA), f16 operands and f32 accumulators. float16 inputs only.
 *
 * A workgroup is 4 subgroups of SG invocations (SG = the adapter's one subgroup size) and takes
 * BR = 4·M query rows of one (b, n), M rows a subgroup. Each subgroup keeps its rows of q as H/K
 * left matrices and its M×Hv output accumulator as Hv/N result matrices for the whole key loop.
 * Per tile of BC keys:
 *   A. K's tile (f16) into workgroup memory;
 *   B. S = q·kᵀ: BC/N result matrices a subgroup (H/K products each), stored to the score tile;
 *   C. the online softmax of each row by its TPR = SG/M adjacent invocations (subgroupShuffleXor):
 *      the scale, bias, mask and visibility, the NaN rules, the tile's max and p = e^(s − m) as f16
 *      in the P tile; V's tile is loaded meanwhile over K's, checked for non-finite values;
 *   D. O += P·V: BC/K × Hv/N products a subgroup.
 * A result matrix's elements are not addressable in WGSL, so the accumulator is never rescaled in
 * registers: a row's reference max m moves only when a tile's max passes m + 8 (p stays ≤ e^8 =
 * 2981, well inside f16), and then every subgroup stores its accumulator blocks to workgroup
 * memory, scales the rows and loads them back (with random inputs at T = 4096 this happens on the
 * first tiles only). The epilogue goes through workgroup memory the same way.
 *
 * A key a row does not see has p = −0, and 0 times a non-finite value is NaN in a matrix product:
 * a tile whose V holds an Inf or NaN runs D as scalar code instead (through the same workgroup
 * round trip), which skips −0 weights as the tiled kernel does. The rules are those of
 * tiled-source.ts: a NaN or +inf logit makes the row NaN, −inf is a masked key, a row that sees no
 * key outputs zeros with lse −inf.
 */
import { bindings, type ForwardVariant, type MatrixShape } from './variant.js';
import { loader, PAGED_ROW, PARAMS_STRUCT, ROW_RANGE, WGSL_FUNCTIONS } from './wgsl.js';

export type { MatrixShape } from './variant.js';

/** Subgroups a workgroup (timings compare 8, which takes 128 query rows with 32-key tiles). */
export const SGMAT_SUBGROUPS = 4;

/** Subgroups a workgroup of a shape. */
export function sgmatSubgroups(m: MatrixShape): number {
  return m.subgroups ?? SGMAT_SUBGROUPS;
}
/** The threshold, in natural-log units, past which a row's reference max moves: p ≤ e^8. */
const RESCALE_AT = 8;

/**
 * Element strides of the workgroup tiles: each row padded by `m.pad` bytes (16 unless the shape
 * says) against bank conflicts. Every row then starts on a multiple of the pad; the device check
 * (sgmat-check.ts) tries 64 where 16 fails, for matrix loads that need rows aligned wider than
 * 16 bytes (the H100's single-operation checks, all on 32- and 64-byte rows, passed while the
 * kernel on 16-byte-aligned rows of 144 and 272 bytes did not).
 */
function strides(
  H: number,
  Hv: number,
  bc: number,
  m: Pick<MatrixShape, 'pad' | 'kTransposed' | 'alignedTiles'>,
) {
  const pad = m.pad ?? 16;
  const tileLength = (rows: number, stride: number) => tileElements(rows, stride, m);
  const KS = Math.max(H, Hv) + pad / 2;
  // K's tile stored as kᵀ (H rows of bc keys) where the shape says, V's as rows of keys in the same array.
  const KTS = bc + pad / 2;
  return {
    KS,
    KTS,
    KVLEN: Math.max(tileLength(bc, KS), m.kTransposed ? tileLength(H, KTS) : 0),
    SS: bc + pad / 4,
    PS: bc + pad / 2,
    QS: H + pad / 2,
    OS: Hv + pad / 4,
  };
}

/**
 * Elements each tile holds: its rows, and one row more. Dawn's robustness pass moves a matrix load
 * or store it cannot prove in bounds to offset 0 with the tightest stride (a wrong result, no
 * error); the spare row keeps a block at the end of a padded row inside the array however the
 * pass measures its extent (stride × rows from the offset, or the last row's columns only).
 * With `alignedTiles`, rounded up to 64 elements (128 bytes of f16), so that every workgroup
 * variable spans a multiple of 16 bytes and none can start a tile off a 16-byte boundary.
 */
function tileElements(rows: number, stride: number, m: Pick<MatrixShape, 'alignedTiles'>): number {
  const length = (rows + 1) * stride;
  return m.alignedTiles ? Math.ceil(length / 64) * 64 : length;
}

/**
 * The kernel's one-word workgroup variables, by name. The H100's Vulkan driver (580.159) places
 * workgroup variables at their element alignment, after these words (24 bytes of them, 28 with
 * the fence's), so the tiles began 8 or 12 bytes past a 16-byte boundary; its matrix loads and
 * stores then read and wrote every element 4 or 6 f16 (or one f32) away from where scalar code
 * put it (sgmat-check.ts: the trace of each layout). With `alignedTiles` the words are elements of
 * four 16-byte arrays, declared before the tiles, so every variable spans a multiple of 16 bytes
 * and each tile starts on a 16-byte boundary however the driver orders them.
 */
export function sgmatWords(m: Pick<MatrixShape, 'alignedTiles'>) {
  return m.alignedTiles
    ? {
        decl: `/** block_lo, block_hi; tile_flags (bit 0: a row's reference max moved this tile; bit 1: V's tile holds an Inf or NaN); range_lo, range_hi; tile_flags_read, fence_zero (never written: zero). */
var<workgroup> wg_atomic_i32: array<atomic<i32>, 4>;
var<workgroup> wg_atomic_u32: array<atomic<u32>, 4>;
var<workgroup> wg_i32: array<i32, 4>;
var<workgroup> wg_u32: array<u32, 4>;`,
        blockLo: 'wg_atomic_i32[0]',
        blockHi: 'wg_atomic_i32[1]',
        tileFlags: 'wg_atomic_u32[0]',
        rangeLo: 'wg_i32[0]',
        rangeHi: 'wg_i32[1]',
        tileFlagsRead: 'wg_u32[0]',
        fenceZero: 'wg_u32[1]',
      }
    : {
        decl: `var<workgroup> block_lo: atomic<i32>;
var<workgroup> block_hi: atomic<i32>;
var<workgroup> range_lo: i32;
var<workgroup> range_hi: i32;
/** Set when a row's reference max moved this tile (bit 0), when V's tile holds an Inf or NaN (bit 1). */
var<workgroup> tile_flags: atomic<u32>;
var<workgroup> tile_flags_read: u32;
/** Never written: zero, read by workgroupUniformLoad where the loads' offsets are fenced. */
var<workgroup> fence_zero: u32;`,
        blockLo: 'block_lo',
        blockHi: 'block_hi',
        tileFlags: 'tile_flags',
        rangeLo: 'range_lo',
        rangeHi: 'range_hi',
        tileFlagsRead: 'tile_flags_read',
        fenceZero: 'fence_zero',
      };
}

/** Workgroup bytes the kernel takes with tiles of `bc` keys. */
export function sgmatStorageBytes(H: number, Hv: number, bc: number, m: MatrixShape): number {
  const { KVLEN, SS, PS, QS, OS } = strides(H, Hv, bc, m);
  const br = sgmatSubgroups(m) * m.M;
  const tileLength = (rows: number, stride: number) => tileElements(rows, stride, m);
  return (
    (m.pingPong ? 2 : 1) * KVLEN * 2 +
    tileLength(br, SS) * 4 +
    tileLength(br, PS) * 2 +
    (m.qTile ? tileLength(br, QS) * 2 : 0) +
    (m.oTile ? tileLength(br, OS) * 4 : 0) +
    br * 8 +
    (m.alignedTiles ? 64 : 36) +
    (m.noShuffle ? sgmatSubgroups(m) * m.sg * 4 : 0)
  );
}

/** Keys a tile where the kernel applies to these head dims within `storage` bytes, else null. */
export function sgmatKeys(H: number, Hv: number, m: MatrixShape, storage: number): number | null {
  const tpr = m.sg / m.M;
  if (!Number.isInteger(tpr) || tpr < 1 || (tpr & (tpr - 1)) !== 0) return null;
  if (H % m.K !== 0 || Hv % m.N !== 0 || (Hv / tpr) % 2 !== 0 || m.N % (2 * tpr) !== 0) return null;
  return (
    [64, 32].find(
      (bc) =>
        bc <= (m.keys ?? 64) &&
        bc % m.M === 0 &&
        bc % m.N === 0 &&
        bc % m.K === 0 &&
        bc % tpr === 0 &&
        sgmatStorageBytes(H, Hv, bc, m) <= storage,
    ) ?? null
  );
}

/**
 * The sections of the kernel's trace (an extra f32 storage binding, TRACE, after the others): what
 * workgroup 0 holds at each phase of its first key tile, in this order, each `length` values from
 * `offset`. The kernel runs on to its end with the trace written, so its output is that of the
 * traced build; sgmat-check.ts says what each section should hold on the check's problem.
 *   ids     8 a invocation: lid, sg, subgroup_invocation_id, subgroup_size, r, part, first, last
 *   q       BR × H: q as the left matrices hold it (stored from them through the P tile)
 *   kTile   BC × H: K's tile in workgroup memory after A, read by scalar loads
 *   kMat    BC × H: K's right matrices as B loads them (subgroup 0's, stored through the P tile)
 *   sDirect BR × BC: the scores matrices stored straight to TRACE after their products
 *   sTile   BR × BC: the score tile after B's barrier, read by scalar loads
 *   p       BR × BC: the weights after C
 *   acc     BR × Hv: the accumulator after D
 * q and kMat need H ≤ the P tile's row stride (the check's H=64 with 64-key tiles): elsewhere they
 * are empty.
 */
export const TRACE_SECTIONS = ['ids', 'q', 'kTile', 'kMat', 'sDirect', 'sTile', 'p', 'acc'] as const;
export type TraceSection = (typeof TRACE_SECTIONS)[number];

export function sgmatTraceLayout(
  v: ForwardVariant,
): Record<TraceSection, { offset: number; length: number; cols: number }> {
  const m = v.matrix as MatrixShape;
  const BR = sgmatSubgroups(m) * m.M;
  const { PS } = strides(v.H, v.Hv, v.bc, m);
  const fits = v.H <= PS && v.bc <= BR;
  const shapes: Record<TraceSection, [number, number]> = {
    ids: [sgmatSubgroups(m) * m.sg, 8],
    q: fits ? [BR, v.H] : [0, v.H],
    kTile: [v.bc, v.H],
    kMat: fits ? [v.bc, v.H] : [0, v.H],
    sDirect: [BR, v.bc],
    sTile: [BR, v.bc],
    p: [BR, v.bc],
    acc: [BR, v.Hv],
  };
  let offset = 0;
  const out = {} as Record<TraceSection, { offset: number; length: number; cols: number }>;
  for (const name of TRACE_SECTIONS) {
    const [rows, cols] = shapes[name];
    out[name] = { offset, length: rows * cols, cols };
    offset += rows * cols;
  }
  return out;
}

/** Values the trace binding holds. */
export function sgmatTraceLength(v: ForwardVariant): number {
  const layout = sgmatTraceLayout(v);
  return layout.acc.offset + layout.acc.length;
}

/**
 * Eight f16 (a 16-byte load) into a workgroup tile from element at, each through f32 (exact for
 * every f16, Inf and NaN included): the conversions the subgroup-matrix checks exercised, not a
 * bitcast of the words to vec4<f16>, which they did not. With a stride, the eight go down a column
 * (K's tile stored transposed).
 */
function put8(name: string, tile: string, stride = '1u'): string {
  const at = (e: number) => (e === 0 ? 'at' : `at + ${e}u * ${stride}`);
  return `fn ${name}(at: u32, x: vec4u) {
  let a = unpack2x16float(x.x);
  let b = unpack2x16float(x.y);
  let c = unpack2x16float(x.z);
  let d = unpack2x16float(x.w);
  ${tile}[${at(0)}] = f16(a.x); ${tile}[${at(1)}] = f16(a.y); ${tile}[${at(2)}] = f16(b.x); ${tile}[${at(3)}] = f16(b.y);
  ${tile}[${at(4)}] = f16(c.x); ${tile}[${at(5)}] = f16(c.y); ${tile}[${at(6)}] = f16(d.x); ${tile}[${at(7)}] = f16(d.y);
}`;
}

/**
 * The kernel's workgroup variables as it declares them: the tiles first, then the small variables;
 * with alignedTiles the other way round (a driver that places variables in reverse order of
 * declaration then puts the tiles first). Exported for the isolation kernels
 * (sgmat-isolate.ts), which reproduce the kernel's placement around one load.
 */
export function sgmatWorkgroupDeclarations(v: ForwardVariant): string {
  const m = v.matrix as MatrixShape;
  const { KVLEN, SS, PS, QS, OS } = strides(v.H, v.Hv, v.bc, m);
  const tileLength = (rows: number, stride: number) => tileElements(rows, stride, m);
  const BR = sgmatSubgroups(m) * m.M;
  const WG = sgmatSubgroups(m) * m.sg;
  const tiles = `var<workgroup> kv_tile: array<f16, ${(m.pingPong ? 2 : 1) * KVLEN}>;
var<workgroup> s_tile: array<f32, ${tileLength(BR, SS)}>;
var<workgroup> p_tile: array<f16, ${tileLength(BR, PS)}>;
${m.qTile ? `var<workgroup> q_tile: array<f16, ${tileLength(BR, QS)}>;` : ''}
${m.oTile ? `var<workgroup> o_tile: array<f32, ${tileLength(BR, OS)}>;` : ''}`;
  const small = `var<workgroup> row_lo: array<i32, ${BR}>;
var<workgroup> row_hi: array<i32, ${BR}>;
${sgmatWords(m).decl}
${m.noShuffle ? `var<workgroup> red: array<u32, ${WG}>;` : ''}`;
  return m.alignedTiles ? `${small}\n${tiles}` : `${tiles}\n${small}`;
}

export function sgmatSource(v: ForwardVariant, trace = false): string {
  const m = v.matrix;
  if (!m || v.dtype !== 'float16')
    throw new Error('the subgroup-matrix kernel needs a float16 variant with a matrix shape');
  const { KS, KTS, KVLEN, SS, PS, QS, OS } = strides(v.H, v.Hv, v.bc, m);
  const w = sgmatWords(m);
  const BR = sgmatSubgroups(m) * m.M;
  const WG = sgmatSubgroups(m) * m.sg;
  const TPR = m.sg / m.M;
  const QB = v.H / m.K;
  const OB = v.Hv / m.N;
  const slots = bindings(v);
  const at = (name: string) => `@group(0) @binding(${slots.indexOf(name)})`;
  // The col_major argument of a load or store: q, P, V and the result blocks are row-major, K's
  // tile read as kᵀ column-major (row-major where it is stored transposed).
  const ROW = 'false';
  const COL = 'true';
  const left = `subgroup_matrix_left<f16, ${m.K}, ${m.M}>`;
  const right = `subgroup_matrix_right<f16, ${m.N}, ${m.K}>`;
  const result = `subgroup_matrix_result<f32, ${m.N}, ${m.M}>`;
  const layout = sgmatTraceLayout(v);
  const decl = [
    `${at('params')} var<uniform> P: Params;`,
    `${at('q')} var<storage, read> Q: array<vec4u>;`,
    `${at('k')} var<storage, read> Kb: array<vec4u>;`,
    `${at('v')} var<storage, read> Vb: array<vec4u>;`,
    `${at('o')} var<storage, read_write> O: array<u32>;`,
    v.lse ? `${at('lse')} var<storage, read_write> LSE: array<f32>;` : '',
    v.bias ? `${at('bias')} var<storage, read> BIAS: array<${v.bias === 'float32' ? 'f32' : 'u32'}>;` : '',
    v.mask ? `${at('mask')} var<storage, read> MASK: array<u32>;` : '',
    v.lengths ? `${at('lengths')} var<storage, read> LENS: array<i32>;` : '',
    v.paged ? `${at('table')} var<storage, read> TABLE: array<i32>;` : '',
    v.packedQuery || v.packedKv ? `${at('offsets')} var<storage, read> OFFS: array<i32>;` : '',
    trace ? `@group(0) @binding(${slots.length}) var<storage, read_write> TRACE: array<f32>;` : '',
  ].filter(Boolean);
  // Trace code: on the first key tile of workgroup 0 (a workgroup-uniform condition), between barriers.
  const traced = (code: string) =>
    trace
      ? `if (wg.x == 0u && j0 == j_first) {
      workgroupBarrier();
      ${code}
      workgroupBarrier();
    }`
      : '';
  // Copies rows × cols of a workgroup tile to section `name` of TRACE: element (row, col) at
  // base + row·stride + col, or base + col·stride + row where `transposed`.
  const copy = (name: TraceSection, tile: string, stride: string, base = '0u', transposed = false) => {
    const { offset, length, cols } = layout[name];
    const [rowStride, colStride] = transposed ? ['1u', stride] : [stride, '1u'];
    return length === 0
      ? ''
      : `for (var e = lid; e < ${length}u; e += WG) { TRACE[${offset}u + e] = f32(${tile}[${base} + (e / ${cols}u) * ${rowStride} + (e % ${cols}u) * ${colStride}]); }`;
  };
  const range = (n: number) => Array.from({ length: n }, (_, i) => i);
  // Shuffles that combine a row's TPR adjacent invocations.
  const xors = range(Math.log2(TPR)).map((s) => 1 << s);
  // Or, with noShuffle, through workgroup memory (a word an invocation, between barriers), so the
  // kernel has no subgroup operation besides its matrices. `bits` says whether the value is a u32.
  const reduce = (name: string, op: (a: string, b: string) => string, bits = false) =>
    m.noShuffle
      ? `workgroupBarrier();
      red[lid] = ${bits ? name : `bitcast<u32>(${name})`};
      workgroupBarrier();
      // In the same order on every invocation of the row, so all hold the same sum.
      ${name} = ${bits ? 'red[r * TPR]' : 'bitcast<f32>(red[r * TPR])'};
      for (var t = 1u; t < TPR; t++) {
        let other = red[r * TPR + t];
        ${name} = ${op(name, bits ? 'other' : 'bitcast<f32>(other)')};
      }`
      : xors.map((x) => `${name} = ${op(name, `subgroupShuffleXor(${name}, ${x}u)`)};`).join(' ');
  // Stores result block o{c} to this subgroup's scratch rows, between barriers.
  // The barrier before the store: the previous block's load (or the phase before) is done with the rows.
  // With oTile the accumulator lives in o_tile and block c is already there: only the barriers.
  const toScratch = (c: number) =>
    m.oTile
      ? 'workgroupBarrier();'
      : `workgroupBarrier();\n    subgroupMatrixStore(&s_tile, sg * ${m.M}u * SS, o${c}, ${ROW}, SS);\n    workgroupBarrier();`;
  const fromScratch = (c: number) =>
    m.oTile
      ? 'workgroupBarrier();'
      : `workgroupBarrier();\n    o${c} = subgroupMatrixLoad<${result}>(&s_tile, sg * ${m.M}u * SS, ${ROW}, SS);`;
  // Element x of row r's part of block c, as toScratch leaves it.
  const scratch = (c: number, x: string) =>
    m.oTile ? `o_tile[r * OS + ${c * m.N}u + col0 + ${x}]` : `s_tile[r * SS + col0 + ${x}]`;
  // This invocation's part of a scratch block: its row's COLS columns from col0.
  const COLS = m.N / TPR;
  // The barrier before a phase's matrix loads; with `fence`, a workgroupUniformLoad of a variable
  // that is always zero, added to the loads' offsets, so no load can be issued before the barrier.
  const fenced = (name: string) =>
    m.fence
      ? `let ${name} = workgroupUniformLoad(&${w.fenceZero});`
      : `workgroupBarrier();\n    let ${name} = 0u;`;
  // q's rows: a row past T or the sequence reads as zero (a matrix load straight from Q could run
  // past its end).
  const qRow = (
    rows: string,
    put: string,
    row: string,
  ) => `for (var e = lid; e < ${rows} * (H / 8u); e += WG) {
      let rr = e / (H / 8u);
      let cu = e % (H / 8u);
      let i = i0 + ${row};
      var x = vec4u(0u);
      if (${row} < BR && i < P.T && i32(i) < t_len) { x = Q[(q_row(b, i) * P.N + n) * (H / 8u) + cu]; }
      ${put};
    }`;
  // This subgroup's M rows of q as left matrices held for the whole key loop, staged through K's
  // tile BC rows at a time.
  const qInRegisters = `${range(QB)
    .map((h) => `var q${h} = ${left}();`)
    .join('\n  ')}
  for (var stage = 0u; stage < BR; stage += BC) {
    ${qRow('BC', 'put8(rr * KS + cu * 8u, x)', 'stage + rr')}
    ${fenced('fq')}
    ${BR <= v.bc ? "{ // one stage holds every subgroup's rows" : `if (sg * ${m.M}u >= stage && sg * ${m.M}u < stage + BC) {`}
      let q_at = (sg * ${m.M}u - stage) * KS + fq;
      ${range(QB)
        .map((h) => `q${h} = subgroupMatrixLoad<${left}>(&kv_tile, q_at + ${h * m.K}u, ${ROW}, KS);`)
        .join('\n      ')}
    }
    workgroupBarrier();
  }`;
  // Or q's rows in their own tile, each left matrix loaded where a product takes it (no matrix
  // lives across the key loop but the accumulator).
  const qInTile = `${qRow('BR', 'put8_q(rr * QS + cu * 8u, x)', 'rr')}
  workgroupBarrier();`;
  const qLeft = (h: number, fence = '0u') =>
    m.qTile
      ? `subgroupMatrixLoad<${left}>(&q_tile, sg * ${m.M}u * QS + ${h * m.K}u + ${fence}, ${ROW}, QS)`
      : `q${h}`;
  // K's right matrix (h, keys kb·N…) of this tile.
  const kRight = (h: number, fence: string) =>
    m.kTransposed
      ? `subgroupMatrixLoad<${right}>(&kv_tile, kbase + ${h * m.K}u * KTS + kb * ${m.N}u + ${fence}, ${ROW}, KTS)`
      : `subgroupMatrixLoad<${right}>(&kv_tile, kbase + kb * ${m.N}u * KS + ${h * m.K}u + ${fence}, ${COL}, KS)`;
  // B's chain of products for block kb: zero plus H/K products, or (mulFirst) a product then H/K − 1.
  const scoreChain = range(QB)
    .map((h) =>
      h === 0 && m.mulFirst
        ? `var s = subgroupMatrixMultiply<f32>(${qLeft(0, 'fk')}, ${kRight(0, 'fk')});`
        : `s = subgroupMatrixMultiplyAccumulate(${qLeft(h, 'fk')}, ${kRight(h, 'fk')}, s);`,
    )
    .join('\n      ');
  // The workgroup's key range: through atomics and workgroup memory, or (flatPrologue) by every
  // invocation over the BR rows, with no branch on the invocation before the first matrix operation.
  const prologue = m.flatPrologue
    ? `var first = s_len;
  var last = 0;
  for (var rr = 0u; rr < BR; rr++) {
    let span = row_range(i0 + rr, t_len, s_len);
    if (span.x < span.y) { first = min(first, span.x); last = max(last, span.y); }
  }`
    : `if (lid == 0u) { atomicStore(&${w.blockLo}, i32(P.S)); atomicStore(&${w.blockHi}, 0); atomicStore(&${w.tileFlags}, 0u); }
  workgroupBarrier();
  if (lid < BR) {
    let span = row_range(i0 + lid, t_len, s_len);
    row_lo[lid] = span.x;
    row_hi[lid] = span.y;
    if (span.x < span.y) { atomicMin(&${w.blockLo}, span.x); atomicMax(&${w.blockHi}, span.y); }
  }
  workgroupBarrier();
  if (lid == 0u) { ${w.rangeLo} = atomicLoad(&${w.blockLo}); ${w.rangeHi} = atomicLoad(&${w.blockHi}); }
  let first = workgroupUniformLoad(&${w.rangeLo});
  let last = workgroupUniformLoad(&${w.rangeHi});`;
  const rowBounds = m.flatPrologue
    ? 'let bounds = row_range(i0 + r, t_len, s_len);\n      let lo = bounds.x;\n      let hi = bounds.y;'
    : 'let lo = row_lo[r];\n      let hi = row_hi[r];';
  const kPut = m.kTransposed
    ? 'put8_t(kbase + cu * 8u * KTS + key, x)'
    : 'put8(kbase + key * KS + cu * 8u, x)';

  return `diagnostic(off, chromium.subgroup_matrix_uniformity);
enable f16;
enable subgroups;
enable chromium_experimental_subgroup_matrix;

const H: u32 = ${v.H}u;
const HV: u32 = ${v.Hv}u;
const BR: u32 = ${BR}u;
const BC: u32 = ${v.bc}u;
const KS: u32 = ${KS}u;
const KTS: u32 = ${KTS}u;
const SS: u32 = ${SS}u;
const PS: u32 = ${PS}u;
const QS: u32 = ${QS}u;
const KV1: u32 = ${KVLEN}u;
const OS: u32 = ${OS}u;
const WG: u32 = ${WG}u;
const TPR: u32 = ${TPR}u;
const COLS: u32 = ${COLS}u;

${PARAMS_STRUCT}

${decl.join('\n')}

${sgmatWorkgroupDeclarations(v)}

${v.bias ? loader('load_bias', 'BIAS', v.bias) : ''}

${WGSL_FUNCTIONS}
fn is_pos_inf(x: f32) -> bool { return bitcast<u32>(x) == 0x7f800000u; }
/** Whether either f16 of a word is an Inf or NaN (exponent bits all set). */
fn non_finite2(w: u32) -> bool { return (w & 0x7c00u) == 0x7c00u || (w & 0x7c000000u) == 0x7c000000u; }

${put8('put8', 'kv_tile')}
${m.kTransposed ? put8('put8_t', 'kv_tile', 'KTS') : ''}
${m.qTile ? put8('put8_q', 'q_tile') : ''}
${ROW_RANGE}

fn kv_row(b: u32, j: u32) -> u32 {
  ${v.paged ? PAGED_ROW : v.packedKv ? 'return u32(OFFS[P.B + 1u + b]) + j;' : 'return b * P.S + j;'}
}

fn q_row(b: u32, i: u32) -> u32 {
  ${v.packedQuery ? 'return u32(OFFS[b]) + i;' : 'return b * P.T + i;'}
}

@compute @workgroup_size(${WG})
fn main(@builtin(workgroup_id) wg: vec3u, @builtin(local_invocation_index) lid: u32${trace ? ', @builtin(subgroup_invocation_id) sg_lane: u32, @builtin(subgroup_size) sg_size: u32' : ''}) {
  let b = wg.z;
  let n = wg.y;
  let i0 = wg.x * BR;
  let kh = n / (P.N / P.K);
  let sg = lid / ${m.sg}u;
  ${v.lengths ? 'let t_len = LENS[b]; let s_len = LENS[P.B + b];' : 'let t_len = i32(P.T); let s_len = i32(P.S);'}
  ${m.flatPrologue ? `if (lid == 0u) { atomicStore(&${w.tileFlags}, 0u); }\n  workgroupBarrier();` : ''}
  ${prologue}

  ${m.qTile ? qInTile : qInRegisters}
  ${
    m.oTile
      ? `// The accumulator in o_tile, zero to start.
  for (var e = lid; e < BR * OS; e += WG) { o_tile[e] = 0.0; }
  workgroupBarrier();`
      : range(OB)
          .map((c) => `var o${c} = ${result}();`)
          .join('\n  ')
  }

  // The softmax phase's row (invocations TPR·r … TPR·r + TPR − 1 own row r, all in one subgroup),
  // its reference max, sum and flags (bit 0: a visible key seen; bit 1: a NaN or +inf logit seen).
  let r = lid / TPR;
  let part = lid % TPR;
  var m = 0.0;
  var l = 0.0;
  var flags = 0u;
  var corr = 1.0;
  // This invocation's columns of a scratch block: row r, columns col0 … col0 + COLS − 1.
  let col0 = part * COLS;
  ${v.bias ? 'let bias_base = b * P.bias_strides.x + n * P.bias_strides.y;' : ''}
  ${v.mask ? 'let mask_base = b * P.mask_strides.x + n * P.mask_strides.y;' : ''}

  let j_first = (first / i32(BC)) * i32(BC);
  var j0 = j_first;
  ${
    trace
      ? `if (wg.x == 0u) {
    let ids = ${layout.ids.offset}u + lid * 8u;
    TRACE[ids] = f32(lid); TRACE[ids + 1u] = f32(sg); TRACE[ids + 2u] = f32(sg_lane); TRACE[ids + 3u] = f32(sg_size);
    TRACE[ids + 4u] = f32(r); TRACE[ids + 5u] = f32(part); TRACE[ids + 6u] = f32(first); TRACE[ids + 7u] = f32(last);
  }
  ${
    layout.q.length
      ? `if (wg.x == 0u) {
    workgroupBarrier();
    ${range(QB)
      .map(
        (h) =>
          `{ let qm: ${left} = ${qLeft(h)}; subgroupMatrixStore(&p_tile, sg * ${m.M}u * PS + ${h * m.K}u, qm, ${ROW}, PS); }`,
      )
      .join('\n    ')}
    workgroupBarrier();
    ${copy('q', 'p_tile', 'PS')}
    workgroupBarrier();
  }`
      : ''
  }`
      : ''
  }
  loop {
    if (j0 >= last) { break; }
    ${
      m.pingPong
        ? `// K's and V's tiles trade halves of kv_tile every key tile.
    let kbase = select(0u, KV1, (u32(j0 - j_first) / BC) % 2u == 1u);
    let vbase = KV1 - kbase;`
        : 'let kbase = 0u; let vbase = 0u;'
    }
    // A. K's tile, 8 halves a load (keys past S read as zero and are never visible).
    for (var e = lid; e < BC * (H / 8u); e += WG) {
      let key = e / (H / 8u);
      let cu = e % (H / 8u);
      let j = u32(j0) + key;
      var x = vec4u(0u);
      if (j < P.S) { x = Kb[(kv_row(b, j) * P.K + kh) * (H / 8u) + cu]; }
      ${kPut};
    }
    ${fenced('fk')}
    ${traced(m.kTransposed ? copy('kTile', 'kv_tile', 'KTS', 'kbase', true) : copy('kTile', 'kv_tile', 'KS', 'kbase'))}
    // B. S = q·kᵀ, this subgroup's M rows × BC keys.
    for (var kb = 0u; kb < BC / ${m.N}u; kb++) {
      ${m.mulFirst ? '' : `var s = ${result}();\n      `}${scoreChain}
      subgroupMatrixStore(&s_tile, sg * ${m.M}u * SS + kb * ${m.N}u, s, ${ROW}, SS);
      ${trace ? `if (wg.x == 0u && j0 == j_first) { subgroupMatrixStore(&TRACE, ${layout.sDirect.offset}u + sg * ${m.M}u * BC + kb * ${m.N}u, s, ${ROW}, BC); }` : ''}
    }
    ${
      trace && layout.kMat.length
        ? traced(`for (var kb = 0u; kb < BC / ${m.N}u; kb++) {
        ${range(QB)
          .map(
            (h) =>
              `{ let km: ${right} = ${kRight(h, '0u')}; subgroupMatrixStore(&p_tile, kb * ${m.N}u * PS + ${h * m.K}u, km, ${COL}, PS); }`,
          )
          .join('\n        ')}
      }
      workgroupBarrier();
      ${copy('kMat', 'p_tile', 'PS')}`)
        : ''
    }
    workgroupBarrier();
    ${traced(copy('sTile', 's_tile', 'SS'))}
    // C. The online softmax of row r on its TPR invocations, every TPR-th key each. A key that is
    // not visible becomes NaN, a NaN or +inf logit +inf (as tiled-source.ts encodes them).
    {
      ${rowBounds}
      var tmax = make_nan(0xff800000u);
      var tflags = 0u;
      for (var k = part; k < BC; k += TPR) {
        let j = j0 + i32(k);
        var visible = j >= lo && j < hi;
        ${v.mask ? `if (visible) { let mi = mask_base + (i0 + r) * P.mask_strides.z + u32(j) * P.mask_strides.w; visible = ((MASK[mi >> 2u] >> ((mi & 3u) * 8u)) & 0xffu) != 0u; }` : ''}
        var x = s_tile[r * SS + k] * P.scale;
        ${v.bias ? 'if (visible) { x += load_bias(bias_base + (i0 + r) * P.bias_strides.z + u32(j) * P.bias_strides.w); }' : ''}
        if (visible && is_nan_or_pos_inf(x)) { x = make_nan(0x7f800000u); tflags |= 2u; }
        else if (!visible || is_neg_inf(x)) { x = make_nan(0x7fc00000u); }
        else { tmax = max(tmax, x); tflags |= 1u; }
        s_tile[r * SS + k] = x;
      }
      ${reduce('tmax', (a, b) => `max(${a}, ${b})`)}
      ${reduce('tflags', (a, b) => `${a} | ${b}`, true)}
      let seen = (flags & 1u) != 0u;
      var m_new = m;
      if ((tflags & 1u) != 0u) {
        if (!seen) { m_new = tmax; }
        else if (tmax > m + ${RESCALE_AT.toFixed(1)}) { m_new = tmax; }
      }
      corr = 1.0;
      if (seen && m_new != m) {
        corr = exp(m - m_new);
        atomicOr(&${w.tileFlags}, 1u);
      }
      var psum = 0.0;
      for (var k = part; k < BC; k += TPR) {
        let x = s_tile[r * SS + k];
        var w = make_nan(0x80000000u);
        if (!is_nan_or_pos_inf(x)) { w = exp(x - m_new); }
        p_tile[r * PS + k] = f16(w);
        psum += w;
      }
      ${reduce('psum', (a, b) => `${a} + ${b}`)}
      l = l * corr + psum;
      m = m_new;
      flags |= tflags;
    }
    // V's tile over K's (every read of K ended at the barrier after B).
    for (var e = lid; e < BC * (HV / 8u); e += WG) {
      let key = e / (HV / 8u);
      let cu = e % (HV / 8u);
      let j = u32(j0) + key;
      var x = vec4u(0u);
      if (j < P.S) { x = Vb[(kv_row(b, j) * P.K + kh) * (HV / 8u) + cu]; }
      if (non_finite2(x.x) || non_finite2(x.y) || non_finite2(x.z) || non_finite2(x.w)) { atomicOr(&${w.tileFlags}, 2u); }
      put8(vbase + key * KS + cu * 8u, x);
    }
    workgroupBarrier();
    if (lid == 0u) { ${w.tileFlagsRead} = atomicLoad(&${w.tileFlags}); }
    let tflags = workgroupUniformLoad(&${w.tileFlagsRead});
    ${traced(copy('p', 'p_tile', 'PS'))}
    // Rescale the accumulator rows whose reference max moved (corr is 1 for the others).
    if ((tflags & 1u) != 0u) {
      ${range(OB)
        .map(
          (c) => `${toScratch(c)}
      for (var x = 0u; x < COLS; x++) { ${scratch(c, 'x')} *= corr; }
      ${fromScratch(c)}`,
        )
        .join('\n      ')}
    }
    // D. O += P·V, on the matrices; as scalar code where V's tile has an Inf or NaN.
    ${m.fence ? `let fv = workgroupUniformLoad(&${w.fenceZero});` : 'let fv = 0u;'}
    if ((tflags & 2u) == 0u) {
      ${
        m.oTile
          ? range(OB)
              .map(
                (c) => `{
        var o = subgroupMatrixLoad<${result}>(&o_tile, sg * ${m.M}u * OS + ${c * m.N}u + fv, ${ROW}, OS);
        for (var kb = 0u; kb < BC / ${m.K}u; kb++) {
          let p = subgroupMatrixLoad<${left}>(&p_tile, sg * ${m.M}u * PS + kb * ${m.K}u + fv, ${ROW}, PS);
          o = subgroupMatrixMultiplyAccumulate(p, subgroupMatrixLoad<${right}>(&kv_tile, vbase + kb * ${m.K}u * KS + ${c * m.N}u + fv, ${ROW}, KS), o);
        }
        subgroupMatrixStore(&o_tile, sg * ${m.M}u * OS + ${c * m.N}u, o, ${ROW}, OS);
      }`,
              )
              .join('\n      ')
          : `for (var kb = 0u; kb < BC / ${m.K}u; kb++) {
        let p = subgroupMatrixLoad<${left}>(&p_tile, sg * ${m.M}u * PS + kb * ${m.K}u + fv, ${ROW}, PS);
        ${range(OB)
          .map(
            (c) =>
              `o${c} = subgroupMatrixMultiplyAccumulate(p, subgroupMatrixLoad<${right}>(&kv_tile, vbase + kb * ${m.K}u * KS + ${c * m.N}u + fv, ${ROW}, KS), o${c});`,
          )
          .join('\n        ')}
      }`
      }
    } else {
      ${range(OB)
        .map(
          (c) => `${toScratch(c)}
      for (var key = 0u; key < BC; key++) {
        let w = f32(p_tile[r * PS + key]);
        // A key the row does not see is −0 and adds nothing, not 0·NaN.
        if (bitcast<u32>(w) != 0x80000000u) {
          for (var x = 0u; x < COLS; x++) {
            ${scratch(c, 'x')} += w * f32(kv_tile[vbase + key * KS + ${c * m.N}u + col0 + x]);
          }
        }
      }
      ${fromScratch(c)}`,
        )
        .join('\n      ')}
    }
    ${
      trace
        ? `if (wg.x == 0u && j0 == j_first) {
      ${range(OB)
        .map(
          (c) => `${toScratch(c)}
      for (var x = 0u; x < COLS; x++) { TRACE[${layout.acc.offset}u + r * HV + ${c * m.N}u + col0 + x] = ${scratch(c, 'x')}; }`,
        )
        .join('\n      ')}
    }`
        : ''
    }
    workgroupBarrier();
    if (lid == 0u) { atomicStore(&${w.tileFlags}, 0u); }
    j0 += i32(BC);
  }

  // The epilogue: each block through this subgroup's scratch rows, row r's COLS columns divided by l.
  let i = i0 + r;
  let writes = i < P.T${v.packedQuery ? ' && i32(i) < t_len' : ''};
  var inv = 0.0;
  var lse_value = make_nan(0xff800000u);
  var nan_row = false;
  if ((flags & 2u) != 0u) {
    nan_row = true;
    inv = make_nan(0x7fc00000u);
    lse_value = inv;
  } else if ((flags & 1u) != 0u && l > 0.0) {
    inv = 1.0 / l;
    lse_value = m + log(l);
  }
  let out0 = (q_row(b, min(i, P.T - 1u)) * P.N + n) * HV;
  ${range(OB)
    .map(
      (c) => `${toScratch(c)}
  if (writes) {
    for (var x = 0u; x < COLS; x += 2u) {
      var y = vec2f(${scratch(c, 'x')}, ${scratch(c, 'x + 1u')}) * inv;
      if (nan_row) { y = vec2f(inv); }
      O[(out0 + ${c * m.N}u + col0 + x) >> 1u] = pack_f16(y);
    }
  }
  workgroupBarrier();`,
    )
    .join('\n  ')}
  ${v.lse ? 'if (writes && part == 0u) { LSE[q_row(b, i) * P.N + n] = lse_value; }' : ''}
}
`;
}
