"""PyTorch's FlashAttention-2 backend at repair-cost.ts's shape (B=2, T=S=8192, N=16, H=128, bf16),
causal and not, timed as repair-cost.ts times attnlab: 300 ms back to back, then 30 calls between
CUDA events, median. One JSON line. Usage: python3 torch-fa2.py"""
import json
import time

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

B, T, N, H = 2, 8192, 16, 128
x = torch.randn(B, N, T, H, device="cuda", dtype=torch.bfloat16)
rows = []
with sdpa_kernel([SDPBackend.FLASH_ATTENTION]):
    for causal in (False, True):
        call = lambda: F.scaled_dot_product_attention(x, x, x, is_causal=causal)
        end = time.time() + 0.3
        while time.time() < end:
            call()
            torch.cuda.synchronize()
        times = []
        for _ in range(30):
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record(); call(); b.record(); torch.cuda.synchronize()
            times.append(a.elapsed_time(b))
        ms = sorted(times)[len(times) // 2]
        rows.append({"isCausal": causal, "ms": ms, "tflops": 4 * B * N * T * T * H / (2 if causal else 1) / (ms * 1e-3) / 1e12})
print(json.dumps({"torch_fa2": rows}))
