"""Experiment: JAX's and PyTorch's cuDNN attention at one shape, timed three ways, to tell a faster
kernel from a kinder timing regime:
- synced: each call followed by a device sync (JAX's peer method: the GPU idles while the host
  dispatches the next call, so it runs further from its power cap),
- burst: calls back to back after 300 ms of settling, one sync at the end (ms per call),
- events (PyTorch only): CUDA events around each call, back to back after settling (PyTorch's and
  attnlab's peer method).
Run under CUDNN_LOGLEVEL_DBG=3 CUDNN_LOGDEST_DBG=<file> to see the engine config each one builds, and
with XLA_FLAGS=--xla_dump_to=<dir> --xla_dump_hlo_as_text for JAX's custom call.

Usage: python3 cudnn-peers-probe.py jax|torch B T N H [repeats]
Prints one JSON line per causal setting.
"""

import json
import statistics
import sys
import time

SETTLE_MS = 300


def regimes(call, sync, repeats, events=None):
    call()
    sync()
    t0 = time.perf_counter()
    while (time.perf_counter() - t0) * 1e3 < SETTLE_MS:
        for _ in range(8):
            call()
        sync()
    t0 = time.perf_counter()
    for _ in range(repeats):
        call()
    sync()
    burst = (time.perf_counter() - t0) * 1e3 / repeats
    synced = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        call()
        sync()
        synced.append((time.perf_counter() - t0) * 1e3)
    found = {"burstMs": burst, "syncedMedianMs": statistics.median(synced), "syncedMinMs": min(synced)}
    if events:
        found["eventsMedianMs"] = events()
    return found


def run_jax(B, T, N, H, repeats):
    import jax
    import jax.numpy as jnp

    keys = jax.random.split(jax.random.PRNGKey(0), 3)
    q, k, v = (jax.random.normal(key, (B, T, N, H), dtype=jnp.bfloat16) for key in keys)
    for causal in (False, True):
        fn = jax.jit(
            lambda q, k, v, c=causal: jax.nn.dot_product_attention(q, k, v, is_causal=c, implementation="cudnn")
        )
        state = {}

        def call():
            state["out"] = fn(q, k, v)

        found = regimes(call, lambda: jax.block_until_ready(state["out"]), repeats)
        yield causal, found


def run_torch(B, T, N, H, repeats):
    import torch
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.nn.functional import scaled_dot_product_attention as sdpa

    q, k, v = (torch.randn(B, T, N, H, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
        for causal in (False, True):

            def call(c=causal):
                return sdpa(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=c)

            def events():
                pairs = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(repeats)]
                for start, end in pairs:
                    start.record()
                    call()
                    end.record()
                torch.cuda.synchronize()
                return statistics.median(s.elapsed_time(e) for s, e in pairs)

            yield causal, regimes(call, torch.cuda.synchronize, repeats, events)


def main():
    which = sys.argv[1]
    B, T, N, H = (int(x) for x in sys.argv[2:6])
    repeats = int(sys.argv[6]) if len(sys.argv) > 6 else 30
    flops = 4 * B * N * T * T * H
    run = run_jax if which == "jax" else run_torch
    for causal, found in run(B, T, N, H, repeats):
        work = flops / 2 if causal else flops
        tflops = {k.replace("Ms", "Tflops"): round(work / (v * 1e-3) / 1e12) for k, v in found.items()}
        print(json.dumps({"peer": which, "B": B, "T": T, "N": N, "H": H, "causal": causal, **found, **tflops}), flush=True)


if __name__ == "__main__":
    main()
