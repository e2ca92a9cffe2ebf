// Appends new key and value rows to a paged KV cache (vLLM's reshape_and_cache): row i of the new
// keys (B·Tnew rows of K·H 16-bit elements, token-major) goes to pool slot slots[i], where the host
// computed slot = table[b][pos / blockSize]·blockSize + pos % blockSize for the row's position.
// One launch for K and V (blockIdx.y = 0 / 1), 16 bytes per thread per step: a decode step's append
// is a few hundred kilobytes and should cost one launch, not B·2 memcpy calls.
#include "flash/params.cuh"

struct AppendParams {
  const u16* src[2];   // new K rows, new V rows
  u16* pool[2];        // K pool, V pool: (numBlocks·blockSize) slots of row[0] / row[1] elements
  const int* slots;    // int32[rows]
  i64 row[2];          // elements per row: K·H and K·Hv (multiples of 8)
  int rows;
};

extern "C" __global__ void __launch_bounds__(256) attnlab_kv_append(const __grid_constant__ AppendParams p) {
  const int which = blockIdx.y;
  const i64 chunks = p.row[which] / 8;
  const i64 total = (i64)p.rows * chunks;
  for (i64 c = (i64)blockIdx.x * blockDim.x + threadIdx.x; c < total; c += (i64)gridDim.x * blockDim.x) {
    const i64 r = c / chunks, chunk = c % chunks;
    const u128 x = reinterpret_cast<const u128*>(p.src[which] + r * p.row[which])[chunk];
    reinterpret_cast<u128*>(p.pool[which] + (i64)p.slots[r] * p.row[which])[chunk] = x;
  }
}
