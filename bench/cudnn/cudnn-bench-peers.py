"""Wall time per call of JAX's and PyTorch's cuDNN attention at one small shape, measured exactly as
bench/cudnn/cudnn-bench.ts measures attnlab: each call followed by a device sync (host dispatch
included), and a burst of calls with one sync at the end (dispatch throughput). Prints one JSON line.

Usage: python3 cudnn-bench-peers.py B T N H repeats
"""

import json
import statistics
import sys
import time


def timed(fn, sync, repeats):
    for _ in range(20):
        fn()
    sync()
    per_call = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        sync()
        per_call.append((time.perf_counter() - t0) * 1e3)
    t0 = time.perf_counter()
    for _ in range(repeats):
        fn()
    sync()
    burst = (time.perf_counter() - t0) * 1e3 / repeats
    return {"syncedMedianMs": statistics.median(per_call), "syncedMinMs": min(per_call), "burstMsPerCall": burst}


def jax_wall(B, T, N, H, repeats):
    import jax
    import jax.numpy as jnp

    keys = jax.random.split(jax.random.PRNGKey(0), 3)
    q, k, v = (jax.random.normal(key, (B, T, N, H), dtype=jnp.bfloat16) for key in keys)
    fn = jax.jit(lambda q, k, v: jax.nn.dot_product_attention(q, k, v, implementation="cudnn"))
    state = {}

    def call():
        state["out"] = fn(q, k, v)

    return timed(call, lambda: jax.block_until_ready(state["out"]), repeats)


def torch_wall(B, T, N, H, repeats):
    import torch
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.nn.functional import scaled_dot_product_attention as sdpa

    q, k, v = (torch.randn(B, T, N, H, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
        # The same (B,T,N,H) memory as attnlab's, viewed as (B,N,T,H) the way PyTorch wants it.
        return timed(lambda: sdpa(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)), torch.cuda.synchronize, repeats)


def main():
    B, T, N, H, repeats = (int(x) for x in sys.argv[1:6])
    answer = {}
    for name, fn in (("jax", jax_wall), ("torch", torch_wall)):
        try:
            answer[name] = fn(B, T, N, H, repeats)
        except Exception as error:  # a missing peer is reported, not fatal
            answer[name] = {"error": str(error).split("\n")[0]}
    print(json.dumps(answer))


if __name__ == "__main__":
    main()
