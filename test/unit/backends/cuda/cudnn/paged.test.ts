/**
 * The cudnn backend's paged KV cache and packed (ragged) sequences, without cuDNN: the composite
 * graph attnlab would hand to cuDNN (page tables, PAGED_CACHE_LOAD, ragged offsets) interpreted in
 * float64 must give what the reference gives for the same paged or packed call, with the packed
 * log-sum-exp and empty rows done as the backend does them; and the support rules of each cuDNN
 * version refuse, with the reason, what that version cannot run.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { attention } from '../../../../../src/api/attention.js';
import { validateAttention } from '../../../../../src/api/validate.js';
import { type CudnnEnvironment, describeSdpa } from '../../../../../src/backends/cuda/cudnn/features.js';
import { emptyPackedRuns, pageTableForCudnn } from '../../../../../src/backends/cuda/cudnn/paged-call.js';
import { buildSdpaGraph } from '../../../../../src/backends/cuda/cudnn/sdpa-graph.js';
import type { AttentionOptions, AttentionProblem, ProblemSize } from '../../../../../src/backends/problem.js';
import { reloadConfig } from '../../../../../src/config.js';
import { randomNormal } from '../../../../../src/tensor/random.js';
import { Tensor } from '../../../../../src/tensor/tensor.js';
import { evaluateGraph, H200, maxError } from '../../../../support/cudnn-graph-eval.js';
import { pack, pagedCopy, sizes } from '../../../../support/kv-layouts.js';

interface LayoutCase extends ProblemSize {
  name: string;
  Hv?: number;
  kvLengths: number[];
  /** Packs the query with these lengths; a dense query takes them as querySeqLengths when given. */
  qLengths?: number[];
  packedQuery?: boolean;
  /** A paged cache of this block size; otherwise key/value are packed when packedKv, else dense. */
  blockSize?: number;
  packedKv?: boolean;
  options?: AttentionOptions;
}

/** The case's inputs and options as a user would pass them, table rows padded with −1. */
function build(c: LayoutCase, seed: number) {
  const Hv = c.Hv ?? c.H;
  const q = randomNormal([c.B, c.T, c.N, c.H], { seed, dtype: 'bfloat16' });
  const k = randomNormal([c.B, c.S, c.K, c.H], { seed: seed + 1, dtype: 'bfloat16' });
  const v = randomNormal([c.B, c.S, c.K, Hv], { seed: seed + 2, dtype: 'bfloat16' });
  const options: AttentionOptions = { ...c.options, returnLogSumExp: true, implementation: 'cudnn' };
  let [query, key, value] = [q, k, v];
  if (c.packedQuery && c.qLengths) {
    const packed = pack(q, c.qLengths);
    query = packed.tensor;
    Object.assign(options, { querySeqOffsets: packed.offsets });
  } else if (c.qLengths) Object.assign(options, { querySeqLengths: c.qLengths });
  if (c.blockSize) {
    const pk = pagedCopy(k, c.blockSize, seed + 3);
    const pv = pagedCopy(v, c.blockSize, seed + 3);
    const table = pk.table.map((row, b) =>
      row.map((block, m) => (m < Math.ceil(c.kvLengths[b] / (c.blockSize as number)) ? block : -1)),
    );
    [key, value] = [pk.pool, pv.pool];
    Object.assign(options, { blockTable: table, keyValueSeqLengths: c.kvLengths });
  } else if (c.packedKv) {
    const [pk, pv] = [pack(k, c.kvLengths), pack(v, c.kvLengths)];
    [key, value] = [pk.tensor, pv.tensor];
    Object.assign(options, { keyValueSeqOffsets: pk.offsets });
  } else Object.assign(options, { keyValueSeqLengths: c.kvLengths });
  return { query, key, value, options };
}

/** Whether row t of sequence b sees a key, straight from the definition (no mask in these cases). */
function seesKey(p: AttentionProblem, b: number, t: number): boolean {
  const Tb = p.querySeqLengths?.[b] ?? p.T;
  const Sb = p.keyValueSeqLengths?.[b] ?? p.S;
  const d = p.alignment === 'bottom_right' ? Sb - Tb : 0;
  const right = p.causal ? Math.min(0, p.window?.right ?? Infinity) : (p.window?.right ?? Infinity);
  const left = p.window?.left ?? Infinity;
  for (let j = 0; j < Sb; j++) if (j <= t + d + right && j >= t + d - left) return true;
  return false;
}

function checkCase(c: LayoutCase, seed: number): void {
  const { query, key, value, options } = build(c, seed);
  const p = validateAttention(query, key, value, options);
  const d = describeSdpa(p, H200);
  assert.ok(d.ok, d.ok ? '' : d.reason);
  const f = d.features;
  assert.equal(f.graph, 'composite');
  assert.equal(f.padding, true);
  const spec = buildSdpaGraph(f);
  const { B, T, N, Hv } = p;
  const qOffsets = p.packed?.querySeqOffsets ?? null;
  const kvOffsets = p.packed?.keyValueSeqOffsets ?? null;
  const scaled = (offsets: Int32Array | null, width: number) =>
    offsets ? Float64Array.from(offsets, (o) => o * width) : undefined;
  const rows = qOffsets ? qOffsets[B] : B * T;
  const got = evaluateGraph(spec, {
    scale: p.scale,
    memory: {
      query: p.query.toFloat64Array(),
      key: p.key.toFloat64Array(),
      value: p.value.toFloat64Array(),
      bias: p.bias?.tensor.toFloat64Array(),
      seqLenQ: Float64Array.from(p.querySeqLengths ?? new Array(B).fill(T)),
      seqLenKv: Float64Array.from(p.keyValueSeqLengths ?? new Array(B).fill(p.S)),
      pageTable: p.paged ? Float64Array.from(pageTableForCudnn(p)) : undefined,
      raggedQuery: scaled(qOffsets, N * p.H),
      raggedOutput: scaled(qOffsets, N * Hv),
      raggedKey: scaled(kvOffsets, p.K * p.H),
      raggedValue: scaled(kvOffsets, p.K * Hv),
    },
    outputElements: { output: rows * N * Hv },
  });
  const stats = got.stats as Float64Array;
  // The backend's steps after cuDNN: pack the (B,T,N) log-sum-exp, clear rows that see no key.
  const lse = new Float64Array(rows * N);
  const rowOf = (b: number, t: number) => (qOffsets ? qOffsets[b] + t : b * T + t);
  const valid = (b: number) => p.querySeqLengths?.[b] ?? T;
  for (let b = 0; b < B; b++)
    for (let t = 0; t < valid(b); t++)
      for (let n = 0; n < N; n++) lse[rowOf(b, t) * N + n] = stats[(b * T + t) * N + n];
  const empty = new Set<number>();
  for (let b = 0; b < B; b++)
    for (let t = 0; t < valid(b); t++) if (!seesKey(p, b, t)) empty.add(rowOf(b, t));
  if (qOffsets) {
    const runs = emptyPackedRuns(p, f.right ?? d.prepare.foldedRight, f.left, f.alignment === 'bottom_right');
    const fromRuns = new Set(
      runs.flatMap(([from, to]) => Array.from({ length: to - from }, (_, i) => from + i)),
    );
    assert.deepEqual(
      [...fromRuns].sort((a, b) => a - b),
      [...empty].sort((a, b) => a - b),
      'empty packed rows',
    );
  }
  if (empty.size > 0) assert.ok(d.prepare.fixEmptyRows, 'rows that see no key exist: the fix must run');
  for (const row of empty) {
    got.output.fill(0, row * N * Hv, (row + 1) * N * Hv);
    lse.fill(Number.NEGATIVE_INFINITY, row * N, (row + 1) * N);
  }
  const exact = (t: Tensor) => t.astype('float64');
  const want = attention(exact(query), exact(key), exact(value), {
    ...options,
    bias: options.bias ? exact(options.bias) : undefined,
    implementation: 'reference',
  });
  assert.deepEqual(want.output.shape, qOffsets ? [rows, N, Hv] : [B, T, N, Hv]);
  const wantOut = want.output.toFloat64Array();
  // The reference returns its log-sum-exp in float32.
  const wantLse = (want.logSumExp as Tensor).toFloat64Array();
  // Rows past a dense query's lengths are zeros (cuDNN writes them); compare the valid rows.
  for (let b = 0; b < B; b++)
    for (let t = 0; t < valid(b); t++) {
      const r = rowOf(b, t);
      const error = maxError(
        got.output.subarray(r * N * Hv, (r + 1) * N * Hv),
        wantOut.subarray(r * N * Hv, (r + 1) * N * Hv),
      );
      assert.ok(error < 1e-9, `O row (b=${b}, t=${t}) differs from the reference by ${error}`);
      for (let n = 0; n < N; n++) {
        const [g, w] = [lse[r * N + n], wantLse[r * N + n]];
        assert.ok(
          g === w || Math.abs(g - w) <= 1e-6 * (1 + Math.abs(w)),
          `lse (b=${b}, t=${t}, n=${n}) ${g} vs ${w}`,
        );
      }
    }
}

const decode: AttentionOptions = { isCausal: true, causalAlignment: 'bottom_right' };

const CASES: LayoutCase[] = [
  {
    name: 'paged 16, GQA 4:1, one token, lengths 37/1/0/64',
    ...sizes(4, 1, 70, 8, 2, 16),
    kvLengths: [37, 1, 0, 64],
    blockSize: 16,
    options: decode,
  },
  {
    name: 'paged 64, MQA, one token, non-causal',
    ...sizes(3, 1, 150, 4, 1, 16),
    kvLengths: [150, 65, 1],
    blockSize: 64,
  },
  {
    name: 'paged 16, 3 new tokens (causal mask kept), query lengths 3/1',
    ...sizes(2, 3, 40, 4, 2, 16),
    Hv: 24,
    kvLengths: [40, 9],
    qLengths: [3, 1],
    blockSize: 16,
    options: decode,
  },
  {
    name: 'paged 64, window [8, 0], 2 tokens',
    ...sizes(2, 2, 90, 2, 2, 16),
    kvLengths: [90, 30],
    blockSize: 64,
    options: { ...decode, localWindowSize: [8, 0] },
  },
  {
    name: 'packed query and key/value, causal bottom-right, lengths with 0',
    ...sizes(4, 7, 30, 4, 2, 16),
    qLengths: [1, 5, 0, 7],
    kvLengths: [20, 5, 3, 30],
    packedQuery: true,
    packedKv: true,
    options: decode,
  },
  {
    name: 'packed query on a paged cache (a sequence without keys: empty rows)',
    ...sizes(3, 3, 20, 4, 1, 16),
    qLengths: [2, 0, 3],
    kvLengths: [17, 4, 0],
    packedQuery: true,
    blockSize: 16,
    options: decode,
  },
  {
    name: 'packed query, T_b > S_b bottom-right: a prefix of rows sees nothing',
    ...sizes(2, 5, 3, 2, 2, 16),
    qLengths: [5, 2],
    kvLengths: [2, 3],
    packedQuery: true,
    packedKv: true,
    options: decode,
  },
  {
    name: 'packed query, top-left window [1, 0]: a suffix of rows sees nothing',
    ...sizes(1, 6, 3, 2, 1, 16),
    qLengths: [6],
    kvLengths: [3],
    packedQuery: true,
    packedKv: true,
    options: { isCausal: true, localWindowSize: [1, 0] },
  },
  {
    name: 'packed query, dense key/value with lengths, bias (1,N,T,S)',
    ...sizes(2, 4, 12, 2, 2, 16),
    qLengths: [4, 3],
    kvLengths: [12, 7],
    packedQuery: true,
    options: { bias: randomNormal([1, 2, 4, 12], { seed: 5, dtype: 'bfloat16' }) },
  },
];

describe('cudnn paged and packed graphs, interpreted in float64', () => {
  CASES.forEach((c, i) => {
    it(c.name, () => checkCase(c, 100 + 10 * i));
  });
});

/** A paged decode step (B=2, T=1, S=40, block size 16), with `c` overriding any of it. */
function pagedProblem(c: Partial<LayoutCase> = {}) {
  const base: LayoutCase = {
    name: '',
    ...sizes(2, 1, 40, 4, 2, 16),
    kvLengths: [40, 3],
    blockSize: 16,
    options: decode,
    ...c,
  };
  const { query, key, value, options } = build(base, 7);
  return validateAttention(query, key, value, options);
}

describe('cudnn paged and packed graph structure', () => {
  const paged = pagedProblem;
  const featuresOf = (p: AttentionProblem, env: CudnnEnvironment = H200) => {
    const d = describeSdpa(p, env);
    assert.ok(d.ok, d.ok ? '' : d.reason);
    return d.features;
  };

  it('loads K before Q·Kᵀ and V before P·V through the page tables, from containers over the pools', () => {
    const f = featuresOf(paged());
    assert.deepEqual(f.paged, { numBlocks: 2 * 3 + 3, blockSize: 16, maxBlocksPerSeq: 3 });
    const spec = buildSdpaGraph(f);
    const byName = (name: string) => spec.tensors.find((t) => t.name === name)!;
    const kinds = spec.ops.map((op) => op.kind);
    assert.equal(kinds[0], 'paged_cache_load');
    assert.equal(kinds[1], 'matmul');
    assert.deepEqual(kinds.slice(-2), ['paged_cache_load', 'matmul']);
    assert.deepEqual(byName('K_container').dims, [9, 2, 16, 16]);
    assert.deepEqual(byName('K_container').strides, [16 * 2 * 16, 16, 2 * 16, 1]);
    for (const name of ['page_table_k', 'page_table_v']) {
      assert.equal(byName(name).dtype, 'int32');
      assert.deepEqual(byName(name).dims, [2, 1, 3, 1]);
      assert.equal(spec.bindings.get(byName(name).uid)?.kind, 'pageTable');
    }
    const load = spec.ops[0] as Extract<(typeof spec.ops)[number], { kind: 'paged_cache_load' }>;
    assert.equal(spec.bindings.get(load.sequence)?.kind, 'seqLenKv');
    assert.deepEqual(byName('K^T_loaded').dims, [2, 2, 16, 48]);
    assert.equal(byName('K^T_loaded').virtual, true);
  });

  it('a decode step (bottom-right, T = 1) needs no causal mask ops; three new tokens keep them', () => {
    const one = featuresOf(paged());
    assert.equal(one.right, null);
    assert.ok(!buildSdpaGraph(one).tensors.some((t) => t.name === 'right_select'));
    const three = featuresOf(paged({ T: 3 }));
    assert.equal(three.right, 0);
    assert.ok(buildSdpaGraph(three).tensors.some((t) => t.name === 'right_select'));
  });

  it('packed tensors carry int64 element offsets (int32 before cuDNN 9.6), made before the tensor', () => {
    const c: LayoutCase = {
      name: '',
      ...sizes(2, 3, 5, 2, 1, 16),
      qLengths: [3, 1],
      kvLengths: [5, 2],
      packedQuery: true,
      packedKv: true,
    };
    const { query, key, value, options } = build(c, 3);
    const p = validateAttention(query, key, value, options);
    const f = featuresOf(p);
    assert.deepEqual(f.ragged, { query: true, keyValue: true, offsets: 'int64' });
    const spec = buildSdpaGraph(f);
    for (const name of ['Q', 'K^T', 'V', 'O']) {
      const t = spec.tensors.find((x) => x.name === name)!;
      assert.ok(t.raggedOffset !== undefined && t.raggedOffset < t.uid, `${name} has its offsets first`);
      const offsets = spec.tensors.find((x) => x.uid === t.raggedOffset)!;
      assert.deepEqual([offsets.dtype, offsets.dims], ['int64', [3, 1, 1, 1]]);
    }
    assert.equal(featuresOf(p, { ...H200, version: 90500 }).ragged?.offsets, 'int32');
  });

  it('dense problems keep their graph key: no layout fields appear in it', () => {
    const q = randomNormal([1, 4, 2, 16], { seed: 1, dtype: 'bfloat16' });
    const d = describeSdpa(validateAttention(q, q, q, {}), H200);
    assert.ok(d.ok);
    assert.ok(!/paged|ragged/.test(d.key));
  });

  it('the page table cuDNN reads has every unused entry (−1 from the caller) at block 0', () => {
    const p = paged();
    const table = pageTableForCudnn(p);
    const M = 3;
    assert.deepEqual([...table.subarray(M, 2 * M)].slice(1), [0, 0]); // length 3: one block used
    assert.deepEqual([...table.subarray(0, M)], [...p.paged!.blockTable.subarray(0, M)]);
    assert.ok(p.paged!.blockTable[M + 1] === -1);
  });
});

describe('cudnn paged and packed support rules, by cuDNN version', () => {
  const problem = (c: Partial<LayoutCase>, options: AttentionOptions = {}) => {
    const base: LayoutCase = {
      name: '',
      ...sizes(2, 1, 32, 4, 2, 16),
      kvLengths: [32, 5],
      blockSize: 16,
      ...c,
    };
    const { query, key, value, options: o } = build(base, 1);
    return validateAttention(query, key, value, { ...o, ...options });
  };
  const reason = (p: AttentionProblem, env: CudnnEnvironment = H200) => {
    const d = describeSdpa(p, env);
    return d.ok ? 'ok' : d.reason;
  };

  it('describes paged and packed problems whether or not cudnn is named (the registry decides auto)', () => {
    // With implementation unset, src/backends/registry.ts tries cudnn for these layouts only where
    // the measured decode table ranks it first (test/unit/backends/dispatch-table.test.ts).
    assert.equal(reason(problem({}, { implementation: undefined })), 'ok');
    assert.equal(reason(problem({})), 'ok');
  });
  it('a paged cache needs cuDNN 9.5', () => {
    assert.match(reason(problem({}), { ...H200, version: 90400 }), /PAGED_CACHE_LOAD needs 9\.5\.0/);
    assert.equal(reason(problem({}), { ...H200, version: 90500 }), 'ok');
  });
  it('head dims above 128 with a paged cache need cuDNN 9.10', () => {
    assert.match(reason(problem({ H: 256 }), { ...H200, version: 90900 }), /H, Hv ≤ 128 only/);
    assert.equal(reason(problem({ H: 256 }), { ...H200, version: 91000 }), 'ok');
  });
  it('a packed query on a paged cache needs cuDNN 9.7', () => {
    const p = problem({ T: 2, qLengths: [2, 1], packedQuery: true });
    assert.match(reason(p, { ...H200, version: 90600 }), /paged KV cache with a packed query \(9\.7/);
    assert.equal(reason(p, { ...H200, version: 90700 }), 'ok');
  });
  it('packed sequences before Hopper need cuDNN 9.18.1', () => {
    const p = problem({ blockSize: undefined, T: 2, qLengths: [2, 1], packedQuery: true, packedKv: true });
    const ampere = { ...H200, gpuName: 'NVIDIA A100', computeCapability: { major: 8, minor: 0 } };
    assert.match(
      reason(p, { ...ampere, version: 91400 }),
      /Hopper GPU before cuDNN 9\.18\.1; NVIDIA A100 is 8\.0/,
    );
    assert.equal(reason(p, { ...ampere, version: 91900 }), 'ok');
  });
  it('a boolean mask with a packed query', () => {
    const mask = Tensor.fromRaw(new Uint8Array(2 * 32).fill(1), [1, 1, 2, 32], 'bool');
    const p = problem({ blockSize: undefined, T: 2, qLengths: [2, 1], packedQuery: true }, { mask });
    assert.match(reason(p), /boolean mask with a packed query/);
  });
  it('the unified op (asked for) takes a paged cache from cuDNN 9.15, not packed inputs or a causal mask', () => {
    const unified = (p: AttentionProblem, env: CudnnEnvironment = H200) => {
      const d = describeSdpa(p, env, { graph: 'unified' });
      return d.ok ? d.features.graph : d.reason;
    };
    assert.equal(unified(problem({}, decode)), 'unified'); // a decode step: the causal bound drops
    assert.match(
      unified(problem({}), { ...H200, version: 91400 }),
      /before 9\.15\) padding or a paged cache/,
    );
    assert.match(unified(problem({ T: 3 }, decode)), /cannot take bias, causal/);
    const packed = problem({
      blockSize: undefined,
      T: 2,
      qLengths: [2, 1],
      packedQuery: true,
      packedKv: true,
    });
    assert.match(unified(packed), /packed inputs/);
  });
  it('ATTNLAB_CUDNN_GRAPH=unified moves a paged cache to the unified op only where it can run', () => {
    process.env.ATTNLAB_CUDNN_GRAPH = 'unified';
    reloadConfig();
    try {
      const graphOf = (p: AttentionProblem) => {
        const d = describeSdpa(p, H200);
        return d.ok ? d.features.graph : d.reason;
      };
      assert.equal(graphOf(problem({}, decode)), 'unified');
      assert.equal(graphOf(problem({ T: 3 }, decode)), 'composite');
    } finally {
      delete process.env.ATTNLAB_CUDNN_GRAPH;
      reloadConfig();
    }
    const unset = describeSdpa(problem({}, decode), H200);
    assert.equal(unset.ok && unset.features.graph, 'composite', 'without the variable: composite');
  });
});

describe('cudnn unified SDPA_FWD op on a paged cache', () => {
  it('reads the containers as K and V through the page tables, with the sequence lengths', () => {
    const d = describeSdpa(pagedProblem(), H200, { graph: 'unified' });
    assert.ok(d.ok, d.ok ? '' : d.reason);
    const spec = buildSdpaGraph(d.features);
    assert.equal(spec.ops.length, 1);
    const op = spec.ops[0];
    assert.ok(op.kind === 'sdpa');
    const tensor = (uid: number | undefined) => spec.tensors.find((t) => t.uid === uid)!;
    assert.equal(tensor(op.k).name, 'K_container');
    assert.deepEqual(tensor(op.k).dims, [9, 2, 16, 16]);
    assert.equal(tensor(op.v).name, 'V_container');
    assert.equal(spec.bindings.get(op.pageTableK as number)?.kind, 'pageTable');
    assert.equal(spec.bindings.get(op.pageTableV as number)?.kind, 'pageTable');
    assert.equal(spec.bindings.get(op.seqLenKv as number)?.kind, 'seqLenKv');
    assert.deepEqual(tensor(op.scale).dims, [1]);
  });
});
