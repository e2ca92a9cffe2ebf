"""One line per row of every decode-bench JSON in a folder (session 12's calls 3 and later): run, B, S, K,
label, GB/s per call (20 calls a pair of events), GB/s of the kernels alone, host µs a call, variant."""
import glob
import json
import os
import sys

f0 = lambda x: f"{x:.0f}" if x else "-"
for f in sorted(glob.glob(sys.argv[1] + "/*.json")):
    results = json.load(open(f))
    if results.get("kind") != "decode-bench":  # fixed-cost.ts and other benches write their own files
        continue
    for r in results["rows"]:
        v = r.get("variant") or r.get("reason", "")[:50]
        label = r["label"][8:22] if r["label"].startswith("attnlab") else r["label"][:14]
        print(f'{os.path.basename(f)[:-5]:5} {r["B"]:>3} {r["S"]:>6} {r["K"]} {label:14} '
              f'{f0(r.get("bandwidthGBs")):>5} {f0(r.get("kernelsGBs")):>5} {r.get("hostUsPerCall", 0):5.1f} {v[-40:]}')
