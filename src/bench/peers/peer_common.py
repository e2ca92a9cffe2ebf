"""Shared by attnlab's peer scripts (jax_peer.py, torch_peer.py): the request they read, the rows
they write, and the statistics and float64 check, kept identical to attnlab's own (src/bench/stats.ts,
src/bench/accuracy.ts) so that a peer row and an attnlab row mean the same thing.

Protocol: the request is one JSON object on stdin; the answer is one JSON object on stdout;
progress goes to stderr as lines 'PROGRESS <done> <total> <label>' that attnlab turns into its
progress bar. Anything else on stderr is passed through as diagnostics.
"""

import json
import math
import sys

import numpy as np

# Same limits as src/bench/accuracy.ts: full check up to this many multiply-adds, else 4 rows of 8 (b, n).
FULL_CHECK_LIMIT = 4e7
SAMPLED_ROWS = 4
SAMPLED_PAIRS = 8
MAX_INPUT_COPIES = 64
SHORT_DTYPE = {"bfloat16": "bf16", "float16": "f16", "float32": "f32", "float64": "f64"}


def read_request():
    return json.loads(sys.stdin.read())


def write_answer(answer):
    sys.stdout.write(json.dumps(answer))
    sys.stdout.write("\n")
    sys.stdout.flush()


def progress(done, total, label):
    sys.stderr.write(f"PROGRESS {done} {total} {label}\n")
    sys.stderr.flush()


def quantile(sorted_values, q):
    """Linear interpolation between the nearest ranks (numpy's default method)."""
    position = (len(sorted_values) - 1) * q
    lower = math.floor(position)
    upper = math.ceil(position)
    return sorted_values[lower] + (sorted_values[upper] - sorted_values[lower]) * (position - lower)


def summarize(samples):
    values = sorted(float(s) for s in samples)
    return {
        "median": quantile(values, 0.5),
        "p10": quantile(values, 0.1),
        "p90": quantile(values, 0.9),
        "min": values[0],
        "max": values[-1],
        "mean": sum(values) / len(values),
        "count": len(values),
    }


def repeats_for(per_call_ms, request):
    """As attnlab sizes its loop: the budget over one call's time, within [min_repeats, repeats]."""
    fit = math.floor(request["budget_ms"] / max(per_call_ms, 1e-3))
    return max(request["min_repeats"], min(request["repeats"], fit))


MAX_SETTLE_CALLS = 5000


def settle_calls(request, per_call_ms):
    """As attnlab's settle phase: settle_ms of back-to-back calls right before timing (see measure.ts)."""
    return min(MAX_SETTLE_CALLS, math.ceil(request.get("settle_ms", 0) / max(per_call_ms, 1e-3)))


def rotation_copies(bytes_per_set, l2_bytes, free_bytes=None):
    """Input sets to cycle so they span 2x L2 (and use at most a quarter of free memory)."""
    copies = min(MAX_INPUT_COPIES, math.ceil(2 * l2_bytes / max(bytes_per_set, 1)))
    if free_bytes is not None:
        copies = min(copies, free_bytes // 4 // max(bytes_per_set, 1))
    return max(1, int(copies))


def host_inputs(case, seed):
    """q (B,T,N,H), k and v (B,S,K,H) as float32 normals from a seeded numpy generator."""
    rng = np.random.default_rng(seed)
    q = rng.standard_normal((case["B"], case["T"], case["N"], case["H"]), dtype=np.float32)
    k = rng.standard_normal((case["B"], case["S"], case["K"], case["H"]), dtype=np.float32)
    v = rng.standard_normal((case["B"], case["S"], case["K"], case["H"]), dtype=np.float32)
    return q, k, v


def spread(length, count):
    """Up to count distinct indices of 0..length-1, evenly spread, both ends included (as accuracy.ts)."""
    if length <= count:
        return list(range(length))
    # floor(x + 0.5) is JavaScript's Math.round for x >= 0 (Python's round() rounds halves to even).
    return sorted({math.floor(i * (length - 1) / (count - 1) + 0.5) for i in range(count)})


def check_plan(case):
    """The (b, n) pairs and query rows to check, and whether that is all of them (as accuracy.ts)."""
    B, T, S, N, H = case["B"], case["T"], case["S"], case["N"], case["H"]
    if B * N * T * S * 2 * H <= FULL_CHECK_LIMIT:
        return [(b, n) for b in range(B) for n in range(N)], list(range(T)), True
    return [(i // N, i % N) for i in spread(B * N, SAMPLED_PAIRS)], spread(T, SAMPLED_ROWS), False


def max_error(case, q, k, v, out):
    """Max |out - float64 attention| over the planned rows; q, k, v, out as float64 numpy (BTNH)."""
    pairs, rows, full = check_plan(case)
    N, K, H = case["N"], case["K"], case["H"]
    scale = 1.0 / math.sqrt(H)
    worst = 0.0
    for b, n in pairs:
        head = n // (N // K)  # each KV head serves N/K query heads
        logits = (q[b, rows, n, :] @ k[b, :, head, :].T) * scale  # (R, S)
        if case["causal"]:
            keys = np.arange(case["S"])[None, :]
            logits = np.where(keys <= np.array(rows)[:, None], logits, -np.inf)
        logits -= logits.max(axis=-1, keepdims=True)
        p = np.exp(logits)
        p /= p.sum(axis=-1, keepdims=True)
        diff = np.abs(out[b, rows, n, :] - p @ v[b, :, head, :])
        if np.isnan(diff).any():
            return float("nan"), full
        worst = max(worst, float(diff.max()))
    return worst, full


def base_row(case, source, impl):
    label = f"{source} {impl} {SHORT_DTYPE.get(case['dtype'], case['dtype'])}"
    if case["causal"]:
        label += " causal"
    row = {key: case[key] for key in ("sweep", "B", "T", "S", "N", "K", "H", "dtype", "causal")}
    row.update({"source": source, "impl": impl, "label": label})
    return row


def first_line(error, limit=300):
    text = f"{type(error).__name__}: {error}".strip().split("\n")[0]
    return text[:limit]


def error_fields(err, full):
    """The row's error fields; a NaN output is reported as such (JSON has no NaN)."""
    fields = {"errorCheck": "full" if full else "sampled", "maxError": None if err != err else err}
    if err != err:
        fields["reason"] = "the output holds NaN"
    return fields


def guarded(measure, case, source, impl):
    """Runs one measurement; an exception it did not expect becomes an error row, not a lost peer."""
    try:
        return measure()
    except Exception as error:  # noqa: BLE001 - every failure is reported in the row
        row = base_row(case, source, impl)
        row.update(status="error", reason=f"unexpected {first_line(error)}")
        return row
