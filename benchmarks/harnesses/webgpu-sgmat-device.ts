/**
 * The device the subgroup-matrix harnesses (webgpu-sgmat-trace.ts, webgpu-sgmat-isolate.ts) open: Dawn's
 * experimental toggles and any others asked for, shader-f16, subgroups and subgroup matrices where the adapter
 * has them, its largest workgroup storage. Opened here rather than by initWebgpu, whose own check would run
 * every layout of the sgmat kernel first. Prints the adapter's line, then returns the device and the f16 → f32
 * matrix shape, or prints why not and ends the process (status 0: no adapter is not a failure of the harness).
 */
import { EXPERIMENTAL_DAWN_TOGGLES } from '../../src/backends/webgpu/runtime.js';

export interface SgmatDevice {
  device: GPUDevice;
  /** The offered f16 × f16 → f32 subgroup-matrix shape and the subgroup size. */
  shape: { M: number; N: number; K: number; sg: number };
}

export async function openSgmatDevice(
  toggles: string | undefined,
  row: (fields: Record<string, unknown>) => void,
): Promise<SgmatDevice> {
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
    subgroupMinSize?: number;
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
    subgroupSizes: { min: raw.subgroupMinSize ?? 0, max: raw.subgroupMaxSize ?? 0 },
  });
  if (!offered || !features.includes('shader-f16' as GPUFeatureName)) {
    row({ skipped: 'no f16 subgroup-matrix configuration (an NVIDIA GPU with cooperative matrices)' });
    process.exit(0);
  }
  return { device, shape: { M: offered.M, N: offered.N, K: offered.K, sg: raw.subgroupMaxSize ?? 32 } };
}
