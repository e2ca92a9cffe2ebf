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
 * use_vulkan_memory_model, disable_robustness, disable_workgroup_init, dump_shaders); `--layouts
 * 0,5` runs only those (indices into SGMAT_LAYOUTS; `aligned`: those with alignedTiles).
 * Run: node --import tsx benchmarks/harnesses/webgpu-sgmat-trace.ts [--toggles …] [--raw dir]
 */
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import {
  checkInputs,
  checkOutputError,
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
import {
  bestShift,
  compareSection,
  explainScoreBlock,
  TRACE_BOUND,
} from '../../src/backends/webgpu/sgmat-trace.js';
import { openSgmatDevice } from './webgpu-sgmat-device.js';

const args = process.argv.slice(2);
const option = (name: string) => (args.includes(name) ? args[args.indexOf(name) + 1] : undefined);
const toggles = option('--toggles');
const rawDir = option('--raw');
// Indices into SGMAT_LAYOUTS, or `aligned`: the layouts with alignedTiles.
const only = option('--layouts')
  ?.split(',')
  .flatMap((x) =>
    x === 'aligned' ? SGMAT_LAYOUTS.flatMap((l, i) => (l.alignedTiles ? [i] : [])) : [Number(x)],
  );
const row = (fields: Record<string, unknown>) => process.stdout.write(`${JSON.stringify(fields)}\n`);

const { device, shape } = await openSgmatDevice(toggles, row);
const { M, N, K, sg: SG } = shape;
const storage = device.limits.maxComputeWorkgroupStorageSize;
const layouts = SGMAT_LAYOUTS.map((layout, index) => ({ layout, index })).filter(
  ({ index }) => !only || only.includes(index),
);
if (rawDir) mkdirSync(rawDir, { recursive: true });
for (const { layout, index } of layouts) {
  const shape = { M, N, K, sg: SG, ...layout };
  const name = layoutName(layout);
  const failure = await checkSgmat(device, shape, storage);
  // 32-key tiles where 64 pass (H=128 takes 64 on NVIDIA's 48 KiB; a pass should hold for both).
  const failure32 = failure === null ? await checkSgmat(device, { ...shape, keys: 32 }, storage) : 'not run';
  const ran = await runSgmatCheck(device, shape, storage, true);
  if (typeof ran === 'string') {
    row({ layout: index, name, failure, failure32, traced: ran });
    continue;
  }
  const want = traceExpectation(ran.variant);
  const sections = sgmatTraceLayout(ran.variant);
  const trace = ran.trace as Float64Array;
  const { q, k } = checkInputs();
  const result: Record<string, unknown> = {};
  let firstWrong: string | null = null;
  for (const section of TRACE_SECTIONS) {
    const { offset, length, cols } = sections[section];
    if (length === 0) {
      result[section] = 'not traced at this shape';
      continue;
    }
    const got = trace.slice(offset, offset + length);
    const c = compareSection(got, want[section], cols, TRACE_BOUND[section], { M, N });
    if (c.wrong && !firstWrong) firstWrong = section;
    const fits =
      (section === 'sDirect' || section === 'sTile') && c.wrong
        ? c.badBlocks.slice(0, 8).map((b) => {
            const [rb, cb] = b.split(',').map(Number);
            return explainScoreBlock(got, cols, rb, cb, { q, k, H: 64, M, N, K });
          })
        : undefined;
    // K's right matrices against q's rows: loads issued before A's stores landed read q, staged there.
    const againstQ =
      section === 'kMat' && c.wrong
        ? compareSection(got, q.slice(0, length), cols, 0, { M, N }).maxError
        : undefined;
    // K's matrices against K's tile as scalar loads read it, the score tile against the scores the
    // products left: a load or store that addresses its tile a few elements off shows as a shift.
    const against: Partial<Record<TraceSection, TraceSection>> = { kMat: 'kTile', sTile: 'sDirect' };
    const refSection = against[section];
    const shift =
      refSection && c.wrong && sections[refSection].length === length
        ? bestShift(got, trace.slice(sections[refSection].offset, sections[refSection].offset + length), cols)
        : undefined;
    result[section] = {
      ...c,
      ...(fits ? { fits } : {}),
      ...(againstQ !== undefined ? { againstQ } : {}),
      ...(shift ? { shift } : {}),
    };
  }
  // The traced build's own output error (a trace that hides the fault shows here as a pass).
  const tracedOutputError = checkOutputError(ran.got);
  row({ layout: index, name, failure, failure32, firstWrong, tracedOutputError, ...result });
  if (rawDir) {
    writeFileSync(
      join(rawDir, `trace-${index}.json`),
      JSON.stringify({ layout, name, sections, trace: Array.from(trace), output: Array.from(ran.got) }),
    );
  }
}
process.exit(0);
