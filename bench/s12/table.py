"""One line per row of every decode-bench JSON in a folder (session 12's calls 3 and later): run, B, S, K,
label, GB/s per call (20 calls a pair of events), GB/s of the kernels alone, host µs a call, variant; and where
the folder holds decode_call's nvidia-smi log (smi.csv) and the row its times (measuredAt, session 15 on), the
mean SM clock (MHz) and the share of samples with the SW power cap active (%) during each timing, per call
then kernels alone, and NVML's share of the calls' time power-capped and mean W where the row has them. nvidia-smi writes local time: the device machine's clock is UTC (its `date` in the call)."""
import csv
import glob
import json
import os
import sys
from datetime import datetime, timezone

f0 = lambda x: f"{x:.0f}" if x else "-"
SW_POWER_CAP = 0x4  # clocks_event_reasons bit: nvmlClocksEventReasonSwPowerCap


def smi_samples(folder):
    path = os.path.join(folder, "smi.csv")
    if not os.path.exists(path):
        return []
    samples = []
    for line in csv.reader(open(path), skipinitialspace=True):
        try:
            t = datetime.strptime(line[0], "%Y/%m/%d %H:%M:%S.%f").replace(tzinfo=timezone.utc).timestamp()
            samples.append((t, float(line[4].split()[0]), int(line[6], 16)))
        except (ValueError, IndexError):
            continue  # a header, or a line cut off when the logger was stopped
    return samples


def during(samples, window):
    """mean SM MHz and % of samples power-capped in [start, end], or '' where no sample falls inside."""
    if not window:
        return ""
    start, end = (datetime.fromisoformat(w.replace("Z", "+00:00")).timestamp() for w in window)
    inside = [(mhz, reasons) for t, mhz, reasons in samples if start <= t <= end]
    if not inside:
        return "   -    -"
    mhz = sum(m for m, _ in inside) / len(inside)
    capped = 100 * sum(1 for _, r in inside if r & SW_POWER_CAP) / len(inside)
    return f"{mhz:4.0f} {capped:3.0f}%"


samples = smi_samples(sys.argv[1])
for f in sorted(glob.glob(sys.argv[1] + "/*.json")):
    results = json.load(open(f))
    if results.get("kind") != "decode-bench":  # fixed-cost.ts and other benches write their own files
        continue
    for r in results["rows"]:
        v = r.get("variant") or r.get("reason", "")[:50]
        label = r["label"][8:22] if r["label"].startswith("attnlab") else r["label"][:14]
        at = r.get("measuredAt") or {}
        clocks = f' {during(samples, at.get("perCall"))} {during(samples, at.get("kernels"))}' if samples else ""
        if r.get("power"):  # NVML over the calls (session 15 on): % of the time power-capped, mean W
            clocks += f' nvml {r["power"]["cappedPercent"]:3.0f}% {r["power"]["meanWatts"]:3.0f} W'
        print(f'{os.path.basename(f)[:-5]:5} {r["B"]:>3} {r["S"]:>6} {r["K"]} {label:14} '
              f'{f0(r.get("bandwidthGBs")):>5} {f0(r.get("kernelsGBs")):>5} {r.get("hostUsPerCall", 0):5.1f}{clocks} {v[-40:]}')
