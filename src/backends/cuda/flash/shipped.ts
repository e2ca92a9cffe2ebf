/**
 * The flash kernels attnlab ships compiled (scripts/prebuild-kernels.ts builds them with nvcc into
 * dist/kernels/<arch>/; compile.ts loads one in place of an NVRTC compile when its key matches): the
 * forward variants of plain attention — no bias, no mask — in bf16 and fp16 at head dims 64, 128 and
 * 256, causal and not, at the lengths where the variant choice changes (the Hopper kernel picks its
 * consumers and persistent grid by T), for every target the package supports. Bias, mask, other head
 * dims and ATTNLAB_FLASH_TILES still compile with NVRTC on first use.
 */
import type { AttentionProblem } from '../../problem.js';
import type { KernelSpec } from '../runtime/compile.js';
import { flashDefines, flashKernelSource, flashVariant } from './sm80/variant.js';
import { HOPPER_KERNEL, hopperDefines, hopperVariant } from './sm90/hopper-variant.js';

/** The targets the package ships binaries for: Ampere (A100 sm_80, A10/RTX 30 sm_86), Ada (L4 sm_89), Hopper. */
export const SHIPPED_ARCHS = ['sm_80', 'sm_86', 'sm_89', 'sm_90a'] as const;

export const SHIPPED_HEAD_DIMS = [64, 128, 256] as const;
const DTYPES = ['bfloat16', 'float16'] as const;
/** T = S lengths that cover the Hopper variant's choices by length (hopper-variant.ts). */
const LENGTHS = [128, 1024, 4096, 8192, 32768] as const;
/**
 * (B, N) pairs: the codelab's B=4 N=8, the benchmarks' N=16 at B=4 and at B·T = 32k; the Hopper
 * kernel picks its persistent grid by the tile count, so B·N is part of the choice.
 */
const BATCH_HEADS = (T: number) => [
  [1, 16],
  [4, 8],
  [4, 16],
  [Math.max(1, 32768 / T), 16],
];

/** A plain forward problem of these sizes: the fields the variant functions read. */
function plainProblem(
  dtype: 'bfloat16' | 'float16',
  H: number,
  T: number,
  causal: boolean,
  B: number,
  N: number,
): AttentionProblem {
  return {
    B,
    T,
    S: T,
    N,
    K: N,
    H,
    Hv: H,
    dtype,
    device: 'cuda',
    causal,
    alignment: 'top_left',
    bias: null,
    mask: null,
    window: null,
    paged: null,
    packed: null,
    querySeqLengths: null,
    keyValueSeqLengths: null,
    implementation: 'flash',
  } as unknown as AttentionProblem;
}

/**
 * The kernel specs shipped for `arch`, each once (the same spec may serve many shapes); `only` keeps those of
 * some head dims or dtypes (a build of part of the set, e.g. one head dim for a first-call measurement).
 */
export function shippedFlashSpecs(
  arch: string,
  only: { readonly headDims?: readonly number[]; readonly dtypes?: readonly string[] } = {},
): KernelSpec[] {
  const specs = new Map<string, KernelSpec>();
  for (const dtype of DTYPES.filter((d) => !only.dtypes || only.dtypes.includes(d)))
    for (const H of SHIPPED_HEAD_DIMS.filter((h) => !only.headDims || only.headDims.includes(h)))
      for (const causal of [false, true])
        for (const T of LENGTHS)
          for (const [B, N] of BATCH_HEADS(T)) {
            const p = plainProblem(dtype, H, T, causal, B, N);
            // The variant the backend takes with neither ATTNLAB_FLASH_KERNEL nor ATTNLAB_FLASH_TILES set.
            const hopper = hopperVariant(p, arch, null, null);
            const spec: KernelSpec =
              'variant' in hopper
                ? {
                    file: HOPPER_KERNEL.file,
                    kernels: [HOPPER_KERNEL.name],
                    defines: hopperDefines(hopper.variant),
                  }
                : (() => {
                    const v = flashVariant(p, arch);
                    const { file, name } = flashKernelSource(v);
                    return { file, kernels: [name], defines: flashDefines(v) };
                  })();
            specs.set(JSON.stringify(spec), spec);
          }
  return [...specs.values()];
}
