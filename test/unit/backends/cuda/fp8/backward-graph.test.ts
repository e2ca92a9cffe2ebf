/**
 * cuDNN's FP8 backward graph without cuDNN: its op sequence and tensor types (cudnn-frontend's
 * SDPAFP8BackwardNode order), and the graph interpreted in float64 (test/support/cudnn-graph-eval.ts)
 * against the CPU reference backward. Every scale and descale is a different power of two, so a
 * scale applied in the wrong place, or missing, gives wrong gradients or amax values.
 */
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { attention } from '../../../../../src/api/attention.js';
import { attentionBackward } from '../../../../../src/api/backward.js';
import type {
  Binding,
  GraphSpec,
  MemoryBinding,
  OpSpec,
} from '../../../../../src/backends/cuda/cudnn/graph-spec.js';
import {
  BACKWARD_SLOTS,
  type BackwardScalarName,
  buildFp8BackwardGraph,
  type Fp8BackwardFeatures,
} from '../../../../../src/backends/cuda/fp8/backward-graph.js';
import type { Fp8Role } from '../../../../../src/backends/cuda/fp8/graph.js';
import { randomNormal } from '../../../../../src/tensor/random.js';
import { evaluateGraph } from '../../../../support/cudnn-graph-eval.js';

const base: Fp8BackwardFeatures = {
  B: 2,
  T: 5,
  S: 7,
  N: 4,
  K: 2,
  H: 16,
  causal: false,
  padding: false,
  gradient: 'fp8_e5m2',
};

const token = (op: OpSpec) =>
  op.kind === 'pointwise' ? op.mode : op.kind === 'reduction' ? `reduce_${op.operator}` : op.kind;

describe('the FP8 backward graph (cudnn-frontend SDPAFP8BackwardNode order)', () => {
  test('op sequence: D, S and P, dV, dS, dQ, dK; GQA sums dV and dK over each group', () => {
    const ops = buildFp8BackwardGraph(base).spec.ops.map(token);
    const fp8Matmul = (grouped: boolean) => [
      'matmul',
      ...(grouped ? ['reduce_add'] : []),
      'mul',
      'mul',
      'mul',
      'reduce_amax',
    ];
    assert.deepEqual(ops, [
      ...['mul', 'reduce_add', 'mul', 'mul'], // D = rowsum(dO8∘O8) · descale_dO · descale_O
      ...['matmul', 'mul', 'mul', 'mul', 'sub', 'exp', 'mul'], // S, P, P8
      'reshape',
      ...fp8Matmul(true), // dV
      ...['matmul', 'mul', 'mul', 'sub', 'mul', 'mul', 'reduce_amax', 'mul'], // dS, amax_dP, dS8
      'reshape', // K from Kᵀ
      ...fp8Matmul(false), // dQ
      'reshape',
      ...fp8Matmul(true), // dK
    ]);
    const mha = buildFp8BackwardGraph({ ...base, K: 4 }).spec.ops.map(token);
    assert.equal(mha.filter((t) => t === 'reduce_add').length, 1, 'MHA: only the row sum');
    const causal = buildFp8BackwardGraph({ ...base, causal: true }).spec.ops.map(token);
    assert.deepEqual(causal.slice(8, 12), ['gen_index', 'gen_index', 'cmp_ge', 'binary_select']);
    const padded = buildFp8BackwardGraph({ ...base, causal: true, padding: true }).spec.ops.map(token);
    assert.deepEqual(padded.slice(8, 14), [
      'gen_index',
      'gen_index',
      'cmp_lt',
      'cmp_lt',
      'logical_and',
      'binary_select',
    ]);
  });

  test('types: FP8 operands e4m3, dO8/dS8/gradients in the gradient type, P8 e4m3, all else float', () => {
    for (const gradient of ['fp8_e5m2', 'fp8_e4m3'] as const) {
      const { spec, roles } = buildFp8BackwardGraph({ ...base, padding: true, gradient });
      const byName = new Map(spec.tensors.map((t) => [t.name, t]));
      for (const name of ['Q8', 'K8^T', 'V8^T', 'O8', 'P8', 'P8^T', 'K8'])
        assert.equal(byName.get(name)?.dtype, 'fp8_e4m3', name);
      for (const name of ['dO8', 'dS8', 'dS8^T', 'dQ8', 'dK8', 'dV8'])
        assert.equal(byName.get(name)?.dtype, gradient, name);
      assert.equal(byName.get('softmax_sum')?.virtual, true, 'D stays on chip (no scratch tensor)');
      const memory = spec.tensors.filter((t) => !t.virtual);
      for (const t of memory) assert.ok(roles.has(t.uid), `${t.name} has a role`);
      const slots = memory
        .map((t) => roles.get(t.uid))
        .filter((r): r is Extract<Fp8Role, { kind: 'scalar' }> => r?.kind === 'scalar')
        .map((r) => r.slot)
        .sort((a, b) => a - b);
      assert.deepEqual(slots, [...Array(16).keys()], 'the 16 graph scalars once each, slots 0–15');
      const { T, N, H, S, K, B } = base;
      assert.deepEqual(byName.get('dO8')?.strides, [T * N * H, H, N * H, 1]);
      assert.deepEqual(byName.get('V8^T')?.dims, [B, K, H, S]);
      assert.deepEqual(byName.get('V8^T')?.strides, [S * K * H, H, 1, K * H]);
      assert.deepEqual(byName.get('Stats')?.strides, [N * T, T, 1, 1]);
      const matmuls = spec.ops.filter((op) => op.kind === 'matmul') as Extract<OpSpec, { kind: 'matmul' }>[];
      const lengthOf = (uid: number | undefined) => (uid === undefined ? '-' : roles.get(uid)?.kind);
      assert.deepEqual(
        matmuls.map((m) => [lengthOf(m.mOverride), lengthOf(m.nOverride), lengthOf(m.kOverride)].join('/')),
        [
          'seqLenQ/seqLenKv/-', // S
          'seqLenKv/-/seqLenQ', // dV
          'seqLenQ/seqLenKv/-', // dO·Vᵀ
          'seqLenQ/-/seqLenKv', // dQ
          'seqLenKv/-/seqLenQ', // dK
        ],
      );
    }
  });

  const cases: [string, Partial<Fp8BackwardFeatures>][] = [
    ['GQA', {}],
    ['GQA causal', { causal: true }],
    ['GQA causal + padding', { causal: true, padding: true }],
    ['MHA', { K: 4 }],
  ];
  for (const [name, change] of cases) {
    test(`interpreted in float64 it gives the reference gradients, scaled: ${name}`, () => {
      const f = { ...base, ...change };
      const { B, T, S, N, K, H } = f;
      const seed = 7 + Object.keys(change).length;
      const q = randomNormal([B, T, N, H], { seed, dtype: 'float64' });
      const k = randomNormal([B, S, K, H], { seed: seed + 1, dtype: 'float64' });
      const v = randomNormal([B, S, K, H], { seed: seed + 2, dtype: 'float64' });
      const dO = randomNormal([B, T, N, H], { seed: seed + 3, dtype: 'float64' });
      const lengths = f.padding ? { querySeqLengths: [5, 3], keyValueSeqLengths: [7, 4] } : {};
      const options = { isCausal: f.causal, ...lengths, implementation: 'reference' as const };
      const forward = attention(q, k, v, { ...options, returnLogSumExp: true });
      const want = attentionBackward(q, k, v, forward.output, forward.logSumExp!, dO, options);

      // Memory holds x · s for every FP8 operand; the graph's descale is 1/s.
      const s = { q: 2, k: 4, v: 8, o: 16, dO: 32, S: 64, dP: 128, dQ: 256, dK: 512, dV: 1024 };
      const scalars: Record<BackwardScalarName, number> = {
        descaleQ: 1 / s.q,
        descaleK: 1 / s.k,
        descaleV: 1 / s.v,
        descaleO: 1 / s.o,
        descaleDO: 1 / s.dO,
        descaleS: 1 / s.S,
        descaleDP: 1 / s.dP,
        scaleS: s.S,
        scaleDP: s.dP,
        scaleDQ: s.dQ,
        scaleDK: s.dK,
        scaleDV: s.dV,
        amaxDQ: 0,
        amaxDK: 0,
        amaxDV: 0,
        amaxDP: 0,
        scaleDO: 0,
        amaxDO: 0,
      };
      const amaxBinding: Partial<Record<number, MemoryBinding>> = {
        [BACKWARD_SLOTS.amaxDQ]: 'bias',
        [BACKWARD_SLOTS.amaxDK]: 'dBias',
        [BACKWARD_SLOTS.amaxDV]: 'softmaxSum',
        [BACKWARD_SLOTS.amaxDP]: 'dQueryAccum',
      };
      const memoryBinding: Record<string, MemoryBinding> = {
        q8: 'query',
        k8: 'key',
        v8: 'value',
        o8: 'output',
        stats: 'stats',
        dO8: 'dOutput',
        dQ8: 'dQuery',
        dK8: 'dKey',
        dV8: 'dValue',
        seqLenQ: 'seqLenQ',
        seqLenKv: 'seqLenKv',
      };
      const { spec, roles } = buildFp8BackwardGraph(f);
      const slotName = Object.fromEntries(Object.entries(BACKWARD_SLOTS).map(([n, i]) => [i, n]));
      const bindings = new Map<number, Binding>(spec.bindings);
      for (const [uid, role] of roles) {
        if (role.kind === 'scalar') {
          const amax = amaxBinding[role.slot];
          bindings.set(
            uid,
            amax
              ? { kind: amax }
              : {
                  kind: 'constant',
                  dtype: 'float',
                  value: scalars[slotName[role.slot] as BackwardScalarName],
                },
          );
        } else if (role.kind in memoryBinding) bindings.set(uid, { kind: memoryBinding[role.kind] });
      }
      const scaled = (t: { toFloat64Array(): Float64Array }, by: number) =>
        t.toFloat64Array().map((x) => x * by);
      // Stats as cuDNN's (B,N,T); a padded row's −inf becomes 0 (cuDNN skips those rows, the
      // interpreter does not, and exp(−inf − 0) = 0 keeps them out of the amax).
      const lse = forward.logSumExp!.toFloat64Array();
      const stats = new Float64Array(B * N * T);
      for (let b = 0; b < B; b++)
        for (let t = 0; t < T; t++)
          for (let n = 0; n < N; n++) {
            const x = lse[(b * T + t) * N + n];
            stats[(b * N + n) * T + t] = Number.isFinite(x) ? x : 0;
          }
      const evaluated = evaluateGraph({ ...spec, bindings } as GraphSpec, {
        memory: {
          query: scaled(q, s.q),
          key: scaled(k, s.k),
          value: scaled(v, s.v),
          output: scaled(forward.output, s.o),
          dOutput: scaled(dO, s.dO),
          stats,
          ...(f.padding ? { seqLenQ: Float64Array.from([5, 3]), seqLenKv: Float64Array.from([7, 4]) } : {}),
        },
        scale: 1 / Math.sqrt(H),
      });
      const w = evaluated.written;
      const check = (got: Float64Array | undefined, expected: Float64Array, by: number, what: string) => {
        assert.ok(got, what);
        let err = 0;
        let max = 0;
        for (let i = 0; i < expected.length; i++) {
          err = Math.max(err, Math.abs(got[i] / by - expected[i]));
          max = Math.max(max, Math.abs(expected[i]));
        }
        assert.ok(err <= 1e-6 * Math.max(1, max), `${what}: max error ${err}`);
        return max;
      };
      const maxDQ = check(w.dQuery, want.dQuery.toFloat64Array(), s.dQ, 'dQ');
      const maxDK = check(w.dKey, want.dKey.toFloat64Array(), s.dK, 'dK');
      const maxDV = check(w.dValue, want.dValue.toFloat64Array(), s.dV, 'dV');
      // (1e-6: the log-sum-exp is float32.) Each amax is taken after the descales and before the
      // scale: in the gradients' own units.
      assert.ok(Math.abs(w.bias![0] - maxDQ) < 1e-6 * maxDQ, 'amax_dQ');
      assert.ok(Math.abs(w.dBias![0] - maxDK) < 1e-6 * maxDK, 'amax_dK');
      assert.ok(Math.abs(w.softmaxSum![0] - maxDV) < 1e-6 * maxDV, 'amax_dV');
      assert.ok(w.dQueryAccum![0] > 0 && Number.isFinite(w.dQueryAccum![0]), 'amax_dP');
    });
  }
});
