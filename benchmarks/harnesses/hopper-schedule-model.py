"""A model of the Hopper forward kernel's block schedules (predictions, no GPU): items are
query blocks of BM rows with t key tiles each (causal: the tiles up to the diagonal, top-left, T=S),
a block runs them one after another on its SM, each tile takes 1 unit and each item a fixed cost on
top (Q load, pipeline fill, O store: `fixed` units exposed on the 2-D grid, `overlapped` units left
when the persistent grid overlaps them with the neighbouring items). L2 is not modelled.

  2-D grid   the hardware hands the next block (head-major, longest query block first within a head)
             to the first SM that frees up
  static     persistent walk: block p runs items p, p + P, ... (same order)
  dynamic    the next item of the sectioned longest-first order to the first free block
             (`partial`: with a partial last section, as GROUPED's order has; the kernel balances them)

Prints, per case, each schedule's time over the 2-D grid's (lower is faster) and its idle share.
    python3 benchmarks/harnesses/hopper-schedule-model.py
"""
import heapq
import math


def items(T, BM, BN, heads, causal):
    q = math.ceil(T / BM)
    tiles = lambda m: math.ceil(min(T, (m + 1) * BM) / BN) if causal else math.ceil(T / BN)
    return q, [[tiles(m) for m in range(q)] for _ in range(heads)]


def two_d(work, fixed):
    order = [t for head in work for t in reversed(head)]  # head-major, last (longest) block first
    return greedy(order, fixed)


def sectioned(work, section, overlapped, balanced=True):
    # balanced (the kernel's dynamic_tile): heads // section sections as equal as they can be;
    # else (GROUPED's order) sections of `section` heads and a partial last one.
    heads, q = len(work), len(work[0])
    if balanced:
        n = max(1, heads // section)
        bounds = [g * (heads // n) + min(g, heads % n) for g in range(n + 1)]
    else:
        bounds = list(range(0, heads, section)) + [heads]
    order = []
    for lo, hi in zip(bounds, bounds[1:]):
        order += [work[h][m] for m in reversed(range(q)) for h in range(lo, hi)]
    return greedy(order, overlapped)


def greedy(order, cost, P=132):
    free = [0.0] * P
    heapq.heapify(free)
    for t in order:
        heapq.heappush(free, heapq.heappop(free) + t + cost)
    return max(free)


def static(work, overlapped, P=132):
    order = [t for head in work for t in reversed(head)]
    return max(sum(t + overlapped for t in order[p::P]) for p in range(min(P, len(order))))


def section_rule(T, BM, BN, D, heads, causal, P=132):
    if not causal:
        return 1
    q = math.ceil(T / BM)
    kv = 2 * T * 2 * D  # bytes of one head's K and V
    fit = lambda b: max(1, b // kv)
    return min(heads, max(fit(16 << 20), min(math.ceil(2 * P / q), fit(32 << 20))))


CASES = [  # (label, T, B, BM, BN, D): the library's tiles
    ("D=128 8k 192x80", 8192, 4, 192, 80, 128),
    ("D=128 8k 128x128", 8192, 4, 128, 128, 128),
    ("D=64 8k 192x128", 8192, 4, 192, 128, 64),
    ("D=256 8k 128x80", 8192, 4, 128, 80, 256),
    ("D=128 2k 128x128", 2048, 16, 128, 128, 128),
    ("D=128 1k 128x128", 1024, 32, 128, 128, 128),
]
# Fixed cost per item in tile units: ~2-3 µs of Q load, fill and store against ~1.7 µs per tile
# (192x80 at D=128); the persistent grid is taken to leave a quarter of it exposed.
FIXED, OVERLAPPED = 1.5, 0.4

if __name__ == "__main__":
    for causal in (False, True):
        for label, T, B, BM, BN, D in CASES:
            q, work = items(T, BM, BN, 16 * B, causal)
            ideal = sum(map(sum, work)) / 132
            base = two_d(work, FIXED)
            sec = section_rule(T, BM, BN, D, 16 * B, causal)
            rows = [("2-D", base), ("static", static(work, OVERLAPPED))]
            rows += [(f"dyn s={s}", sectioned(work, s, OVERLAPPED)) for s in sorted({1, 2, 4, sec, 16, 16 * B})]
            rows += [(f"partial s={sec}", sectioned(work, sec, OVERLAPPED, balanced=False))]
            print(f"{'causal' if causal else 'full  '} {label:18} q={q:2d} rule s={sec:3d}: "
                  + "  ".join(f"{n} {t / base:.3f} (idle {1 - ideal / t:.1%})" for n, t in rows))
