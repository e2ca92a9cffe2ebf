"""Readers of a harness device call's logs under $OUT (bench/decode/s8-call1.sh, s9-call1.sh): the rows
of `harness bench` (bench1.log, bench2.log) and PyTorch's decode peer (torch.json, torch_decode.py) as
GB/s of the same byte count the harness uses (K/V rows read once + Q + O, N=32, H=128, bf16)."""

import json


def bench_rows(out):
    """(B, S, K, layout), kernel name, split count, whether the model chose it, run (1 or 2), GB/s."""
    for run in (1, 2):
        try:
            lines = open(f"{out}/bench{run}.log").read().splitlines()
        except OSError:
            continue
        for line in lines:
            f = line.split()
            if len(f) < 9 or not f[0].isdigit():
                continue
            yield (int(f[0]), int(f[1]), int(f[2]), f[3]), f[4], int(f[6]), len(f) > 9 and f[9] == "*", run, float(f[8])


def torch_gbs(out, req):
    """{(B, S, K): {impl: GB/s}} for torch.json's rows, case i being req[i] = (B, S, K)."""
    torch = {}
    try:
        for row in json.load(open(f"{out}/torch.json"))["rows"]:
            if "ms" in row and row["case"] < len(req):
                B, S, K = req[row["case"]]
                gb = 2.0 * (2.0 * B * S * K * 128 + 2.0 * B * 32 * 128) / (row["ms"] * 1e-3) / 1e9
                torch.setdefault((B, S, K), {})[row["impl"]] = gb
    except (OSError, ValueError, KeyError):
        pass
    return torch
