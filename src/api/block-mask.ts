/**
 * createBlockMask as the package exports it: src/variants/block-mask.ts's, with the CUDA block-mask kernel
 * loaded (it registers itself as the 'cuda' evaluator), so a mask whose tensors are on the GPU is
 * classified there.
 */
import '../backends/cuda/ops/block-mask.js';

export { type BlockMaskOptions, createBlockMask } from '../variants/block-mask.js';
