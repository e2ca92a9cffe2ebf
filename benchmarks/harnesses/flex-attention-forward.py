#!/usr/bin/env python3
"""PyTorch's flex_attention (torch.compile'd) forward on the masks and modifiers that
benchmarks/harnesses/variants-hopper-speed.ts times on attnlab's Hopper kernel, with SDPA's causal
and full attention beside them, at the same shape (B=4 T=S=8192 N=16 H=128 bf16 by default).

  python3 benchmarks/harnesses/flex-attention-forward.py masks|scores|causal-mask|documents|alibi|softcap|softcap-causal [B T N H]

Prints one JSON line per case: median ms of 20 calls after 10 warm-up calls (CUDA events), TFLOP/s
over the pairs the mask keeps, and the block mask's build time (once, as a model reuses it). Cases,
as the attnlab harness's parts: masks, SDPA causal, causal as mask_mod and 8 equal packed documents
(causal within each); scores, SDPA causal and full, an ALiBi score_mod on a causal mask and
soft-capping 30·tanh(s/30) with and without a causal mask. The other parts run one of those cases
each (with SDPA causal, and SDPA full beside softcap), so that a part's torch.compile of flex_attention
fits a short cap. Exits 0 with a line saying why when this PyTorch has no flex_attention or no GPU.
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
    B, T, N, H = (int(x) for x in sys.argv[2:6]) if len(sys.argv) >= 6 else (4, 8192, 16, 128)
    docs = 8
    length = T // docs
    device = "cuda"
    torch.manual_seed(31)
    q, k, v = (torch.randn(B, N, T, H, device=device, dtype=torch.bfloat16) for _ in range(3))
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

    def timed(fn):
        for _ in range(10):
            fn()
        torch.cuda.synchronize()
        times = []
        for _ in range(20):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end))
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
        tflops = 4 * B * N * pairs * H / (ms * 1e-3) / 1e12
        print(json.dumps({"case": case, "B": B, "T": T, "N": N, "H": H, "ms": round(ms, 4),
                          "tflops": round(tflops, 1), **extra}), flush=True)

    cases = {"masks": ["causal-mask", "documents"], "scores": ["alibi", "softcap", "softcap-causal"]}.get(part, [part])
    known = {"causal-mask", "documents", "alibi", "softcap", "softcap-causal"}
    if not set(cases) <= known:
        print(json.dumps({"error": f"unknown part {part}: masks, scores or one of {sorted(known)}"}))
        sys.exit(2)
    sdpa = torch.nn.functional.scaled_dot_product_attention
    report("sdpa causal", timed(lambda: sdpa(q, k, v, is_causal=True)), causal_pairs)
    causal_mask, build = block_mask(causal, False)
    if "causal-mask" in cases:
        report("flex causal mask_mod", timed(lambda: flex(q, k, v, block_mask=causal_mask)), causal_pairs,
               blockMaskMs=round(build, 3))
    if "documents" in cases:
        doc_mask, build = block_mask(document, True)
        report(f"flex document mask ({docs} equal documents)", timed(lambda: flex(q, k, v, block_mask=doc_mask)),
               doc_pairs, blockMaskMs=round(build, 3))
    if "softcap" in cases:
        report("sdpa full", timed(lambda: sdpa(q, k, v)), T * T)
    if "alibi" in cases:
        report("flex ALiBi + causal", timed(lambda: flex(q, k, v, score_mod=alibi, block_mask=causal_mask)),
               causal_pairs)
    if "softcap" in cases:
        report("flex softcap 30", timed(lambda: flex(q, k, v, score_mod=softcap)), T * T)
    if "softcap-causal" in cases:
        report("flex softcap 30 + causal",
               timed(lambda: flex(q, k, v, score_mod=softcap, block_mask=causal_mask)), causal_pairs)
    print(json.dumps({"torch": torch.__version__, "device": torch.cuda.get_device_name()}))


if __name__ == "__main__":
    main()
