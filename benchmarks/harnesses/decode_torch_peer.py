"""PyTorch's decode peer for benchmarks/harnesses/decode-bandwidth.ts: scaled_dot_product_attention with one
query token over a dense (B, S, K, H) cache, each backend forced (cudnn, flash, efficient), GQA
through enable_gqa. Inputs are made in attnlab's (B, S, K, H) layout and passed as (B, K, S, H)
transposed views, as the prefill peer does. 300 ms of back-to-back calls first (the H200 settles under
its power cap), then `repeats` samples of `batch` calls (default 1) between one pair of CUDA events, as
decode-bench.ts times attnlab's; the median sample over `batch`. With "hidden", each row also gets the
calls' device time with the host's taken out (`kernelsMs`, `hostUsPerCall`: see hidden() below).

    python3 torch_decode.py '{"cases": [{"B": 64, "S": 16384, "N": 32, "K": 8, "H": 128}], "repeats": 30, "batch": 20}'
prints one JSON object: {"rows": [{"case": i, "impl": "cudnn", "ms": …} | {"case": i, "impl": …, "error": …}]}
"""

import json
import sys
import time


def hidden(call, samples, batch):
    """attnlab's src/bench/hidden-host.ts on this side: each sample enqueues torch.cuda._sleep and behind it
    `batch` calls between one event pair; a sample counts only if the host finished enqueuing before the
    sleep ended (its own event pair says how long it ran), and the sleep doubles until it does."""
    import torch

    cycles, device, host = 2_000_000, [], []
    for _ in range(samples + 100):
        if len(device) == samples or cycles > 200_000_000:  # ~0.1 s: past it, not worth waiting
            break
        events = [torch.cuda.Event(enable_timing=True) for _ in range(4)]
        started = time.perf_counter()
        events[0].record()
        torch.cuda._sleep(cycles)
        events[1].record()
        events[2].record()
        for _ in range(batch):
            call()
        events[3].record()
        host_ms = (time.perf_counter() - started) * 1000
        events[3].synchronize()
        if host_ms < events[0].elapsed_time(events[1]):
            device.append(events[2].elapsed_time(events[3]) / batch)
            host.append(host_ms / batch)
        else:
            cycles *= 2
    if len(device) < samples:
        return {"kernelsReason": f"{len(device)} of {samples} samples enqueued within the sleep"}
    device.sort()
    host.sort()
    return {"kernelsMs": device[len(device) // 2], "hostUsPerCall": host[len(host) // 2] * 1000}


def main():
    request = json.loads(sys.argv[1])
    import torch
    from torch.nn.attention import SDPBackend, sdpa_kernel

    backends = {"cudnn": SDPBackend.CUDNN_ATTENTION, "flash": SDPBackend.FLASH_ATTENTION, "efficient": SDPBackend.EFFICIENT_ATTENTION}
    rows = []
    for index, c in enumerate(request["cases"]):
        B, S, N, K, H = c["B"], c["S"], c["N"], c["K"], c["H"]
        q = torch.randn(B, 1, N, H, device="cuda", dtype=torch.bfloat16).transpose(1, 2)
        k = torch.randn(B, S, K, H, device="cuda", dtype=torch.bfloat16).transpose(1, 2)
        v = torch.randn(B, S, K, H, device="cuda", dtype=torch.bfloat16).transpose(1, 2)
        for name, backend in backends.items():
            try:
                with sdpa_kernel([backend]):
                    call = lambda: torch.nn.functional.scaled_dot_product_attention(q, k, v, enable_gqa=K != N)
                    call()
                    torch.cuda.synchronize()
                    end = time.perf_counter() + 0.3
                    while time.perf_counter() < end:
                        call()
                    torch.cuda.synchronize()
                    times = []
                    batch = request.get("batch", 1)
                    for _ in range(request.get("repeats", 30)):
                        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                        start.record()
                        for _ in range(batch):
                            call()
                        stop.record()
                        stop.synchronize()
                        times.append(start.elapsed_time(stop) / batch)
                    times.sort()
                    row = {"case": index, "impl": name, "ms": times[len(times) // 2]}
                    if request.get("hidden"):
                        row.update(hidden(call, request.get("repeats", 30), batch))
                rows.append(row)
            except Exception as error:  # a refused backend is a row with its reason
                rows.append({"case": index, "impl": name, "error": " ".join(str(error).split())[:300]})
        del q, k, v
        torch.cuda.empty_cache()
    print(json.dumps({"rows": rows, "torch": torch.__version__}))


main()
