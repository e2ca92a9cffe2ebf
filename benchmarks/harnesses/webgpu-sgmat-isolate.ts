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
 * those cases.
 * Run: node --import tsx benchmarks/harnesses/webgpu-sgmat-isolate.ts [--toggles …] [--cases …]
 */
import { EXPERIMENTAL_DAWN_TOGGLES } from '../../src/backends/webgpu/runtime.js';
import { checkSgmat, layoutName, SGMAT_LAYOUTS } from '../../src/backends/webgpu/sgmat-check.js';
import { ISOLATE_CASES, runIsolate } from '../../src/backends/webgpu/sgmat-isolate.js';

const args = process.argv.slice(2);
const option = (name: string) => (args.includes(name) ? args[args.indexOf(name) + 1] : undefined);
const toggles = option('--toggles');
const only = option('--cases')?.split(',');
const row = (fields: Record<string, unknown>) => process.stdout.write(`${JSON.stringify(fields)}\n`);

// The device opened here, as webgpu-sgmat-trace.ts does, not by initWebgpu (whose own check would
// run every layout first).
const dawn = (await import('webgpu')) as { create(options: string[]): GPU };
const gpu = dawn.create([`${EXPERIMENTAL_DAWN_TOGGLES}${toggles ? `,${toggles}` : ''}`]);
const adapter = await gpu.requestAdapter();
if (!adapter) {
  row({ skipped: 'no WebGPU adapter' });
  process.exit(0);
}
const features = ['shader-f16', 'subgroups', 'chromium-experimental-subgroup-matrix'].filter((f) =>
  adapter.features.has(f),
) as GPUFeatureName[];
const device = await adapter.requestDevice({
  requiredFeatures: features,
  requiredLimits: {
    maxComputeWorkgroupStorageSize: adapter.limits.maxComputeWorkgroupStorageSize,
    maxComputeInvocationsPerWorkgroup: adapter.limits.maxComputeInvocationsPerWorkgroup,
  },
});
const raw = adapter.info as GPUAdapterInfo & {
  subgroupMatrixConfigs?: readonly Record<string, unknown>[];
  subgroupMaxSize?: number;
};
const offered = (raw.subgroupMatrixConfigs ?? []).find(
  (c) => c.componentType === 'f16' && c.resultComponentType === 'f32',
) as { M: number; N: number; K: number } | undefined;
row({
  adapter: raw.description || raw.vendor,
  toggles: toggles ?? null,
  features,
  offered: offered ? { M: offered.M, N: offered.N, K: offered.K } : null,
  subgroupMaxSize: raw.subgroupMaxSize ?? 0,
});
if (!offered || !features.includes('shader-f16' as GPUFeatureName)) {
  row({ skipped: 'no f16 subgroup-matrix configuration (an NVIDIA GPU with cooperative matrices)' });
  process.exit(0);
}
const shape = { M: offered.M, N: offered.N, K: offered.K, sg: raw.subgroupMaxSize ?? 32 };
for (const c of ISOLATE_CASES.filter((c) => !only || only.includes(c.name))) {
  const result = await runIsolate(device, c, shape);
  row(typeof result === 'string' ? { case: c.name, changes: c.changes, error: result } : { ...result });
}
const storage = device.limits.maxComputeWorkgroupStorageSize;
for (const [index, layout] of SGMAT_LAYOUTS.entries()) {
  if (!layout.alignedTiles || only) continue;
  const failure = await checkSgmat(device, { ...shape, ...layout }, storage);
  const failure32 = await checkSgmat(device, { ...shape, ...layout, keys: 32 }, storage);
  row({ layout: index, name: layoutName(layout), failure, failure32 });
}
process.exit(0);
