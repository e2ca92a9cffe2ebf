/**
 * The sgmat kernel's first wrong value taken apart on this adapter: each case of ISOLATE_CASES
 * (src/backends/webgpu/sgmat-isolate.ts) is one of the kernel's K loads (or its score product) with
 * one thing changed, in a one-workgroup kernel of 2 subgroups on the device check's K tile (64 keys
 * × 64 dims, f16-exact). One JSON line a case: what it changes, maxError, wrong/of, the first wrong
 * value (subgroup, key, dim, got, want), and the wrong blocks by the element shift that explains
 * them ("4": every value read 4 f16 before its address; "k4 q0": the scores of K read 4 early).
 * Then the device check of each alignedTiles layout (SGMAT_LAYOUTS), with 64- and 32-key tiles.
 *
 * `--toggles a,b` adds Dawn toggles to the experimental ones (e.g. disable_robustness, which
 * drops the bounds clamps that make a load's stride a run-time value); `--cases a,b` runs only
 * those cases (no layouts); `--layouts-only` the layouts alone; `--list` prints the case names, one
 * a line, without opening a device. On an H100 the process once died (SIGSEGV inside Dawn) at its
 * second case, so scripts/webgpu-gpu.sh runs each case in a process of its own.
 * Run: node --import tsx benchmarks/harnesses/webgpu-sgmat-isolate.ts [--toggles …] [--cases …]
 */
import { checkSgmat, layoutName, SGMAT_LAYOUTS } from '../../src/backends/webgpu/sgmat-check.js';
import { ISOLATE_CASES, runIsolate } from '../../src/backends/webgpu/sgmat-isolate.js';
import { openSgmatDevice } from './webgpu-sgmat-device.js';

const args = process.argv.slice(2);
const option = (name: string) => (args.includes(name) ? args[args.indexOf(name) + 1] : undefined);
const toggles = option('--toggles');
const layoutsOnly = args.includes('--layouts-only');
const only = layoutsOnly ? [] : option('--cases')?.split(',');
const row = (fields: Record<string, unknown>) => process.stdout.write(`${JSON.stringify(fields)}\n`);
if (args.includes('--list')) {
  for (const c of ISOLATE_CASES) process.stdout.write(`${c.name}\n`);
  process.exit(0);
}

const { device, shape } = await openSgmatDevice(toggles, row);
for (const c of ISOLATE_CASES.filter((c) => !only || only.includes(c.name))) {
  const result = await runIsolate(device, c, shape);
  row(typeof result === 'string' ? { case: c.name, changes: c.changes, error: result } : { ...result });
}
const storage = device.limits.maxComputeWorkgroupStorageSize;
for (const [index, layout] of SGMAT_LAYOUTS.entries()) {
  if (!layout.alignedTiles || (only && !layoutsOnly)) continue;
  const failure = await checkSgmat(device, { ...shape, ...layout }, storage);
  const failure32 = await checkSgmat(device, { ...shape, ...layout, keys: 32 }, storage);
  row({ layout: index, name: layoutName(layout), failure, failure32 });
}
process.exit(0);
