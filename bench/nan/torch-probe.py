"""What PyTorch's SDPA backends give for the NaN/Inf classes of src/check/nan-cases.ts (issue 12 §1).

For each class and backend (math, flash, efficient, cudnn; bf16 on the GPU) it prints one JSON line:
the NaN output elements expected by attnlab's rule, how many of them came out NaN ("missing" counts
those that did not), how many NaN elements appeared where the rule has none ("extra": a masked key's
NaN leaking in), and whether the output is finite where a whole row should be NaN. A backend that
refuses a class says why. Usage: python3 torch-probe.py > probe.jsonl
"""
import json

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel
import torch.nn.functional as F

B, N, T, S, H = 2, 4, 80, 150, 64
NAN, INF = float("nan"), float("inf")


def base(seed):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(B, N, T, H, generator=g)
    k = torch.randn(B, N, S, H, generator=g)
    v = torch.randn(B, N, S, H, generator=g)
    return q, k, v


def causal_mask():
    return torch.ones(T, S, dtype=torch.bool).tril()


def case_list():
    """(name, build) where build() -> (q, k, v, attn_mask or None, is_causal, expected NaN (B,N,T,H) bool)."""
    out = []

    def add(name):
        def wrap(fn):
            out.append((name, fn))
            return fn
        return wrap

    def expect():
        return torch.zeros(B, N, T, H, dtype=torch.bool)

    def poison_case(name, seed, operand, at, value, nan_at, causal):
        """q/k/v[at] = value; the output elements at `nan_at` (an index of (B,N,T,H)) must be NaN."""
        @add(name)
        def _():
            tensors = dict(zip("qkv", base(seed)))
            tensors[operand][at] = value
            e = expect(); e[nan_at] = True
            return tensors["q"], tensors["k"], tensors["v"], None, causal, e

    every = slice(None)
    poison_case("nan_q_row", 1, "q", (1, 2, 5, 3), NAN, (1, 2, 5), False)
    poison_case("inf_q_element", 2, "q", (0, 1, 7, 0), INF, (0, 1, 7), False)
    poison_case("nan_k_causal", 3, "k", (1, 0, 40, 5), NAN, (1, 0, slice(40, None)), True)
    poison_case("all_nan_k", 4, "k", (0,), NAN, (0,), False)
    poison_case("nan_v_element_causal", 5, "v", (0, 1, 30, 7), NAN, (0, 1, slice(30, None), 7), True)
    poison_case("nan_v_row_behind_causal_diagonal", 6, "v", (1, 0, 50, every), NAN,
                (1, 0, slice(50, None)), True)

    def bias_row_case(name, seed, at, value):
        """One bias entry (b, n, i, j) set to `value`: row (b, n, i) must be NaN."""
        @add(name)
        def _():
            q, k, v = base(seed)
            bias = torch.randn(B, N, T, S)
            bias[at] = value
            e = expect(); e[at[:3]] = True
            return q, k, v, bias, False, e

    bias_row_case("nan_bias", 7, (0, 3, 10, 20), NAN)
    bias_row_case("inf_bias", 8, (1, 0, 11, 3), INF)

    @add("neginf_bias_hides_nan_v")
    def _():
        q, k, v = base(9)
        bias = torch.randn(B, N, T, S)
        bias[0, :, :, 17] = -INF
        v[0, :, 17, :] = NAN
        return q, k, v, bias, False, expect()

    def hidden_by_mask(name, seed, hidden, poisoned):
        """A bool mask hiding keys `hidden` (an index of (B,1,T,S)); NaN K/V at `poisoned` stays out."""
        @add(name)
        def _():
            q, k, v = base(seed)
            mask = torch.ones(B, 1, T, S, dtype=torch.bool)
            mask[hidden] = False
            for tensor, at in poisoned:
                (k if tensor == "k" else v)[at] = NAN
            return q, k, v, mask, False, expect()

    hidden_by_mask("bool_mask_hides_nan_kv", 10, (0, every, every, 33), [("k", (0, every, 33)), ("v", (0, every, 33))])
    # keys >= 100 of batch 1 are padding
    hidden_by_mask("bool_mask_padding_hides_nan_kv", 11, (1, every, every, slice(100, None)),
                   [("k", (1, every, 120)), ("v", (1, every, 130))])

    return out


BACKENDS = {
    "math": SDPBackend.MATH,
    "flash": SDPBackend.FLASH_ATTENTION,
    "efficient": SDPBackend.EFFICIENT_ATTENTION,
    "cudnn": SDPBackend.CUDNN_ATTENTION,
}


def main():
    print(json.dumps({"torch": torch.__version__, "cudnn": torch.backends.cudnn.version(),
                      "gpu": torch.cuda.get_device_name()}), flush=True)
    for name, build in case_list():
        q, k, v, mask, causal, expected = build()
        dev = lambda x: None if x is None else x.to("cuda", torch.bfloat16 if x.dtype != torch.bool else torch.bool)
        for backend, which in BACKENDS.items():
            row = {"case": name, "backend": backend}
            try:
                with sdpa_kernel([which]):
                    o = F.scaled_dot_product_attention(dev(q), dev(k), dev(v), attn_mask=dev(mask), is_causal=causal)
                torch.cuda.synchronize()
                nan = o.float().isnan().cpu()
                exp_rows = expected.all(-1)
                row.update({
                    "expected_nan": int(expected.sum()),
                    "missing": int((expected & ~nan).sum()),
                    "extra": int((nan & ~expected).sum()),
                    "rows_expected_nan_but_finite": int((exp_rows & ~nan.any(-1)).sum()),
                    "zeros_where_nan_expected": int(((o.float().cpu() == 0) & expected).sum()),
                    "matches_rule": bool((nan == expected).all()),
                })
            except Exception as error:  # a backend that refuses the case
                row["refused"] = str(error).split("\n")[0][:160]
            print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
