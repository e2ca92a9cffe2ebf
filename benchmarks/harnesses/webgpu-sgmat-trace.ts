/**
 * The sgmat forward kernel traced on this adapter: each layout of SGMAT_LAYOUTS (sgmat-check.ts)
 * runs on the device check's problem (B=1, T=S=80, N=K=1, H=64, f16) once as the check runs it and
 * once built with its trace (sgmat-source.ts: what workgroup 0 holds at each phase of its first key
 * tile), and each trace section is compared with what it should hold, so one run names the first
 * wrong value: the invocation ids (subgroup of an invocation, its lane, the subgroup size), q as
 * the left matrices hold it, K's tile as scalar loads read it, K's right matrices as the product
 * loads them, the scores as the products leave them (stored straight to the trace, then as the
 * score tile holds them), the weights, the accumulator. A wrong 16×16 score block is fitted (least
 * squares) by the partial products it could hold — q block h of its rows times K's (or q's) rows
 * of any key block, and their transposes — so a block that holds a sum of the wrong products, or
 * stale rows, says which.
 *
 * One JSON line a layout (and the adapter's line first); `--raw <dir>` writes each layout's trace
 * and output as JSON beside; `--toggles a,b` adds Dawn toggles to the experimental ones (e.g.
 * disable_robustness, disable_workgroup_init, dump_shaders); `--layouts 0,5` runs only those.
 * Run: node --import tsx benchmarks/harnesses/webgpu-sgmat-trace.ts [--toggles …] [--raw dir]
 */
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { EXPERIMENTAL_DAWN_TOGGLES, initWebgpu, webgpuContext } from '../../src/backends/webgpu/runtime.js';
import {
  checkInputs,
  checkSgmat,
  layoutName,
  runSgmatCheck,
  SGMAT_LAYOUTS,
  traceExpectation,
} from '../../src/backends/webgpu/sgmat-check.js';
import {
  sgmatTraceLayout,
  TRACE_SECTIONS,
  type TraceSection,
} from '../../src/backends/webgpu/sgmat-source.js';

const args = process.argv.slice(2);
const option = (name: string) => (args.includes(name) ? args[args.indexOf(name) + 1] : undefined);
const toggles = option('--toggles');
const rawDir = option('--raw');
const only = option('--layouts')?.split(',').map(Number);
const row = (fields: Record<string, unknown>) => process.stdout.write(`${JSON.stringify(fields)}\n`);

const dawn = (await import('webgpu')) as { create(options: string[]): GPU };
const gpu = dawn.create([`${EXPERIMENTAL_DAWN_TOGGLES}${toggles ? `,${toggles}` : ''}`]);
const started = performance.now();
const info = await initWebgpu({ gpu });
const { device, adapter } = webgpuContext();
const offered = (
  (adapter.info as { subgroupMatrixConfigs?: readonly Record<string, unknown>[] }).subgroupMatrixConfigs ?? []
).find((c) => c.componentType === 'f16' && c.resultComponentType === 'f32') as
  | { M: number; N: number; K: number }
  | undefined;
row({
  adapter: info.description || info.vendor,
  toggles: toggles ?? null,
  subgroupMatrix: info.subgroupMatrix,
  subgroupMatrixRejected: info.subgroupMatrixRejected ?? null,
  deviceOpenMs: Math.round(performance.now() - started),
  offered: offered ? { M: offered.M, N: offered.N, K: offered.K } : null,
  subgroupSizes: info.subgroupSizes,
});
if (!offered || !info.features.includes('shader-f16')) {
  row({ skipped: 'no f16 subgroup-matrix configuration (an NVIDIA GPU with cooperative matrices)' });
  process.exit(0);
}
const { M, N, K } = offered;
const SG = info.subgroupSizes.max;
const storage = info.limits.maxComputeWorkgroupStorageSize;
/** Per section, the difference below which a value counts as right (f16 weights, f32 sums). */
const BOUND: Record<TraceSection, number> = {
  ids: 0,
  q: 0,
  kTile: 0,
  kMat: 0,
  sDirect: 0,
  sTile: 0,
  p: 2e-3,
  acc: 2e-2,
};

/** Solves the least-squares fit of y by the columns of X (rows × cols, row-major), by normal equations. */
function leastSquares(X: Float64Array, y: Float64Array, cols: number): Float64Array {
  const rows = y.length;
  const A = new Float64Array(cols * (cols + 1));
  for (let i = 0; i < cols; i++) {
    for (let j = 0; j < cols; j++) {
      let s = 0;
      for (let r = 0; r < rows; r++) s += X[r * cols + i] * X[r * cols + j];
      A[i * (cols + 1) + j] = s;
    }
    let s = 0;
    for (let r = 0; r < rows; r++) s += X[r * cols + i] * y[r];
    A[i * (cols + 1) + cols] = s;
  }
  const w = cols + 1;
  for (let c = 0; c < cols; c++) {
    let pivot = c;
    for (let r = c + 1; r < cols; r++) if (Math.abs(A[r * w + c]) > Math.abs(A[pivot * w + c])) pivot = r;
    for (let j = 0; j < w; j++) [A[c * w + j], A[pivot * w + j]] = [A[pivot * w + j], A[c * w + j]];
    const d = A[c * w + c];
    if (Math.abs(d) < 1e-12) continue;
    for (let r = 0; r < cols; r++) {
      if (r === c) continue;
      const f = A[r * w + c] / d;
      if (f !== 0) for (let j = c; j < w; j++) A[r * w + j] -= f * A[c * w + j];
    }
  }
  return Float64Array.from({ length: cols }, (_, c) =>
    Math.abs(A[c * w + c]) < 1e-12 ? 0 : A[c * w + cols] / A[c * w + c],
  );
}

/**
 * What a wrong M×N score block (rb, cb) holds, as a sum of candidate partial products: for every key
 * block c and head block h, q(rb, h)·k(c, h)ᵀ ("qk c h"), q(rb, h)·q(c, h)ᵀ ("qq c h": q's rows where
 * K's should be, as the staging through K's tile leaves them) and the transpose of q(c, h)·k(rb, h)ᵀ
 * ("kqT c h"); the terms with a coefficient off zero and the fit's residual.
 */
function explainBlock(got: Float64Array, cols: number, rb: number, cb: number, bc: number) {
  const { q, k } = checkInputs();
  const H = 64;
  const kinds = ['qk', 'qq', 'kqT'] as const;
  const blocks = bc / N;
  const names: string[] = [];
  const X = new Float64Array(M * N * kinds.length * blocks * (H / K));
  const width = kinds.length * blocks * (H / K);
  let col = 0;
  for (const kind of kinds)
    for (let c = 0; c < blocks; c++)
      for (let h = 0; h < H / K; h++, col++) {
        names.push(`${kind} ${c} ${h}`);
        for (let i = 0; i < M; i++)
          for (let j = 0; j < N; j++) {
            let x = 0;
            for (let d = h * K; d < (h + 1) * K; d++) {
              if (kind === 'qk') x += q[(rb * M + i) * H + d] * k[(c * N + j) * H + d];
              else if (kind === 'qq') x += q[(rb * M + i) * H + d] * q[(c * N + j) * H + d];
              else x += q[(c * M + j) * H + d] * k[(rb * N + i) * H + d];
            }
            X[(i * N + j) * width + col] = x;
          }
      }
  const y = new Float64Array(M * N);
  for (let i = 0; i < M; i++)
    for (let j = 0; j < N; j++) y[i * N + j] = got[(rb * M + i) * cols + cb * N + j];
  const beta = leastSquares(X, y, width);
  let residual = 0;
  let norm = 0;
  for (let e = 0; e < y.length; e++) {
    let fit = 0;
    for (let c = 0; c < width; c++) fit += X[e * width + c] * beta[c];
    residual += (y[e] - fit) ** 2;
    norm += y[e] ** 2;
  }
  const terms = names
    .map((name, c) => [name, Math.round(beta[c] * 1000) / 1000] as const)
    .filter(([, b]) => Math.abs(b) > 0.02);
  return {
    block: `${rb},${cb}`,
    terms: Object.fromEntries(terms),
    residualRel: norm > 0 ? Number(Math.sqrt(residual / norm).toPrecision(3)) : 0,
    zeros: y.filter((x) => x === 0).length,
  };
}

/** A section against what it should hold: the worst error, the count wrong, the first wrong value. */
function compare(name: TraceSection, got: Float64Array, want: Float64Array, cols: number) {
  let worst = 0;
  let wrong = 0;
  let first: Record<string, number> | null = null;
  const blocks = new Set<string>();
  for (let e = 0; e < want.length; e++) {
    const d = Math.abs(got[e] - want[e]);
    if (!(d <= worst)) worst = d;
    if (!(d <= BOUND[name])) {
      wrong++;
      blocks.add(`${Math.floor(e / cols / M)},${Math.floor((e % cols) / N)}`);
      if (!first) first = { index: e, row: Math.floor(e / cols), col: e % cols, got: got[e], want: want[e] };
    }
  }
  return { maxError: worst, wrong, of: want.length, first, badBlocks: [...blocks].slice(0, 32) };
}

const layouts = SGMAT_LAYOUTS.map((layout, index) => ({ layout, index })).filter(
  ({ index }) => !only || only.includes(index),
);
if (rawDir) mkdirSync(rawDir, { recursive: true });
for (const { layout, index } of layouts) {
  const shape = { M, N, K, sg: SG, ...layout };
  const name = layoutName(layout);
  const failure = await checkSgmat(device, shape, storage);
  const failure32 = await checkSgmat(device, { ...shape, keys: 32 }, storage);
  const ran = await runSgmatCheck(device, shape, storage, true);
  if (typeof ran === 'string') {
    row({ layout: index, name, failure, failure32, traced: ran });
    continue;
  }
  const want = traceExpectation(ran.variant);
  const sections = sgmatTraceLayout(ran.variant);
  const trace = ran.trace as Float64Array;
  const result: Record<string, unknown> = {};
  let firstWrong: string | null = null;
  for (const section of TRACE_SECTIONS) {
    const { offset, length, cols } = sections[section];
    if (length === 0) {
      result[section] = 'not traced at this shape';
      continue;
    }
    const got = trace.slice(offset, offset + length);
    const c = compare(section, got, want[section], cols);
    if (c.wrong && !firstWrong) firstWrong = section;
    const fits =
      (section === 'sDirect' || section === 'sTile') && c.wrong
        ? c.badBlocks.slice(0, 6).map((b) => {
            const [rb, cb] = b.split(',').map(Number);
            return explainBlock(got, cols, rb, cb, ran.variant.bc);
          })
        : undefined;
    // K's right matrices against q's rows: K's tile loaded before A's stores landed holds q (staged there).
    const againstQ =
      section === 'kMat' && c.wrong
        ? compare(section, got, checkInputs().q.slice(0, length), cols).maxError
        : undefined;
    result[section] = { ...c, ...(fits ? { fits } : {}), ...(againstQ !== undefined ? { againstQ } : {}) };
  }
  // The traced build's own output error (a trace that hides the fault says so here).
  const { q, k, v, scale } = checkInputs();
  let tracedOutputError = 0;
  {
    const T = 80;
    const H = 64;
    for (let i = 0; i < T; i++) {
      const s = new Float64Array(T);
      let max = -Infinity;
      for (let j = 0; j < T; j++) {
        let x = 0;
        for (let d = 0; d < H; d++) x += q[i * H + d] * k[j * H + d];
        s[j] = x * scale;
        max = Math.max(max, s[j]);
      }
      let sum = 0;
      for (let j = 0; j < T; j++) sum += s[j] = Math.exp(s[j] - max);
      for (let d = 0; d < H; d++) {
        let o = 0;
        for (let j = 0; j < T; j++) o += (s[j] / sum) * v[j * H + d];
        tracedOutputError = Math.max(tracedOutputError, Math.abs(ran.got[i * H + d] - o));
      }
    }
  }
  row({ layout: index, name, failure, failure32, firstWrong, tracedOutputError, ...result });
  if (rawDir) {
    writeFileSync(
      join(rawDir, `trace-${index}.json`),
      JSON.stringify({ layout, name, sections, trace: Array.from(trace), output: Array.from(ran.got) }),
    );
  }
}
process.exit(0);
