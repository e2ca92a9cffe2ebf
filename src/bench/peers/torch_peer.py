"""attnlab's PyTorch peer: times torch.nn.functional.scaled_dot_product_attention with each backend
forced through torch.nn.attention.sdpa_kernel (flash, cudnn, efficient, math), with CUDA events
around each call as attnlab does. Inputs are made in attnlab's (B,T,N,H) layout and passed as
(B,N,T,H) transposed views, so both libraries get the same bytes in memory.

With "ceiling": true in the request it also measures the dense bf16 matmul ceiling (8192^3).
With "pass": "backward" it times the backward alone: the forward runs once per input set and
torch.autograd.grad(out, (q, k, v), dO, retain_graph=True) is the timed call; "forward+backward"
times both in one call. Request and answer: see peer_common.py.
"""

import re
import time
import warnings

import numpy as np
import peer_common as common

BACKENDS = {"flash": "FLASH_ATTENTION", "cudnn": "CUDNN_ATTENTION", "efficient": "EFFICIENT_ATTENTION", "math": "MATH"}


def versions(torch):
    found = {"torch": torch.__version__, "cuda": str(torch.version.cuda)}
    if torch.backends.cudnn.is_available():
        v = torch.backends.cudnn.version()
        found["cudnn"] = f"{v // 10000}.{(v // 100) % 100}.{v % 100}" if v >= 10000 else str(v)
    if torch.cuda.is_available():
        found["device"] = torch.cuda.get_device_name(0)
    return found


def reasons(caught):
    """The reasons in PyTorch's warnings about a refused backend, without headers and source paths."""
    found = []
    for warning in caught:
        text = re.sub(r"\s*\(Triggered internally at [^)]*\)", "", " ".join(str(warning.message).split()))
        if text and not text.endswith(":"):
            found.append(text)
    return found


def matmul_ceiling(torch):
    """Median TFLOP/s of a bf16 8192x8192x8192 matmul: the dense tensor-core rate percentages use."""
    n = 8192
    a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    for _ in range(3):
        a @ b
    times = []
    for _ in range(20):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        a @ b
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    ms = common.summarize(times)["median"]
    return {"tflops": 2 * n**3 / (ms * 1e-3) / 1e12, "dtype": "bfloat16", "source": "torch-matmul"}


def measure(torch, case, impl, request):
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.nn.functional import scaled_dot_product_attention as sdpa

    row = common.base_row(case, "torch", impl)
    dtype = getattr(torch, case["dtype"])
    host = common.host_inputs(case, request["seed"])
    what = request.get("pass", "forward")
    grad = what != "forward"
    make = lambda: [torch.from_numpy(x).to(device="cuda", dtype=dtype).requires_grad_(grad) for x in host]  # noqa: E731
    gqa = case["K"] != case["N"]
    backend = getattr(SDPBackend, BACKENDS[impl])

    def forward(q, k, v):
        out = sdpa(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=case["causal"], enable_gqa=gqa)
        return out.transpose(1, 2)

    call = forward
    if grad:
        row["pass"] = what
        request = {**request, "check_error": False}  # the float64 check is of the forward's output
        d_out = torch.from_numpy(host[0]).to(device="cuda", dtype=dtype)  # (B,T,N,H), the output's shape
        saved = {}

        def call(q, k, v):
            if what == "forward+backward":
                return torch.autograd.grad(forward(q, k, v), (q, k, v), d_out)
            if id(q) not in saved:  # the residuals of this input set, made once, outside the timed calls
                saved[id(q)] = forward(q, k, v)
            return torch.autograd.grad(saved[id(q)], (q, k, v), d_out, retain_graph=True)

    # Entered once, not per call: its flag switching is not part of what a user's call costs.
    with sdpa_kernel(backend):
        return timed(torch, case, request, row, call, make, BACKENDS[impl])


def timed(torch, case, request, row, call, make, backend_name):
    """The first call (peak memory, error check), a warm-up, then CUDA-event timing over rotated inputs."""
    # As attnlab counts it: the peak above what was allocated before this case, inputs included.
    baseline = torch.cuda.memory_allocated()
    q, k, v = make()
    caught = []
    try:
        torch.cuda.reset_peak_memory_stats()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            t0 = time.perf_counter()
            out = call(q, k, v)
            torch.cuda.synchronize()
            first_ms = (time.perf_counter() - t0) * 1e3
        peak = torch.cuda.max_memory_allocated() - baseline
    except Exception as error:  # a backend that refuses the case, or out of memory: a row, not a crash
        text = common.first_line(error)
        # A forced backend that cannot run says why only in warnings, then raises "No available
        # kernel" (PyTorch 2.11) or "No viable backend" (later versions).
        why = "; ".join(reasons(caught))[:400]
        if isinstance(error, torch.cuda.OutOfMemoryError):
            row.update(status="out-of-memory", reason=text)
        elif "No available kernel" in text or "No viable backend" in text:
            row.update(status="unsupported", reason=f"{text} {why}".strip())
        else:
            row.update(status="error", reason=text)
        torch.cuda.empty_cache()
        return row
    if request["check_error"]:
        as64 = [x.float().cpu().numpy().astype(np.float64) for x in (q, k, v, out)]
        row.update(common.error_fields(*common.max_error(case, *as64)))
    del out
    warm = []
    for _ in range(request["warmup"]):
        t0 = time.perf_counter()
        call(q, k, v)
        torch.cuda.synchronize()
        warm.append((time.perf_counter() - t0) * 1e3)
    repeats = common.repeats_for(min(warm) if warm else first_ms, request)
    bytes_per_set = (q.numel() + k.numel() + v.numel()) * q.element_size()
    free, _ = torch.cuda.mem_get_info()
    sets = [(q, k, v)] + [
        tuple(make()) for _ in range(common.rotation_copies(bytes_per_set, request["l2_bytes"], free) - 1)
    ]
    settle = common.settle_calls(request, min(warm) if warm else first_ms)
    for i in range(settle):  # back to back, no wait: timing starts in the sustained power state
        call(*sets[i % len(sets)])
    events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(repeats)]
    host_ms = []
    for i, (start, end) in enumerate(events):
        qi, ki, vi = sets[i % len(sets)]
        start.record()
        t0 = time.perf_counter()
        call(qi, ki, vi)
        host_ms.append((time.perf_counter() - t0) * 1e3)
        end.record()
    torch.cuda.synchronize()
    row.update(
        status="ok",
        variant=f"sdpa_kernel(SDPBackend.{backend_name})",
        peakMemoryBytes=peak,
        timing={
            "method": "cuda-events",
            "ms": common.summarize([s.elapsed_time(e) for s, e in events]),
            "hostMs": common.summarize(host_ms),
            "firstCallMs": first_ms,
            "warmup": request["warmup"],
            "inputCopies": len(sets),
            "settleCalls": settle,
        },
    )
    del sets
    torch.cuda.empty_cache()
    return row


def main():
    request = common.read_request()
    import torch

    answer = {"versions": versions(torch), "rows": []}
    if not torch.cuda.is_available():
        answer["unavailable"] = "PyTorch sees no CUDA device (torch.cuda.is_available() is False)"
        common.write_answer(answer)
        return
    if request.get("ceiling"):
        answer["ceiling"] = matmul_ceiling(torch)
    total = len(request["cases"]) * len(request["impls"])
    for case in request["cases"]:
        for impl in request["impls"]:
            common.progress(len(answer["rows"]), total, f"torch {impl} {case['dtype']} T={case['T']} B={case['B']}")
            answer["rows"].append(common.guarded(lambda: measure(torch, case, impl, request), case, "torch", impl))
            torch.cuda.empty_cache()
    common.write_answer(answer)


if __name__ == "__main__":
    main()
