import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import type { OpSpec } from '../../../../../src/backends/cuda/cudnn/graph-spec.js';
import { buildFp8Graph, SCALAR_SLOTS } from '../../../../../src/backends/cuda/fp8/graph.js';

const base = { B: 2, T: 128, S: 256, N: 8, K: 2, H: 64, causal: false, padding: false };

/** One token per op: the op sequence of §7.1 of cudnn-sdpa-verified.md reads as these strings. */
function shape(ops: readonly OpSpec[]): string[] {
  return ops.map((op) =>
    op.kind === 'pointwise' ? op.mode : op.kind === 'reduction' ? `reduce_${op.operator}` : op.kind,
  );
}

describe('the FP8 SDPA graph (structure as verified on the H200)', () => {
  test('18 ops in cudnn-frontend order without masks, 22 with causal, 28 with causal + padding', () => {
    const plain = shape(buildFp8Graph(base).spec.ops);
    assert.deepEqual(plain, [
      'matmul',
      'mul',
      'mul',
      'mul',
      'reduce_max',
      'sub',
      'exp',
      'reduce_add',
      'log',
      'add',
      'div',
      'reduce_amax',
      'mul',
      'matmul',
      'mul',
      'mul',
      'mul',
      'reduce_amax',
    ]);
    const causal = shape(buildFp8Graph({ ...base, causal: true }).spec.ops);
    assert.equal(causal.length, 22);
    assert.deepEqual(causal.slice(4, 8), ['gen_index', 'gen_index', 'cmp_ge', 'binary_select']);
    const padded = shape(buildFp8Graph({ ...base, causal: true, padding: true }).spec.ops);
    assert.equal(padded.length, 28);
    assert.deepEqual(padded.slice(4, 9), ['gen_index', 'gen_index', 'cmp_lt', 'cmp_lt', 'logical_and']);
  });

  test('FP8 tensors: Q8, K8ᵀ, V8, O8 in memory and P8 virtual; Q8 and O8 declared as (B,T,N,H) views', () => {
    const { spec } = buildFp8Graph(base);
    const byName = new Map(spec.tensors.map((t) => [t.name, t]));
    for (const name of ['Q8', 'K8^T', 'V8', 'O8']) {
      assert.equal(byName.get(name)?.dtype, 'fp8_e4m3', name);
      assert.equal(byName.get(name)?.virtual, false, name);
    }
    assert.equal(byName.get('P8')?.dtype, 'fp8_e4m3');
    assert.equal(byName.get('P8')?.virtual, true);
    const { T, N, H, S, K } = base;
    assert.deepEqual(byName.get('Q8')?.strides, [T * N * H, H, N * H, 1]);
    assert.deepEqual(byName.get('K8^T')?.dims, [base.B, K, H, S]);
    assert.deepEqual(byName.get('K8^T')?.strides, [S * K * H, H, 1, K * H]);
    assert.deepEqual(byName.get('X')?.strides, [N * T * H, T * H, H, 1]);
  });

  test('every non-virtual tensor has a role; the eight FP8 scalars sit in their slots', () => {
    const { spec, roles } = buildFp8Graph({ ...base, padding: true });
    const memory = spec.tensors.filter((t) => !t.virtual);
    for (const t of memory) assert.ok(roles.has(t.uid), `${t.name} has a role`);
    const slots = memory
      .map((t) => roles.get(t.uid))
      .filter((r) => r?.kind === 'scalar')
      .map((r) => (r as { slot: number }).slot)
      .sort((a, b) => a - b);
    assert.deepEqual(slots, [0, 1, 2, 3, 4, 5, 6, 7]);
    const amax = spec.ops.filter((op) => op.kind === 'reduction' && op.operator === 'amax');
    const slotOf = (uid: number) => (roles.get(uid) as { slot: number }).slot;
    assert.deepEqual(
      amax.map((op) => slotOf((op as { y: number }).y)),
      [SCALAR_SLOTS.amaxS, SCALAR_SLOTS.amaxO],
    );
    // Padding needs the matmul overrides too: bmm1 M/N and bmm2 M/K by the length tensors.
    const [bmm1, bmm2] = spec.ops.filter((op) => op.kind === 'matmul') as Extract<
      OpSpec,
      { kind: 'matmul' }
    >[];
    assert.ok(bmm1.mOverride && bmm1.nOverride && !bmm1.kOverride);
    assert.ok(bmm2.mOverride && bmm2.kOverride && !bmm2.nOverride);
  });
});
