/** The module's FP8 quantisation: the host arithmetic lives with the CPU FP8 emulation. */
export {
  absMax,
  dequantiseTensor,
  dequantiseValues,
  type Quantised,
  quantiseTensor,
  quantiseValues,
} from '../backends/cpu/fp8-quantise.js';
