/**
 * The FP8 backward on the GPU: the dO quantise and gradient dequantise kernels bit for bit against the
 * host's arithmetic (e5m2 and e4m3), cuDNN's FP8 backward graph against the CPU emulation of that
 * graph fed the GPU's own residuals and scales, and the module's FP8 backward against the float64
 * reference gradients within the FP8 tolerance derived in test/unit/te/fp8-backward.test.ts
 * (relative Frobenius error ≤ 0.2). A graph cuDNN refuses fails here with cuDNN's reasons printed.
 * Fresh random inputs per run; the seed is printed (ATTNLAB_TEST_SEED replays).
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { attention } from '../../../src/api/attention.js';
import { attentionBackward } from '../../../src/api/backward.js';
import { validateAttention } from '../../../src/api/validate.js';
import { runFp8BackwardEmulated } from '../../../src/backends/cpu/fp8-backward-emulation.js';
import { BACKWARD_BLOCK_BYTES, BACKWARD_SLOTS } from '../../../src/backends/cuda/fp8/backward-graph.js';
import { runCudaFp8Backward } from '../../../src/backends/cuda/fp8/backward-run.js';
import {
  launchDequantiseGradients,
  launchQuantiseGradient,
} from '../../../src/backends/cuda/fp8/gradient-kernels.js';
import { cudaAvailable, getCudaContext } from '../../../src/backends/cuda/runtime/context.js';
import { allocDevice, copyToDevice, copyToHost } from '../../../src/backends/cuda/runtime/memory.js';
import type { AttentionOptions } from '../../../src/backends/problem.js';
import { autocast } from '../../../src/te/autocast.js';
import { runFp8Step } from '../../../src/te/fp8-path.js';
import { Fp8State } from '../../../src/te/fp8-state.js';
import { DotProductAttention } from '../../../src/te/module.js';
import { absMax, dequantiseTensor, quantiseValues } from '../../../src/te/quantise.js';
import { DelayedScaling } from '../../../src/te/recipe.js';
import type { Fp8DType } from '../../../src/tensor/dtype.js';
import { randomNormal } from '../../../src/tensor/random.js';
import { Tensor } from '../../../src/tensor/tensor.js';

const cuda = cudaAvailable();
const sm90 = cuda.ok && getCudaContext().properties.computeCapability.major >= 9;
const skip = !cuda.ok ? `no CUDA device: ${cuda.reason}` : sm90 ? false : 'FP8 attention needs sm_90';
const seed = Number(process.env.ATTNLAB_TEST_SEED ?? Date.now() % 1_000_000_000);

function relativeError(got: Tensor, want: Tensor): number {
  const [a, b] = [got.toFloat64Array(), want.toFloat64Array()];
  let [err, norm] = [0, 0];
  for (let i = 0; i < a.length; i++) {
    err += (a[i] - b[i]) ** 2;
    norm += b[i] ** 2;
  }
  return Math.sqrt(err / norm);
}

const block = (values: Partial<Record<keyof typeof BACKWARD_SLOTS, number>>) => {
  const b = new Float32Array(BACKWARD_BLOCK_BYTES / 4);
  for (const [name, v] of Object.entries(values))
    b[BACKWARD_SLOTS[name as keyof typeof BACKWARD_SLOTS] * 4] = v;
  return copyToDevice(new Uint8Array(b.buffer));
};

console.log(`fp8 backward test seed ${seed}`);

// Three top-level suites, so that a run cut short still reports the ones that finished.
describe('FP8 backward kernels on the GPU', { skip }, () => {
  for (const dtype of ['float8_e5m2', 'float8_e4m3fn'] as Fp8DType[]) {
    it(`dO quantise and gradient dequantise match the host bit for bit (${dtype})`, () => {
      // std 3000 with scale 32: |x|·32 passes 57344 (and 448) often, so saturation is exercised.
      const dO = randomNormal([1, 300, 8, 128], { seed, std: 3000, dtype: 'bfloat16' }).to('cuda');
      const scalars = block({ scaleDO: 32, scaleDQ: 2, scaleDK: 0.5, scaleDV: 3.3 });
      const codes = allocDevice(dO.size);
      launchQuantiseGradient(dO.buffer.ptr, codes.ptr, dO.size, scalars.ptr, dtype);
      const host = quantiseValues(dO.toFloat64Array(), dO.shape, 32, dtype);
      const got = new Uint8Array(dO.size);
      copyToHost(codes, got);
      assert.deepEqual(got, host.tensor.data);
      const values = new Float32Array(BACKWARD_BLOCK_BYTES / 4);
      copyToHost(scalars, new Uint8Array(values.buffer));
      assert.equal(values[BACKWARD_SLOTS.amaxDO * 4], host.amax);
      // The same codes as dQ8, dK8 and dV8, each with its own scale.
      const outs = [0, 1, 2].map(() => allocDevice(dO.size * 2));
      launchDequantiseGradients(
        [codes.ptr, codes.ptr, codes.ptr],
        [outs[0].ptr, outs[1].ptr, outs[2].ptr],
        dO.size,
        dO.size,
        scalars.ptr,
        dtype,
      );
      [2, 0.5, 3.3].forEach((scale, z) => {
        const want = dequantiseTensor(Tensor.fromRaw(got, dO.shape, dtype), 1 / Math.fround(scale));
        const device = new Uint16Array(dO.size);
        copyToHost(outs[z], new Uint8Array(device.buffer));
        assert.deepEqual(device, want.data, `gradient ${z}`);
      });
    });
  }
});

describe('FP8 backward graph on the GPU', { skip }, () => {
  const cases: { name: string; B: number; T: number; N: number; K: number; options: AttentionOptions }[] = [
    { name: 'causal GQA N=4 K=2', B: 1, T: 256, N: 4, K: 2, options: { isCausal: true } },
    {
      name: 'padding, MHA',
      B: 2,
      T: 128,
      N: 2,
      K: 2,
      options: { querySeqLengths: [128, 77], keyValueSeqLengths: [128, 77] },
    },
  ];
  for (const [index, c] of cases.entries()) {
    it(`cuDNN FP8 backward graph vs its CPU emulation and float64: ${c.name}`, () => {
      const H = 128;
      const make = (heads: number, s: number) =>
        randomNormal([c.B, c.T, heads, H], { seed: s, dtype: 'bfloat16' });
      const s0 = seed + 100 * index;
      const [q, k, v, dO] = [make(c.N, s0), make(c.K, s0 + 1), make(c.K, s0 + 2), make(c.N, s0 + 3)];
      const [qd, kd, vd, dOd] = [q, k, v, dO].map((t) => t.to('cuda'));
      const recipe = new DelayedScaling({ amaxHistoryLen: 4 });
      const problem = validateAttention(qd, kd, vd, c.options);
      const state = new Fp8State();
      // Two steps: the first (TE's scales of 1) fills the histories the second scales from.
      let result: ReturnType<typeof runCudaFp8Backward> | undefined;
      let emulated: ReturnType<typeof runFp8BackwardEmulated> | undefined;
      for (let step = 0; step < 2; step++) {
        const forward = runFp8Step(problem, recipe, state, false, true);
        const r = forward.residuals!;
        const scales = state.backwardScales(recipe);
        const b = { problem, residuals: r, forwardScales: forward.report.scales, dOutput: dOd, scales };
        try {
          result = runCudaFp8Backward({ ...b, dtype8: 'float8_e5m2' });
        } catch (error) {
          console.log(`cuDNN refused the FP8 backward graph (${c.name}): ${(error as Error).message}`);
          throw error;
        }
        state.recordBackward(recipe, result.amax);
        if (step === 1) {
          const host = (t: Tensor) => t.to('cpu');
          const hostProblem = validateAttention(q, k, v, c.options);
          emulated = runFp8BackwardEmulated({
            ...b,
            problem: hostProblem,
            residuals: { q8: host(r.q8), k8: host(r.k8), v8: host(r.v8), o8: host(r.o8), logSumExp: null },
            dOutput: dO,
            dtype8: 'float8_e5m2',
          });
          console.log(`${c.name}: forward ${forward.variant}; backward ${result.variant}; scales`, scales);
        }
      }
      const f = attention(q, k, v, { ...c.options, implementation: 'reference', returnLogSumExp: true });
      const want = attentionBackward(q, k, v, f.output, f.logSumExp!, dO, {
        ...c.options,
        implementation: 'reference',
      });
      const rows: string[] = [];
      for (const [name, g] of [
        ['dQuery', 'dQ'],
        ['dKey', 'dK'],
        ['dValue', 'dV'],
      ] as const) {
        const gpu = result![name].to('cpu');
        const vsEmulation = relativeError(gpu, emulated![name]);
        const vsReference = relativeError(gpu, want[name]);
        const emulationVsReference = relativeError(emulated![name], want[name]);
        rows.push(
          `${name}: gpu-vs-emulation ${vsEmulation.toFixed(4)}, gpu-vs-float64 ${vsReference.toFixed(4)}, ` +
            `emulation-vs-float64 ${emulationVsReference.toFixed(4)}, amax gpu ${result!.amax[g].toPrecision(5)} ` +
            `emulated ${emulated!.amax[g].toPrecision(5)}`,
        );
        assert.ok(Number.isFinite(vsReference), `${name} finite`);
        assert.ok(vsReference <= 0.2, `${name}: relative error ${vsReference} vs float64`);
        assert.ok(vsEmulation <= 0.1, `${name}: relative error ${vsEmulation} vs the emulation`);
        const ratio = result!.amax[g] / emulated!.amax[g];
        assert.ok(ratio > 0.9 && ratio < 1.1, `amax_${g} ${result!.amax[g]} vs ${emulated!.amax[g]}`);
      }
      rows.push(`amax_dP gpu ${result!.amax.dP} emulated ${emulated!.amax.dP}; amax_dO ${result!.amax.dO}`);
      console.log(`${c.name}\n  ${rows.join('\n  ')}`);
      assert.equal(result!.amax.dO, absMax(dO.toFloat64Array()));
      const dP = result!.amax.dP / emulated!.amax.dP;
      assert.ok(dP > 0.9 && dP < 1.1, `amax_dP ${result!.amax.dP} vs ${emulated!.amax.dP}`);
      if (c.options.querySeqLengths) {
        const dq = result!.dQuery.toFloat64Array();
        assert.ok(
          dq.slice((c.T + 77) * c.N * H).every((x) => x === 0),
          'padded rows have zero dQ',
        );
      }
    });
  }
});

describe('FP8 backward of the module on the GPU', { skip }, () => {
  it('under autocast: FP8 backward, then one timing line at B=1, T=S=1024, N=8, H=128 causal', () => {
    const [B, T, N, H] = [1, 1024, 8, 128];
    const [q, k, v, dO] = [1, 2, 3, 4].map((i) =>
      randomNormal([B, T, N, H], { seed: seed + i, dtype: 'bfloat16' }).to('cuda'),
    );
    const attn = new DotProductAttention({ headDim: H, numAttentionHeads: N, attnMaskType: 'causal' });
    const recipe = new DelayedScaling({ amaxHistoryLen: 16 });
    const fp8 = () => autocast({ recipe }, () => attn.backward(q, k, v, dO));
    const bf16 = () => attn.backward(q, k, v, dO);
    const time = (f: () => ReturnType<typeof fp8>) => {
      f(); // plan builds, first-use costs
      const started = performance.now();
      let last = f();
      for (let i = 0; i < 2; i++) last = f();
      last.dQuery.toFloat64Array(); // waits for the GPU
      return { ms: (performance.now() - started) / 3, last };
    };
    const a = time(fp8);
    const b = time(bf16);
    assert.equal(a.last.precision, 'fp8');
    const e = relativeError(a.last.dQuery.to('cpu'), b.last.dQuery.to('cpu'));
    console.log(
      `module backward (forward re-run + backward, host-timed, 3 calls): fp8 ${a.ms.toFixed(2)} ms, bf16 ` +
        `${b.ms.toFixed(2)} ms; fp8 dQ vs bf16 dQ relative error ${e.toFixed(4)}; ${a.last.variant}`,
    );
    assert.ok(e <= 0.2, `fp8 vs bf16 dQ ${e}`);
  });
});
