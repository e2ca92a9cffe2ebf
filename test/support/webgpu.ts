/**
 * The WebGPU device for tests: initWebgpu() once, or the reason the webgpu tests skip.
 *
 * Where no Vulkan ICD is named and the machine has no NVIDIA device, the SwiftShader ICD that
 * Debian's chromium package ships is used (CI installs chromium and libvulkan1): Debian 12's own
 * Mesa 22.3 lavapipe is refused by Dawn ("Vulkan shaderUniform*ArrayDynamicIndexing required").
 * ATTNLAB_WEBGPU_EXPERIMENTAL=1 opens it with Dawn's experimental features (the subgroup-matrix kernel).
 */
import { existsSync } from 'node:fs';
import { initWebgpu } from '../../src/backends/webgpu/runtime.js';
import { config } from '../../src/config.js';

const SWIFTSHADER_ICD = '/usr/lib/chromium/vk_swiftshader_icd.json';

let ready: Promise<string | null> | null = null;

/** Null when a WebGPU device is ready, else why the webgpu tests skip. */
export function webgpuSkipReason(): Promise<string | null> {
  if (!ready) {
    if (!process.env.VK_ICD_FILENAMES && !existsSync('/dev/nvidia0') && existsSync(SWIFTSHADER_ICD)) {
      process.env.VK_ICD_FILENAMES = SWIFTSHADER_ICD;
    }
    ready = initWebgpu({ experimental: config().webgpuExperimental }).then(
      (info) => {
        console.log(
          `# webgpu: ${info.description || info.vendor} (${info.backend}); features ${info.features.join(' ')}; ` +
            `subgroup sizes ${info.subgroupSizes.min}–${info.subgroupSizes.max}; subgroup matrix ` +
            `${info.subgroupMatrix ? `f16 ${info.subgroupMatrix.M}×${info.subgroupMatrix.N}×${info.subgroupMatrix.K}, layout ${JSON.stringify(info.subgroupMatrix)}` : 'none'}` +
            `${info.subgroupMatrixRejected ? ` (rejected: ${info.subgroupMatrixRejected})` : ''}`,
        );
        return null;
      },
      (error) => `no WebGPU device: ${error instanceof Error ? error.message : String(error)}`,
    );
  }
  return ready;
}
