"""The table of bench/decode/s9-call4.sh (python3 bench/decode/s9_tma_table.py OUT B:S:K,…): per K=1 shape
and layout, every tma* variant and heads1.4x32.s3 in GB/s (bench run 1 / run 2) and as a ratio to the
library's tma1.4x32.s3f of the same run, with PyTorch's dense peers (cuDNN, flash) of the same call."""

import collections
import sys

from harness_logs import bench_rows, torch_gbs

out, shapes = sys.argv[1], [tuple(map(int, s.split(":"))) for s in sys.argv[2].split(",")]
rows = collections.defaultdict(lambda: collections.defaultdict(dict))  # (B,S,K,layout) -> name -> {run: GB/s}
for key, name, splits, model, run, gbs in bench_rows(out):
    if model:  # the split count the model chose (the library's)
        rows[key][name][run] = gbs
torch = torch_gbs(out, shapes)
LIB = "tma1.4x32.s3f"
for key in sorted(rows, key=lambda k: (-k[0] * k[1], k[0], k[3])):
    named, base = rows[key], rows[key].get(LIB, {})
    t = torch.get(key[:3], {}) if key[3] == "dense" else {}
    peers = f"  torch cudnn {t.get('cudnn', 0):.0f} flash {t.get('flash', 0):.0f}" if t else ""
    print(f"B={key[0]} S={key[1]} K={key[2]} {key[3]}{peers}")
    for n in sorted((n for n in named if n.startswith(("tma", "heads"))), key=lambda n: -max(named[n].values())):
        runs = named[n]
        ratio = "/".join(f"{runs[r] / base[r]:.3f}" for r in (1, 2) if r in runs and r in base)
        print(f"  {n:22} {'/'.join(f'{runs[r]:.0f}' if r in runs else '-' for r in (1, 2)):>11}  ÷{LIB} {ratio}")
