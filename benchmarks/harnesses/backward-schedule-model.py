"""List-scheduling model of the flash backward's dK/dV grid: how much longer than
the ideal the grid runs when the hardware starts blocks in linear order and each SM takes the next block
as it frees. One block per SM (registers); a block's time is its query steps plus a fixed cost (K/V load,
dK/dV store) of about two steps. No GPU needed:

    python3 benchmarks/harnesses/backward-schedule-model.py [B T N SMs]   (default 4 8192 16 132: the headline, H200)

Under a causal mask key block x of a head has (T − 128x)/64 query steps: with the head-major order
(x fastest within a head) the last head's longest block starts when every SM has ~2 heads' work left
and ends alone; taking the heads in pairs key block by key block (bwd_common.cuh key_block_order)
removes that tail. Non-causal blocks are all alike: the loss there is wave quantisation.
"""
import heapq
import sys

B, T, N, SMS = (int(a) for a in (sys.argv[1:5] if len(sys.argv) == 5 else ["4", "8192", "16", "132"]))
BNK, BMQ, FIXED = 128, 64, 2
KEY_BLOCKS, HEADS = T // BNK, B * N


def makespan(order):
    free = [0.0] * SMS
    for work in order:
        heapq.heappush(free, heapq.heappop(free) + work + FIXED)
    return max(free)


def steps(x, causal):
    return (T - BNK * x) // BMQ if causal else T // BMQ


for causal in (False, True):
    ideal = sum(steps(x, causal) + FIXED for x in range(KEY_BLOCKS)) * HEADS / SMS
    head_major = [steps(x, causal) for _ in range(HEADS) for x in range(KEY_BLOCKS)]
    pairs = []
    for h0 in range(0, HEADS, 2):
        for x in range(KEY_BLOCKS):
            pairs += [steps(x, causal)] * min(2, HEADS - h0)
    print(f"causal={causal}: head-major {makespan(head_major) / ideal:.4f}x ideal, "
          f"pairs of heads {makespan(pairs) / ideal:.4f}x ideal")
