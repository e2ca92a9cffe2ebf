// The Hopper forward's configuration: one variant's named knobs (V, a struct of static constexpr
// fields) and what follows from them (HopperConfig<V>: rows per block, registers per role, bytes per
// tile). The host's variant table (src/backends/cuda/flash/sm90/hopper-variant.ts) is the one source of
// both: hopperDefines() gives NVRTC the fields as HOPPER_* macros (hopper_fwd.cu turns them back into
// a V), and hopperConfigSource() writes the library's variants as V structs into gen/fwd_variants.cuh,
// each with the shared-memory size the host computed, checked here at compile time.
//
// V's fields:
//   key_dim, value_dim  Q/K and V/O head dims, whole 64-column TMA boxes (64, 128, 192, 256)
//   block_n, stages     keys per K/V tile, K/V tiles in the ring
//   consumers           consumer warpgroups of 64 query rows (1: 64 rows, two blocks an SM; 2: 128; 3: 192)
//   fp16                fp16 operands (else bf16)
//   bias, mask          the bias element code (0 none; flash/params.cuh), a boolean mask
//   pingpong            the consumers issue their GEMMs in turn (FlashAttention-3)
//   late_wait           the P·V wait after the softmax, in its own basic block
//   desc_step           wgmma descriptors stepped by adds in uniform registers
//   dynamic_grid        one block per SM, items handed out by a global counter (fwd_scheduler.cuh)
//   rescale_slack       FlashAttention-4's conditional rescale, in powers of 2 (0: off)
#pragma once
#include "common/modifiers.cuh"
#include "flash/params.cuh"

template <class V>
struct HopperConfig {
  static constexpr int D = V::key_dim, DV = V::value_dim, BN = V::block_n, STAGES = V::stages;
  static constexpr bool FP16 = V::fp16;
  static constexpr int BIAS = V::bias;
  static constexpr bool MASK = V::mask;
  static constexpr int CONSUMERS = V::consumers, BM = 64 * CONSUMERS;
  static constexpr int THREADS = 128 * (CONSUMERS + 1);
  // Registers per thread after setmaxnreg: the producer keeps 24, the consumers share the rest of
  // the 64K-register file (2: 24 + 2·240 = 504 of 512 per thread slot; 3: 24 + 3·160 = 504).
  // The dynamic grid's producer keeps 32: with 24, every variant with its atomicAdd spilled 8–68
  // bytes (ptxas, sm_90a; a volatile load in its place spilled nothing), so 2 consumers get 232
  // (the pool: (168 − 32)·128 freed ≥ (232 − 168)·256 asked) and 3 keep 160
  // ((128 − 32)·128 = (160 − 128)·384 exactly; FlashAttention-3's 32/160 split): 0 spills on every tile.
  // With a block mask the dynamic grid's producer warp also classifies each item's key tiles and
  // holds their words across its q_empty wait (hopper_fwd.cu produce_dynamic_masked). ptxas, sm_90a,
  // D=128: the GPU suite's document mask spilled 120 bytes at 40 producer registers, 52 at 48, 12 at
  // 56 and none at 72 (2 consumers × 216); the library's and(documentMask, causal()), whose capture
  // offsets are 64-bit, 12 bytes at 72/216, 4 at 80/208 and at 88/208, 24 at 88/200, 68 at 120/192.
  // So 80 and 2 × 208 (80 + 416 ≤ 504); D=64 the same; D=256 spills 56 bytes at 80/208 (the host keeps
  // D > 128 with a block mask on the 2-D grid).
  static constexpr bool DYNAMIC = V::dynamic_grid;
  static constexpr bool DYNAMIC_BM = DYNAMIC && ATTNLAB_BLOCK_MASK;
  // Three consumers keep 160 of 128·4 = 512 registers a thread slot: 80 + 3·160 is past it, and
  // setmaxnreg.inc would wait for registers that never come free.
  static_assert(!DYNAMIC_BM || V::consumers == 2, "a block mask on the dynamic grid runs two consumers");
  static constexpr int PRODUCER_REGS = DYNAMIC_BM ? 80 : DYNAMIC ? 32 : 24;
  static constexpr int CONSUMER_REGS =
      CONSUMERS == 1 ? 232 : CONSUMERS == 2 ? (DYNAMIC_BM ? 208 : DYNAMIC ? 232 : 240) : 160;
  // One consumer: two blocks share an SM (MIN_BLOCKS, the kernel's __launch_bounds__), each 256
  // threads at 128 registers, so one block's fixed costs (launch, the block mask's kinds, Q's load, the
  // pipeline's fill, the epilogue) run under the other's tiles, as the consumers' softmax runs under
  // each other's GEMMs with ping-pong. Its producer keeps 24 and gives the consumer
  // (128 − 24)·128 = (232 − 128)·128 registers: 232.
  static constexpr int MIN_BLOCKS = CONSUMERS == 1 ? 2 : 1;
  static constexpr bool PINGPONG = V::pingpong;
  static_assert(!PINGPONG || CONSUMERS > 1, "ping-pong takes two or three consumers");
  static_assert(CONSUMERS > 1 || !DYNAMIC, "one consumer runs the 2-D grid");
  // LATE_WAIT: the wait for P_{j−1}·V_{j−1} sits behind a branch on the loop parity, in its own
  // basic block after the softmax of tile j. In one block ptxas schedules that wait
  // (WARPGROUP.DEPBAR.LE gsb0, 0x0) at the top, before the softmax, so the softmax never overlaps the
  // warpgroup's own P·V (ncu, H=128: 9.8% of all stall samples on it).
  // DESC_STEP: the shared-memory descriptors of a tile are made once and stepped by adding the byte
  // offset >> 4 (the start-address field cannot carry: shared addresses are < 2^18), with the
  // consumer index made warp-uniform, so the turn issues its wgmmas without per-step address math.
  static constexpr bool LATE_WAIT = V::late_wait, DESC_STEP = V::desc_step;
  // SLACK: a row keeps its running max while a tile's max exceeds it by at most SLACK in base 2, so
  // O is rescaled only when some row of the warp moved further (hopper/softmax.cuh).
  static constexpr int SLACK = V::rescale_slack;
  static_assert(CONSUMERS >= 1 && CONSUMERS <= 3, "one to three consumer warpgroups");
  static constexpr int BOXES = D / 64, V_BOXES = DV / 64;  // 64-column TMA boxes per row of Q/K, of V
  static constexpr u32 Q_BYTES = BM * D * 2;
  static constexpr u32 K_BYTES = BN * D * 2, V_BYTES = BN * DV * 2;  // one stage's K tile, V tile
  static constexpr u32 Q_BOX = BM * 128, KV_BOX = BN * 128;  // bytes of one box
  static constexpr int NT = BN / 8, DT = DV / 8;             // accumulator n-tiles of S, of O
  static_assert(D % 64 == 0 && DV % 64 == 0 && D <= 256 && DV <= 256 && BN % 16 == 0 && BN <= 256, "tile shape");
  static_assert(KV_BOX % 1024 == 0, "each box must start on a 1024-byte swizzle atom");
};

// Shared memory of one block: 1024 bytes of slack to align the tiles, the tiles, the barriers
// (q_full, 4 per stage, q_empty) and the dynamic grid's item slot. hopperSharedBytes() in
// hopper-variant.ts is the same sum; gen/fwd_variants.cuh asserts the two agree.
template <class C>
constexpr u32 hopper_smem_bytes() {
  return 1024 + C::Q_BYTES + C::STAGES * (C::K_BYTES + C::V_BYTES) + 8 * (2 + 4 * C::STAGES + (C::DYNAMIC ? 1 : 0));
}
