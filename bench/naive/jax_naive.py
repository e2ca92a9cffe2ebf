"""The codelab's "from scratch" JAX attention, timed the codelab's way, for bench/naive/naive-bench.ts.

scores = einsum(q, k) * scale, softmax over keys, einsum(weights, v); jitted; median wall-clock ms
of a call with block_until_ready after warm-up. Float32 runs twice: with JAX's default matmul
precision (which on Ampere and newer GPUs lets XLA use TF32) and with precision "highest" (true
float32), so each can be compared with attnlab's 'tf32' and 'highest' modes.

Usage: python3 jax_naive.py '{"B":4,"T":4096,"N":8,"H":64,"iterations":20,"warmup":3}'
Prints one JSON line last.
"""
import contextlib
import json
import statistics
import sys
import time

import jax
import jax.numpy as jnp


def naive(q, k, v):
    scale = 1.0 / jnp.sqrt(jnp.asarray(q.shape[-1], dtype=jnp.float32))
    scores = jnp.einsum("btnh,bsnh->bnts", q, k) * scale.astype(q.dtype)
    weights = jax.nn.softmax(scores, axis=-1)
    return jnp.einsum("bnts,bsnh->btnh", weights, v)


def time_call(fn, args, iterations, warmup):
    for _ in range(warmup):
        jax.block_until_ready(fn(*args))
    times = []
    for _ in range(iterations):
        t0 = time.perf_counter()
        jax.block_until_ready(fn(*args))
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times), min(times)


def main():
    req = json.loads(sys.argv[1])
    B, T, N, H = req["B"], req["T"], req["N"], req["H"]
    key = jax.random.PRNGKey(0)
    kq, kk, kv = jax.random.split(key, 3)
    rows = []
    for dtype_name, precision in (("float32", "default"), ("float32", "highest"), ("bfloat16", "default")):
        dtype = jnp.dtype(dtype_name)
        q, k, v = (jax.random.normal(x, (B, T, N, H), dtype=jnp.float32).astype(dtype) for x in (kq, kk, kv))
        context = contextlib.nullcontext() if precision == "default" else jax.default_matmul_precision(precision)
        with context:
            fn = jax.jit(naive)
            med, best = time_call(fn, (q, k, v), req["iterations"], req["warmup"])
        flops = 4 * B * N * T * T * H
        rows.append({"dtype": dtype_name, "precision": precision, "ms": med, "minMs": best, "tflops": flops / (med * 1e-3) / 1e12})
        print(f"jax naive {dtype_name} precision={precision}: {med:.3f} ms", file=sys.stderr)
    print(json.dumps({"jax": jax.__version__, "device": str(jax.devices()[0].device_kind), "rows": rows}))


if __name__ == "__main__":
    main()
