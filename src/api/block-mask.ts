/**
 * createBlockMask: a mask modifier classified per (batch, head, query block, key block) as empty, partial
 * or full, on the GPU by a generated kernel when the mask's tensors (or `device`) are there, else on the CPU.
 */
import { blockMaskOnDevice } from '../backends/cuda/ops/block-mask.js';
import { UnsupportedError } from '../errors.js';
import { Tensor } from '../tensor/tensor.js';
import {
  type BlockMaskOptions,
  checkBlockMaskRequest,
  classifyOnHost,
  makeBlockMask,
} from '../variants/block-mask.js';
import type { MaskMod } from '../variants/modifiers.js';
import type { BlockMask } from '../variants/types.js';

/** CUDA's grid limit on y and z: query blocks, and Bm·Nm. */
const GRID_YZ = 65535;

/**
 * Evaluates `mask` once per element and stores one byte per block: 0 empty (the kernels skip it),
 * 1 partial (maskMod per element), 2 full (maskMod dropped). A mask that does not read b (h) is stored
 * once for every batch (head). Compute it once and pass it with its maskMod to every call of the same
 * sizes, across layers and steps.
 *
 * @example
 * const docs = and(documentMask(docIds), causal());
 * const blockMask = createBlockMask(docs, { B: 1, N: 8, T: 4096, S: 4096 });
 * attention(q, k, v, { maskMod: docs, blockMask });
 */
export function createBlockMask(mask: MaskMod | string, options: BlockMaskOptions): BlockMask {
  const request = checkBlockMaskRequest(mask, options);
  if (request.device === 'cpu') {
    const { Bm, Nm, T, S, blockQ, blockKV } = request;
    const shape = [Bm, Nm, Math.ceil(T / blockQ), Math.ceil(S / blockKV)];
    return makeBlockMask(request, Tensor.fromRaw(classifyOnHost(request), shape, 'bool'));
  }
  const qBlocks = Math.ceil(request.T / request.blockQ);
  if (qBlocks > GRID_YZ || request.Bm * request.Nm > GRID_YZ) {
    throw new UnsupportedError(
      'createBlockMask (cuda)',
      `at most ${GRID_YZ} query blocks and ${GRID_YZ} (b, h) pairs: got ${qBlocks} and ${request.Bm * request.Nm} (use larger blocks)`,
    );
  }
  return makeBlockMask(request, blockMaskOnDevice(request.compiled, request));
}
