/**
 * The FP8 path on the GPU: the quantise/dequantise kernels bit for bit against the host's arithmetic,
 * cuDNN's FP8 graph against the float64 FP8 reference fed the same quantised inputs and scales, the
 * amax values fed back into the module's history, and the module's bf16 path against
 * dotProductAttention. Fresh random inputs per run; the seed is printed (ATTNLAB_TEST_SEED replays).
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { attention } from '../../../src/api/attention.js';
import { validateAttention } from '../../../src/api/validate.js';
import { SCALAR_BLOCK_BYTES, SCALAR_SLOTS } from '../../../src/backends/cuda/fp8/graph.js';
import {
  launchCurrentScales,
  launchDequantise,
  launchQuantise3,
} from '../../../src/backends/cuda/fp8/kernels.js';
import { runCudaFp8 } from '../../../src/backends/cuda/fp8/run.js';
import { DeviceDelayedState } from '../../../src/backends/cuda/fp8/state.js';
import { cudaAvailable, getCudaContext } from '../../../src/backends/cuda/runtime/context.js';
import { allocDevice, copyToDevice, copyToHost } from '../../../src/backends/cuda/runtime/memory.js';
import { UnsupportedError } from '../../../src/errors.js';
import { autocast } from '../../../src/te/autocast.js';
import { fp8ReferenceAttention } from '../../../src/te/fp8-reference.js';
import { currentScales, Fp8State } from '../../../src/te/fp8-state.js';
import { DotProductAttention, SequenceDescriptor } from '../../../src/te/module.js';
import type { AttnMaskType } from '../../../src/te/options.js';
import { absMax, dequantiseTensor, quantiseValues } from '../../../src/te/quantise.js';
import { computeScale, DelayedScaling, Float8CurrentScaling } from '../../../src/te/recipe.js';
import { decodeArray } from '../../../src/tensor/dtype.js';
import { randomNormal } from '../../../src/tensor/random.js';
import { Tensor } from '../../../src/tensor/tensor.js';

const cuda = cudaAvailable();
const sm90 = cuda.ok && getCudaContext().properties.computeCapability.major >= 9;
const skip = !cuda.ok ? `no CUDA device: ${cuda.reason}` : sm90 ? false : 'FP8 attention needs sm_90';
const seed = Number(process.env.ATTNLAB_TEST_SEED ?? Date.now() % 1_000_000_000);

const block = (values: Record<number, number>) => {
  const b = new Float32Array(SCALAR_BLOCK_BYTES / 4);
  for (const [slot, v] of Object.entries(values)) b[Number(slot) * 4] = v;
  return copyToDevice(new Uint8Array(b.buffer));
};
const readBlock = (buffer: ReturnType<typeof allocDevice>) => {
  const b = new Float32Array(SCALAR_BLOCK_BYTES / 4);
  copyToHost(buffer, new Uint8Array(b.buffer));
  return (slot: number) => b[slot * 4];
};
const bytesOf = (buffer: ReturnType<typeof allocDevice>, n: number) => {
  const out = new Uint8Array(n);
  copyToHost(buffer, out);
  return out;
};
function errors(a: ArrayLike<number>, b: ArrayLike<number>) {
  let max = 0;
  let sum = 0;
  for (let i = 0; i < a.length; i++) {
    const e = Math.abs(a[i] - b[i]);
    max = Math.max(max, e);
    sum += e;
  }
  return { max, mean: sum / a.length };
}

describe('FP8 on the GPU', { skip }, () => {
  console.log(`fp8 test seed ${seed}`);

  it('quantise3 and dequantise match the host bit for bit (saturation and amax included)', () => {
    // Q's 2.25 M elements outrun one pass of the grid (132 SMs × 8 blocks × 256 threads × 8), so the
    // kernels' unrolled grid-stride loops run a partial last step; K and V fit in one.
    const shapes = [
      [1, 2201, 8, 128],
      [2, 96, 1, 128],
    ];
    // std 40 with scale 16: |x|·16 passes 448 often, so saturation is exercised.
    const [q, k, v] = [shapes[0], shapes[1], shapes[1]].map((s, i) =>
      randomNormal(s, { seed: seed + i, std: 40, dtype: 'bfloat16' }).to('cuda'),
    );
    const scales = [16, 0.75, 3.3];
    const scalars = block({
      [SCALAR_SLOTS.scaleQ]: scales[0],
      [SCALAR_SLOTS.scaleK]: scales[1],
      [SCALAR_SLOTS.scaleV]: scales[2],
    });
    const outs = [q.size, k.size, k.size].map((n) => allocDevice(n));
    launchQuantise3(
      [q.buffer.ptr, k.buffer.ptr, v.buffer.ptr],
      [outs[0].ptr, outs[1].ptr, outs[2].ptr],
      q.size,
      k.size,
      scalars.ptr,
      false,
    );
    const at = readBlock(scalars);
    [q, k, v].forEach((t, z) => {
      const host = quantiseValues(t.toFloat64Array(), t.shape, scales[z]);
      assert.deepEqual(bytesOf(outs[z], t.size), host.tensor.data, `codes of tensor ${z}`);
      assert.equal(at(SCALAR_SLOTS.amaxQ + z), host.amax, `amax of tensor ${z}`);
    });
    // Dequantise Q8 with scale_o = 16 against the host's float32 product rounded to bf16.
    const deqBlock = block({ [SCALAR_SLOTS.scaleO]: scales[0] });
    const out = allocDevice(q.size * 2);
    launchDequantise(outs[0].ptr, out.ptr, q.size, deqBlock.ptr);
    const host = dequantiseTensor(
      Tensor.fromRaw(bytesOf(outs[0], q.size), q.shape, 'float8_e4m3fn'),
      1 / scales[0],
    );
    const device = new Uint16Array(q.size);
    copyToHost(out, new Uint8Array(device.buffer));
    assert.deepEqual(device, host.data);
  });

  it('current scaling computes the scales on the device from this amax', () => {
    const q = randomNormal([1, 32, 2, 64], { seed: seed + 7, dtype: 'bfloat16' }).to('cuda');
    const scalars = block({});
    const outs = [allocDevice(q.size), allocDevice(q.size), allocDevice(q.size)];
    const ptrs = [q.buffer.ptr, q.buffer.ptr, q.buffer.ptr] as const;
    launchQuantise3(ptrs, [outs[0].ptr, outs[1].ptr, outs[2].ptr], q.size, q.size, scalars.ptr, true);
    launchCurrentScales(scalars.ptr, 448, 1);
    const at = readBlock(scalars);
    const a = absMax(q.toFloat64Array());
    const want = currentScales({ q: a, k: a, v: a }, 'float8_e4m3fn');
    assert.equal(at(SCALAR_SLOTS.scaleQ), want.q);
    assert.equal(at(SCALAR_SLOTS.scaleO), want.o);
    assert.equal(at(SCALAR_SLOTS.scaleS), 448);
    assert.equal(at(SCALAR_SLOTS.descaleS), Math.fround(1 / 448));
  });

  const cases: { name: string; mask: AttnMaskType; K: number; lengths?: number[] }[] = [
    { name: 'no mask', mask: 'no_mask', K: 2 },
    { name: 'causal', mask: 'causal', K: 2 },
    { name: 'causal GQA N=4 K=2', mask: 'causal', K: 2 },
    { name: 'padding + causal', mask: 'padding_causal', K: 4, lengths: [256, 150] },
  ];
  for (const [index, c] of cases.entries()) {
    it(`cuDNN FP8 graph vs the float64 FP8 reference: ${c.name}`, () => {
      const [B, T, N, H] = [2, 256, 4, 128];
      const make = (heads: number, s: number) =>
        randomNormal([B, T, heads, H], { seed: s, dtype: 'bfloat16' });
      const [q, k, v] = [
        make(N, seed + 10 * index),
        make(c.K, seed + 10 * index + 1),
        make(c.K, seed + 10 * index + 2),
      ];
      const attn = new DotProductAttention({
        headDim: H,
        numAttentionHeads: N,
        numGqaGroups: c.K,
        attnMaskType: c.mask,
      });
      const recipe = new DelayedScaling({ amaxHistoryLen: 4 });
      const sequenceDescriptor = c.lengths ? SequenceDescriptor.fromSeqLens(c.lengths) : undefined;
      const call = () =>
        autocast({ recipe }, () =>
          attn.apply(q.to('cuda'), k.to('cuda'), v.to('cuda'), { sequenceDescriptor, keepFp8Output: true }),
        );
      const first = call();
      assert.equal(first.backend, 'cudnn-fp8');
      assert.match(first.variant, /fp8/);
      const second = call(); // scales now come from the first call's amax
      const te = (name: 'q' | 'k' | 'v' | 's' | 'o', start = 1) =>
        computeScale(first.fp8!.amax[name], 448, 0, start);
      for (const name of ['q', 'k', 'v'] as const)
        assert.equal(second.fp8!.scales[name], te(name), `scale_${name}`);
      // The caps of Fp8State.delayedScales: scale_s ≤ 448, scale_o ≤ scale_v.
      assert.equal(second.fp8!.scales.s, Math.min(te('s', 448), 448));
      assert.equal(second.fp8!.scales.o, Math.min(te('o'), te('v')));
      const scales = second.fp8!.scales;
      const options = {
        isCausal: c.mask.includes('causal'),
        querySeqLengths: c.lengths,
        keyValueSeqLengths: c.lengths,
      };
      const q8 = quantiseValues(q.toFloat64Array(), q.shape, scales.q);
      const k8 = quantiseValues(k.toFloat64Array(), k.shape, scales.k);
      const v8 = quantiseValues(v.toFloat64Array(), v.shape, scales.v);
      assert.equal(second.fp8!.amax.q, q8.amax);
      const ref = fp8ReferenceAttention(q8, k8, v8, options, scales.o);
      const got = second.output.toFloat64Array();
      const e = errors(got, ref.exact);
      const oMax = absMax(ref.exact);
      console.log(
        `fp8 ${c.name}: max|err| ${e.max.toExponential(3)} mean ${e.mean.toExponential(3)} max|O| ${oMax.toFixed(4)} ` +
          `amax_s ${second.fp8!.amax.s} (ref ${ref.amaxS}) amax_o ${second.fp8!.amax.o} (ref ${ref.amaxO}) ${second.variant}`,
      );
      // e4m3 rounds O to 3 mantissa bits (≤ 2^-4 of |O|max) and P inside the kernel adds about as much.
      assert.ok(e.max <= oMax * 2 ** -3, `max error ${e.max} > ${oMax * 2 ** -3}`);
      assert.ok(e.mean <= oMax * 2 ** -6, `mean error ${e.mean} > ${oMax * 2 ** -6}`);
      assert.ok(Math.abs(second.fp8!.amax.o - ref.amaxO) <= 0.03 * ref.amaxO, 'amax_o');
      assert.ok(Math.abs(second.fp8!.amax.s - ref.amaxS) <= 0.01 * ref.amaxS, 'amax_s');
      // The FP8 codes, dequantised on the host, give the bf16 output bit for bit.
      const o8 = second.output8!;
      const host = dequantiseTensor(o8.tensor.toHost(), o8.scaleInv);
      assert.deepEqual(host.data, second.output.toHost().data);
      if (c.lengths) {
        const rowsPast = got.subarray((1 * T + c.lengths[1]) * N * H, 2 * T * N * H);
        assert.ok(
          rowsPast.every((x) => x === 0),
          'rows past the query length are zeros',
        );
      }
    });
  }

  for (const algo of ['max', 'most_recent'] as const) {
    it(`delayed scaling on the device follows the host rules step by step (${algo}, margin 1, history 3)`, () => {
      // Inputs whose magnitude changes every step, so the amax values, the history and the scales move.
      const [B, T, N, H] = [1, 128, 2, 64];
      const recipe = new DelayedScaling({ amaxHistoryLen: 3, margin: 1, amaxComputeAlgo: algo });
      const attn = new DotProductAttention({ headDim: H, numAttentionHeads: N, attnMaskType: 'causal' });
      const replay = new Fp8State(); // the host rules, fed with the amax values the GPU measured
      const steps = [1, 4, 0.5, 2, 8, 0.25].map((std, i) =>
        [0, 1, 2].map((j) =>
          randomNormal([B, T, N, H], { seed: seed + 100 * i + j, std, dtype: 'bfloat16' }).to('cuda'),
        ),
      );
      const results = steps.map(([q, k, v]) => autocast({ recipe }, () => attn.apply(q, k, v)));
      // Nothing was read back yet: read the reports now, in order, and replay them on the host.
      for (const [i, r] of results.entries()) {
        assert.deepEqual(r.fp8!.scales, replay.delayedScales(recipe), `scales used by step ${i}`);
        replay.record(recipe, r.fp8!.amax, 'float8_e4m3fn');
      }
      const device = attn.fp8State.metas!;
      const host = replay.metas!;
      for (const name of ['q', 'k', 'v', 's', 'o'] as const) {
        assert.equal(device[name].scale, host[name].scale, `scale_${name}`);
        assert.deepEqual(device[name].amaxHistory, host[name].amaxHistory, `history of ${name}`);
      }
      assert.equal(attn.fp8State.steps, steps.length);
      // The host copy is current again; a further GPU step starts from it.
      const next = autocast({ recipe }, () => attn.apply(steps[0][0], steps[0][1], steps[0][2]));
      assert.deepEqual(next.fp8!.scales, replay.delayedScales(recipe));
      for (const t of steps.flat()) t.dispose();
    });
  }

  it('a step pipelined in 2 or 4 batch chunks over two streams is the one-stream step, bit for bit', () => {
    const [B, T, N, K, H] = [4, 256, 4, 2, 128];
    const q = randomNormal([B, T, N, H], { seed: seed + 70, dtype: 'bfloat16' }).to('cuda');
    const k = randomNormal([B, T, K, H], { seed: seed + 71, dtype: 'bfloat16' }).to('cuda');
    const v = randomNormal([B, T, K, H], { seed: seed + 72, std: 3, dtype: 'bfloat16' }).to('cuda');
    const lengths = [256, 200, 97, 256];
    const problem = validateAttention(q, k, v, {
      isCausal: true,
      querySeqLengths: lengths,
      keyValueSeqLengths: lengths,
    });
    const recipe = new DelayedScaling({ amaxHistoryLen: 4 });
    const run = (chunks: number) => {
      const state = new Fp8State();
      const device = state.mirrorFor(recipe, DeviceDelayedState.upload);
      // Three delayed steps (the later ones quantise with scales from the earlier amax), then current.
      const steps = [0, 1, 2].map(() => {
        const r = runCudaFp8({
          problem,
          dtype8: 'float8_e4m3fn',
          scaling: { kind: 'delayed', state: device, margin: 0, mostRecent: false },
          keepFp8Output: false,
          chunks,
        });
        state.deviceStepEnqueued();
        return r;
      });
      const current = runCudaFp8({
        problem,
        dtype8: 'float8_e4m3fn',
        scaling: { kind: 'current' },
        keepFp8Output: false,
        chunks,
      });
      const metas = state.metas!;
      return {
        outputs: [...steps, current].map((r) => r.output.toHost().data),
        reports: [...steps, current].map((r) => ({ scales: r.report.scales, amax: r.report.amax })),
        state: (['q', 'k', 'v', 's', 'o'] as const).map((n) => [
          metas[n].scale,
          Array.from(metas[n].amaxHistory),
        ]),
      };
    };
    const serial = run(1);
    assert.ok(serial.reports[2].amax.s > 0 && serial.reports[2].amax.o > 0);
    for (const chunks of [2, 4]) {
      const pipelined = run(chunks);
      assert.deepEqual(pipelined.reports, serial.reports, `scales and amax, ${chunks} chunks`);
      assert.deepEqual(pipelined.state, serial.state, `scales and histories, ${chunks} chunks`);
      assert.deepEqual(pipelined.outputs, serial.outputs, `outputs, ${chunks} chunks`);
    }
  });

  it('current scaling runs the whole step', () => {
    const [B, T, N, H] = [1, 128, 2, 64];
    const [q, k, v] = [1, 2, 3].map((i) =>
      randomNormal([B, T, N, H], { seed: seed + 50 + i, dtype: 'bfloat16' }).to('cuda'),
    );
    const attn = new DotProductAttention({ headDim: H, numAttentionHeads: N });
    const r = autocast({ recipe: new Float8CurrentScaling() }, () => attn.apply(q, k, v));
    const vMax = absMax(v.toFloat64Array());
    assert.equal(r.fp8!.scales.v, Math.fround(448 / vMax));
    assert.equal(r.fp8!.scales.o, Math.fround(448 / vMax));
    const bf16 = attention(q, k, v, { isCausal: true, implementation: 'cudnn' }).output.toFloat64Array();
    const e = errors(r.output.toFloat64Array(), bf16);
    assert.ok(e.max <= absMax(bf16) * 2 ** -3, `fp8 vs bf16 ${e.max}`);
  });

  it("the module's bf16 path is dotProductAttention's cuDNN result, bit for bit", () => {
    const [B, T, S, N, K, H] = [2, 200, 260, 8, 2, 64];
    const q = randomNormal([B, T, N, H], { seed: seed + 60, dtype: 'bfloat16' }).to('cuda');
    const k = randomNormal([B, S, K, H], { seed: seed + 61, dtype: 'bfloat16' }).to('cuda');
    const v = randomNormal([B, S, K, H], { seed: seed + 62, dtype: 'bfloat16' }).to('cuda');
    const lengths = { q: [200, 120], kv: [260, 99] };
    for (const mask of ['no_mask', 'causal', 'padding_causal', 'causal_bottom_right'] as const) {
      const attn = new DotProductAttention({
        headDim: H,
        numAttentionHeads: N,
        numGqaGroups: K,
        attnMaskType: mask,
      });
      const padding = mask.startsWith('padding');
      const r = attn.apply(q, k, v, {
        sequenceDescriptor: padding ? SequenceDescriptor.fromSeqLens(lengths.q, lengths.kv) : undefined,
      });
      assert.equal(r.backend, 'cudnn');
      const expected = attention(q, k, v, {
        implementation: 'cudnn',
        isCausal: mask !== 'no_mask',
        causalAlignment: mask.endsWith('bottom_right') ? 'bottom_right' : 'top_left',
        querySeqLengths: padding ? lengths.q : undefined,
        keyValueSeqLengths: padding ? lengths.kv : undefined,
      });
      assert.deepEqual(r.output.toHost().data, expected.output.toHost().data, mask);
    }
  });

  it('an unsupported head dim says why and shows the FP8 path; fallback runs bf16', () => {
    const [q, k, v] = [1, 2, 3].map((i) =>
      randomNormal([1, 64, 2, 72], { seed: i, dtype: 'bfloat16' }).to('cuda'),
    );
    const attn = new DotProductAttention({ headDim: 72, numAttentionHeads: 2 });
    assert.throws(
      () => autocast({}, () => attn.forward(q, k, v)),
      (error: unknown) =>
        error instanceof UnsupportedError &&
        /multiple of 16 and at most 256; got H=72/.test(error.message) &&
        /cuDNN FP8 SDPA graph/.test(error.message),
    );
    const r = autocast({ fallback: true }, () => attn.apply(q, k, v));
    assert.equal(r.precision, 'bf16');
    assert.match(r.fallbackReason ?? '', /H=72/);
    assert.deepEqual(decodeArray(r.output.toHost().data, 'bfloat16').length, 64 * 2 * 72);
  });
});
