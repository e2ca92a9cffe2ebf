// The generated modifier functions evaluated at a list of points, one thread each: the GPU side of the
// check that the CUDA generator and the CPU evaluator of src/variants/ compute the same thing
// (test/gpu/variants/codegen.test.ts). The modifier source is put before this file.

#ifdef ATTNLAB_NVCC_TEST  // the standalone nvcc compile: a representative generated modifier set
#include "variants/nvcc_test_modifiers.cuh"
#endif

extern "C" __global__ void attnlab_modifier_values(
    const int* __restrict__ points,  // [count][4]: b, h, q, kv
    const float* __restrict__ scores, const float* __restrict__ grads, float* __restrict__ modified,
    float* __restrict__ dscores, float* __restrict__ dfrom_output, unsigned char* __restrict__ kept,
    const AttnlabCaptures captures, int count) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= count) return;
  const int b = points[4 * i], h = points[4 * i + 1], q = points[4 * i + 2], kv = points[4 * i + 3];
  modified[i] = attnlab_score_mod(scores[i], b, h, q, kv, captures);
  dscores[i] = attnlab_score_mod_backward(scores[i], grads[i], b, h, q, kv, captures);
  // The same gradient from the modified score (g where the set has no such form).
  dfrom_output[i] = attnlab_score_mod_backward_from_output(modified[i], grads[i], b, h, q, kv, captures);
  kept[i] = attnlab_mask_mod(b, h, q, kv, captures) ? 1 : 0;
}

// The folded score modifier (ATTNLAB_SCORE_MOD_FOLDED: constant factors of its input and output taken
// out, as the forward's tile pass calls it, flash/mask.cuh) put back together, OUT · folded(s · IN), for
// the same check; without a fold, the modifier itself.
extern "C" __global__ void attnlab_modifier_folded(const int* __restrict__ points, const float* __restrict__ scores,
                                                   float* __restrict__ modified, const AttnlabCaptures captures,
                                                   int count) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= count) return;
  const int b = points[4 * i], h = points[4 * i + 1], q = points[4 * i + 2], kv = points[4 * i + 3];
#if defined(ATTNLAB_SCORE_MOD_FOLDED) && ATTNLAB_SCORE_MOD_FOLDED
  modified[i] = ATTNLAB_SCORE_MOD_OUT_SCALE *
                attnlab_score_mod_folded(scores[i] * ATTNLAB_SCORE_MOD_IN_SCALE, b, h, q, kv, captures);
#else
  modified[i] = attnlab_score_mod(scores[i], b, h, q, kv, captures);
#endif
}
