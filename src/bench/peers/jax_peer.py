"""attnlab's JAX peer: times jax.nn.dot_product_attention (implementation 'xla' and 'cudnn') on the
cases attnlab sends, the codelab's way: host wall time of a jitted call followed by
block_until_ready (JAX has no public per-call device timer), many repeats, median and p10/p90.

With "pass": "backward" it times the pullback alone (jax.vjp once per input set, then the jitted
pullback applied to dO), with "forward+backward" one jitted call of both. Request and answer: see
peer_common.py. Run by src/bench/peers.ts; by hand:
  echo '{"cases":[{"sweep":"x","B":4,"T":128,"S":128,"N":8,"K":8,"H":64,"dtype":"bfloat16","causal":false}],
         "impls":["xla"],"warmup":3,"repeats":50,"min_repeats":10,"budget_ms":500,"seed":0,
         "check_error":true,"l2_bytes":52428800}' | python3 jax_peer.py
"""

import time
from functools import partial

import numpy as np
import peer_common as common


def versions(jax):
    found = {"jax": jax.__version__}
    try:
        import jaxlib

        found["jaxlib"] = jaxlib.__version__
    except Exception:  # jaxlib's version is informative only
        pass
    try:
        from jax._src.lib import cuda_versions

        if cuda_versions is not None:
            v = cuda_versions.cudnn_get_version()
            found["cudnn"] = f"{v // 10000}.{(v // 100) % 100}.{v % 100}"
    except Exception:  # private module: absent on CPU-only jaxlib, may move between versions
        pass
    device = jax.devices()[0]
    found["device"] = f"{device.platform} {getattr(device, 'device_kind', str(device))}"
    return found


def gradient_call(jax, forward, d_out, what):
    """(q, k, v) -> (dq, dk, dv): the pullback of a vjp made once per input set, or forward and pullback."""
    if what == "forward+backward":
        both = jax.jit(lambda q, k, v, g: jax.vjp(forward, q, k, v)[1](g))
        return lambda q, k, v: both(q, k, v, d_out)
    pull = jax.jit(lambda pullback, g: pullback(g))
    saved = {}

    def call(q, k, v):
        if id(q) not in saved:  # residuals of this input set, made once, outside the timed calls
            saved[id(q)] = jax.vjp(forward, q, k, v)[1]
        return pull(saved[id(q)], d_out)

    return call


def measure(jax, jnp, case, impl, request):
    row = common.base_row(case, "jax", impl)
    dtype = jnp.dtype(case["dtype"])
    q32, k32, v32 = common.host_inputs(case, request["seed"])
    q, k, v = (jnp.asarray(x, dtype=dtype) for x in (q32, k32, v32))
    fn = jax.jit(partial(jax.nn.dot_product_attention, is_causal=case["causal"], implementation=impl))
    what = request.get("pass", "forward")
    if what != "forward":
        row["pass"] = what
        request = {**request, "check_error": False}  # the float64 check is of the forward's output
        fn = gradient_call(jax, fn, jnp.asarray(q32, dtype=dtype), what)
    try:
        t0 = time.perf_counter()
        out = jax.block_until_ready(fn(q, k, v))
        first_ms = (time.perf_counter() - t0) * 1e3
    except Exception as error:  # a refused implementation or an out-of-memory: a row, not a crash
        text = common.first_line(error)
        if "RESOURCE_EXHAUSTED" in text or "out of memory" in text.lower():
            row.update(status="out-of-memory", reason=text)
        elif impl == "cudnn":
            row.update(status="unsupported", reason=text)
        else:
            row.update(status="error", reason=text)
        return row
    if request["check_error"]:
        as64 = [np.asarray(x.astype(jnp.float32), dtype=np.float64) for x in (q, k, v, out)]
        err, full = common.max_error(case, *as64)
        row.update(common.error_fields(err, full))
    warm = []
    for _ in range(request["warmup"]):
        t0 = time.perf_counter()
        jax.block_until_ready(fn(q, k, v))
        warm.append((time.perf_counter() - t0) * 1e3)
    repeats = common.repeats_for(min(warm) if warm else first_ms, request)
    bytes_per_set = (q.size + k.size + v.size) * dtype.itemsize
    sets = [(q, k, v)] + [
        tuple(jnp.array(x, copy=True) for x in (q, k, v))
        for _ in range(common.rotation_copies(bytes_per_set, request["l2_bytes"]) - 1)
    ]
    settle = common.settle_calls(request, min(warm) if warm else first_ms)
    pending = None
    for i in range(settle):  # dispatched back to back, waited for once: the sustained power state
        pending = fn(*sets[i % len(sets)])
    if pending is not None:
        jax.block_until_ready(pending)
    walls, dispatch = [], []
    for i in range(repeats):
        qi, ki, vi = sets[i % len(sets)]
        t0 = time.perf_counter()
        result = fn(qi, ki, vi)
        t1 = time.perf_counter()
        jax.block_until_ready(result)
        t2 = time.perf_counter()
        dispatch.append((t1 - t0) * 1e3)
        walls.append((t2 - t0) * 1e3)
    row.update(
        status="ok",
        variant=f"jax.nn.dot_product_attention(implementation={impl!r})",
        peakMemoryBytes=None,
        timing={
            "method": "wall-block-until-ready",
            "ms": common.summarize(walls),
            "hostMs": common.summarize(dispatch),
            "firstCallMs": first_ms,
            "warmup": request["warmup"],
            "inputCopies": len(sets),
            "settleCalls": settle,
        },
    )
    return row


def main():
    request = common.read_request()
    import jax
    import jax.numpy as jnp

    rows = []
    total = len(request["cases"]) * len(request["impls"])
    for case in request["cases"]:
        for impl in request["impls"]:
            common.progress(len(rows), total, f"jax {impl} {case['dtype']} T={case['T']} B={case['B']}")
            rows.append(common.guarded(lambda: measure(jax, jnp, case, impl, request), case, "jax", impl))
    common.write_answer({"versions": versions(jax), "rows": rows})


if __name__ == "__main__":
    main()
