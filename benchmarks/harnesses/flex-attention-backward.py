#!/usr/bin/env python3
"""PyTorch's flex_attention (torch.compile'd) backward on the masks and modifiers that
benchmarks/harnesses/variants-backward.ts times on attnlab's flash backward, with SDPA's causal and full
backward beside them, at the same shape (B=4 T=S=8192 N=16 H=128 bf16 by default).

  python3 benchmarks/harnesses/flex-attention-backward.py masks|scores|CASE[,CASE…] [B T N H]

CASE: sdpa-causal, sdpa-full, causal, document, alibi, softcap, softcap-causal (masks = the first, causal and
document; scores = sdpa-causal, sdpa-full, alibi, softcap, softcap-causal). Each flex case compiles its own
forward and backward kernels (tens of seconds cold), so a time-capped call can take them a few at a time.

Each case runs the forward once with q, k, v requiring gradients, then times the backward alone:
torch.autograd.grad(out, (q, k, v), dO, retain_graph=True), what loss.backward() runs for a loss whose
gradient at the output is dO, without accumulating into .grad. Median ms of 20 calls after 10 warm-up
calls (CUDA events); TFLOP/s at 2.5× the forward's FLOPs over the pairs the mask keeps (attnlab's
backward convention), and the block mask's build time (once, as a model reuses it). Cases, as the
attnlab harness's parts: masks, SDPA causal, causal as mask_mod and 8 equal packed documents (causal
within each); scores, SDPA causal and full, an ALiBi score_mod on a causal block mask, soft-capping
30·tanh(s/30) with and without a causal block mask. Exits 0 with a line saying why when this PyTorch
has no flex_attention or no GPU.
"""
import json
import sys


def main():
    try:
        import torch
        from torch.nn.attention.flex_attention import create_block_mask, flex_attention
    except ImportError as error:
        print(json.dumps({"skipped": f"no flex_attention in this PyTorch: {error}"}))
        return
    if not torch.cuda.is_available():
        print(json.dumps({"skipped": "no CUDA device"}))
        return
    part = sys.argv[1] if len(sys.argv) > 1 else "masks"
    groups = {"masks": ["sdpa-causal", "causal", "document"],
              "scores": ["sdpa-causal", "sdpa-full", "alibi", "softcap", "softcap-causal"]}
    cases = groups.get(part, part.split(","))
    B, T, N, H = (int(x) for x in sys.argv[2:6]) if len(sys.argv) >= 6 else (4, 8192, 16, 128)
    docs = 8
    length = T // docs
    device = "cuda"
    torch.manual_seed(31)

    def leaf():
        return torch.randn(B, N, T, H, device=device, dtype=torch.bfloat16).requires_grad_(True)

    q, k, v = leaf(), leaf(), leaf()
    d_out = torch.randn(B, N, T, H, device=device, dtype=torch.bfloat16)
    flex = torch.compile(flex_attention, dynamic=False)
    doc_ids = (torch.arange(T, device=device) // length).expand(B, T).contiguous()
    slopes = torch.tensor([2 ** (-8 * (h + 1) / N) for h in range(N)], device=device, dtype=torch.float32)

    def causal(b, h, q_idx, kv_idx):
        return kv_idx <= q_idx

    def document(b, h, q_idx, kv_idx):
        return (kv_idx <= q_idx) & (doc_ids[b, q_idx] == doc_ids[b, kv_idx])

    def alibi(score, b, h, q_idx, kv_idx):
        return score + slopes[h] * (kv_idx - q_idx)

    def softcap(score, b, h, q_idx, kv_idx):
        return 30.0 * torch.tanh(score / 30.0)

    def backward_ms(forward):
        out = forward()
        grad = lambda: torch.autograd.grad(out, (q, k, v), d_out, retain_graph=True)  # noqa: E731
        for _ in range(10):
            grad()
        torch.cuda.synchronize()
        times = []
        for _ in range(20):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            grad()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end))
        del out
        return sorted(times)[len(times) // 2]

    def block_mask(mask_mod, batched):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        mask = create_block_mask(mask_mod, B if batched else None, None, T, T, device=device)
        end.record()
        end.synchronize()
        return mask, start.elapsed_time(end)

    causal_pairs = T * (T + 1) // 2
    doc_pairs = docs * length * (length + 1) // 2

    def report(case, ms, pairs, **extra):
        tflops = 2.5 * 4 * B * N * pairs * H / (ms * 1e-3) / 1e12
        print(json.dumps({"case": case, "pass": "backward", "B": B, "T": T, "N": N, "H": H,
                          "ms": round(ms, 4), "tflops": round(tflops, 1), **extra}), flush=True)

    sdpa = torch.nn.functional.scaled_dot_product_attention
    causal_mask, causal_build = block_mask(causal, False)
    for case in cases:
        if case == "sdpa-causal":
            report("sdpa causal", backward_ms(lambda: sdpa(q, k, v, is_causal=True)), causal_pairs)
        elif case == "sdpa-full":
            report("sdpa full", backward_ms(lambda: sdpa(q, k, v)), T * T)
        elif case == "causal":
            report("flex causal mask_mod", backward_ms(lambda: flex(q, k, v, block_mask=causal_mask)),
                   causal_pairs, blockMaskMs=round(causal_build, 3))
        elif case == "document":
            doc_mask, build = block_mask(document, True)
            report(f"flex document mask ({docs} equal documents)",
                   backward_ms(lambda: flex(q, k, v, block_mask=doc_mask)), doc_pairs, blockMaskMs=round(build, 3))
        elif case == "alibi":
            report("flex ALiBi + causal",
                   backward_ms(lambda: flex(q, k, v, score_mod=alibi, block_mask=causal_mask)), causal_pairs)
        elif case == "softcap":
            report("flex softcap 30", backward_ms(lambda: flex(q, k, v, score_mod=softcap)), T * T)
        elif case == "softcap-causal":
            report("flex softcap 30 + causal",
                   backward_ms(lambda: flex(q, k, v, score_mod=softcap, block_mask=causal_mask)), causal_pairs)
        else:
            print(json.dumps({"skipped": f"unknown case {case}"}), flush=True)
    print(json.dumps({"torch": torch.__version__, "device": torch.cuda.get_device_name()}))


if __name__ == "__main__":
    main()
