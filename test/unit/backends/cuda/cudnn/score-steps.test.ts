/**
 * The score steps every cuDNN graph masks with (src/backends/cuda/cudnn/score-steps.ts), op by op:
 * the bf16/fp16 graphs and the FP8 graphs both build their padding and causal masks from them, so a
 * change here changes what cuDNN is asked to run in all four (cudnn-sdpa-verified.md records the
 * graphs the H200 accepted). Each op reads as "name = mode/precision(x, b, t) axis", its output typed.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { GraphBuilder, type GraphSpec } from '../../../../../src/backends/cuda/cudnn/graph-spec.js';
import { scoreSteps } from '../../../../../src/backends/cuda/cudnn/score-steps.js';
import { fp8ScoreSteps } from '../../../../../src/backends/cuda/fp8/score-steps.js';

const size = { B: 2, T: 3, S: 5, N: 4, K: 2, H: 8 };

function read(spec: GraphSpec): string[] {
  const t = (uid: number | undefined) => (uid === undefined ? '-' : spec.tensors.find((x) => x.uid === uid)!);
  const name = (uid: number | undefined) => {
    const x = t(uid);
    return typeof x === 'string' ? x : x.name;
  };
  return spec.ops.map((op) => {
    assert.equal(op.kind, 'pointwise');
    if (op.kind !== 'pointwise') return '';
    const y = t(op.y);
    assert.ok(typeof y !== 'string');
    const out = `${y.name}:${y.dtype}[${y.dims.join(',')}]/[${y.strides.join(',')}]${y.virtual ? '' : ' memory'}`;
    const axis = op.axis === undefined ? '' : ` axis ${op.axis}`;
    return `${out} = ${op.mode}/${op.precision}(${name(op.x)}, ${name(op.b)}, ${name(op.t)})${axis}`;
  });
}

const SCORES = '[2,4,3,5]/[60,15,5,1]';
const PADDING = [
  `pad_row:int32${SCORES} = gen_index/int32(S, -, -) axis 2`,
  `pad_col:int32${SCORES} = gen_index/int32(S, -, -) axis 3`,
  `pad_row_ok:boolean${SCORES} = cmp_lt/boolean(pad_row, seq_q, -)`,
  `pad_col_ok:boolean${SCORES} = cmp_lt/boolean(pad_col, seq_kv, -)`,
  `pad_keep:boolean${SCORES} = logical_and/boolean(pad_row_ok, pad_col_ok, -)`,
  `pad_select:float${SCORES} = binary_select/float(S, pad_select_fill, pad_keep)`,
];

function graph(build: (g: GraphBuilder, s: number, lengths: { q: number; kv: number }) => void): GraphSpec {
  const g = new GraphBuilder();
  const s = g.virtual('S', 'float', [2, 4, 3, 5], [60, 15, 5, 1]);
  const q = g.io('seq_q', 'int32', [2, 1, 1, 1], [1, 1, 1, 1], { kind: 'seqLenQ' });
  const kv = g.io('seq_kv', 'int32', [2, 1, 1, 1], [1, 1, 1, 1], { kind: 'seqLenKv' });
  build(g, s, { q, kv });
  return g.build();
}

describe('cuDNN score steps (shared by the bf16/fp16 and FP8 graphs)', () => {
  it('padding: row < T_b and col < S_b, then a select of −inf; nothing without lengths', () => {
    const spec = graph((g, s, lengths) => {
      const steps = scoreSteps(g, size);
      assert.equal(steps.padding(s, null), s);
      steps.padding(s, lengths);
    });
    assert.deepEqual(read(spec), PADDING);
    const fill = spec.tensors.find((x) => x.name === 'pad_select_fill')!;
    assert.deepEqual(spec.bindings.get(fill.uid), { kind: 'constant', dtype: 'float', value: -Infinity });
    assert.equal(fill.byValue, true);
  });

  it('indices, and pointwise into given dims or an existing tensor', () => {
    const spec = graph((g, s) => {
      const steps = scoreSteps(g, size);
      const { row, col } = steps.indices('right', s);
      steps.pointwise('sum', 'add', 'float', row, col, { dims: [2, 4, 3, 1] });
      steps.pointwise('again', 'mul', 'float', row, col, { into: s });
    });
    assert.deepEqual(read(spec), [
      `right_row:int32${SCORES} = gen_index/float(S, -, -) axis 2`,
      `right_col:int32${SCORES} = gen_index/float(S, -, -) axis 3`,
      'sum:float[2,4,3,1]/[12,3,1,1] = add/float(right_row, right_col, -)',
      `S:float${SCORES} = mul/float(right_row, right_col, -)`,
    ]);
  });

  it('FP8: padding then top-left causal (row ≥ col), each −inf fill recorded as a role', () => {
    const roles = new Map<number, { kind: string }>();
    const spec = graph((g, s, lengths) => fp8ScoreSteps(g, roles, size).masks(s, lengths, true));
    assert.deepEqual(read(spec), [
      ...PADDING,
      `causal_row:int32${SCORES} = gen_index/float(pad_select, -, -) axis 2`,
      `causal_col:int32${SCORES} = gen_index/float(pad_select, -, -) axis 3`,
      `causal_keep:boolean${SCORES} = cmp_ge/boolean(causal_row, causal_col, -)`,
      `causal_select:float${SCORES} = binary_select/float(pad_select, causal_select_fill, causal_keep)`,
    ]);
    const fills = spec.tensors.filter((x) => x.name.endsWith('_fill')).map((x) => x.uid);
    assert.deepEqual([...roles.keys()], fills);
    assert.ok([...roles.values()].every((r) => r.kind === 'negativeInfinity'));
  });
});
