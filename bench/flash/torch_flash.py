"""PyTorch's FlashAttention-2 backend (sdpa_kernel(SDPBackend.FLASH_ATTENTION)) timed at the shapes
given as JSON on argv[1] ([{"B","T","N","H","causal"}], bf16), the way bench/flash/flash-bench.ts times
attnlab's kernel: inputs made in (B,T,N,H) and passed as (B,N,T,H) views, 5 warm-up calls, then CUDA
events around each of 30 calls; prints one JSON list with the median ms and TFLOP/s per shape."""

import json
import statistics
import sys

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.nn.functional import scaled_dot_product_attention as sdpa


def time_shape(shape):
    B, T, N, H, causal = shape["B"], shape["T"], shape["N"], shape["H"], shape["causal"]
    q, k, v = (torch.randn(B, T, N, H, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    qt, kt, vt = (x.transpose(1, 2) for x in (q, k, v))
    with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
        for _ in range(5):
            sdpa(qt, kt, vt, is_causal=causal)
        times = []
        for _ in range(30):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            sdpa(qt, kt, vt, is_causal=causal)
            end.record()
            times.append((start, end))
        torch.cuda.synchronize()
    ms = statistics.median(s.elapsed_time(e) for s, e in times)
    flops = 4 * B * N * T * T * H / (2 if causal else 1)
    return {**shape, "ms": ms, "tflops": flops / (ms * 1e-3) / 1e12}


def main():
    shapes = json.loads(sys.argv[1])
    rows = [time_shape(s) for s in shapes]
    print(json.dumps({"torch": torch.__version__, "device": torch.cuda.get_device_name(0), "rows": rows}))


if __name__ == "__main__":
    main()
