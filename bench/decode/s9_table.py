"""The tables of bench/decode/s9-call1.sh from its logs under OUT (python3 bench/decode/s9_table.py OUT):
(1) per shape and layout the best heads*, ws* and tma* kernel (GB/s of each bench run, the ratio, PyTorch's
dense peers of the same call); (2) at B=64 S=16k, K=1 and K=4, every heads/ws variant as a ratio to the
library's heads kernel of the same bench run. A variant timed at a second split count is name@splits."""

import collections
import sys

from harness_logs import bench_rows, torch_gbs

out = sys.argv[1]
rows = collections.defaultdict(lambda: collections.defaultdict(dict))  # (B,S,K,layout) -> name -> {run: GB/s}
for key, name, splits, model, run, gbs in bench_rows(out):
    name += "" if model else f"@{splits}"  # a second split count: name@splits
    rows[key][name][run] = max(rows[key][name].get(run, 0.0), gbs)
torch = torch_gbs(out, [(64, 16384, 8), (64, 16384, 4), (64, 16384, 1)])
def best(named, prefix):
    xs = [(max(r.values()), n, r) for n, r in named.items() if n.startswith(prefix)]
    return max(xs) if xs else None
print(f"{'B':>4} {'S':>7} {'K':>2} {'layout':8} {'best heads (run1/run2)':>30} {'best ws (run1/run2)':>34} {'ws/heads':>8} {'best tma (run1/run2)':>34} {'tma/heads':>9} {'torch cudnn':>11} {'flash':>6}")
for key in sorted(rows, key=lambda k: (-k[0] * k[1], k)):
    h, w, m = best(rows[key], "heads"), best(rows[key], "ws"), best(rows[key], "tma")
    cell = lambda b: "-" if not b else f"{'/'.join(f'{b[2][r]:.0f}' if r in b[2] else '-' for r in (1, 2))} {b[1]}"
    t = torch.get(key[:3], {}) if key[3] == "dense" else {}
    ratio = lambda x: f"{x[0] / h[0]:.3f}" if h and x else "-"
    print(f"{key[0]:>4} {key[1]:>7} {key[2]:>2} {key[3]:8} {cell(h):>30} {cell(w):>34} {ratio(w):>8} {cell(m):>34} {ratio(m):>9} {t.get('cudnn', 0):>11.0f} {t.get('flash', 0):>6.0f}")
print("== B=64 S=16k: every variant ÷ the library's heads kernel (heads1.4x32.s3 at K=1, heads4.2x16.s3 at K=4), same run")
for K, lib in ((1, "heads1.4x32.s3"), (4, "heads4.2x16.s3")):
    for layout in ("dense", "paged16", "paged64"):
        named = rows.get((64, 16384, K, layout), {})
        base = named.get(lib, {})
        cells = []
        for n in sorted(named, key=lambda n: -max(named[n].values())):
            if n.startswith(("ws", "heads", "tma")):
                ratios = [named[n][r] / base[r] for r in (1, 2) if r in named[n] and r in base]
                cells.append(f"{n} {max(named[n].values()):.0f} ({'/'.join(f'{x:.3f}' for x in ratios)})")
        print(f"K={K} {layout:8} " + "; ".join(cells))
