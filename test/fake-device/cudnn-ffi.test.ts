/**
 * The cuDNN backend's FFI flow end to end on a machine without a GPU, against a stand-in libcuda and
 * libcudnn compiled from cudnn-fake.c: context, pool memory, every descriptor and attribute type,
 * heuristics, plan JSON, the disk cache, variant packs and execute. The stand-in records what each
 * uid was bound to, so the test checks every pointer and every by-value scalar cuDNN would read.
 */
import assert from 'node:assert/strict';
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';
import koffi from 'koffi';
import { attention } from '../../src/api/attention.js';
import { attentionBackward } from '../../src/api/backward.js';
import { validateAttention } from '../../src/api/validate.js';
import { validateBackward } from '../../src/api/validate-backward.js';
import type { BackwardOptions } from '../../src/backends/backward-problem.js';
import { cudnnEnvironment, runCudnnAttention } from '../../src/backends/cuda/cudnn/backend.js';
import { describeSdpaBackward } from '../../src/backends/cuda/cudnn/backward.js';
import { describeSdpa } from '../../src/backends/cuda/cudnn/features.js';
import { pageTableForCudnn } from '../../src/backends/cuda/cudnn/paged-call.js';
import { clearMemoryPlanCache, planCacheStats } from '../../src/backends/cuda/cudnn/plan-cache.js';
import { buildSdpaBackwardGraph } from '../../src/backends/cuda/cudnn/sdpa-backward-graph.js';
import { buildSdpaGraph } from '../../src/backends/cuda/cudnn/sdpa-graph.js';
import { loadCudnn } from '../../src/backends/cuda/ffi/cudnn.js';
import { CU_FUNC_ATTRIBUTE, cu } from '../../src/backends/cuda/ffi/driver.js';
import { i32, launchKernel } from '../../src/backends/cuda/runtime/launch.js';
import type { AttentionOptions, AttentionProblem } from '../../src/backends/problem.js';
import { reloadConfig } from '../../src/config.js';
import { UnsupportedError } from '../../src/errors.js';
import type { FloatDType } from '../../src/tensor/dtype.js';
import { randomNormal } from '../../src/tensor/random.js';
import { Tensor } from '../../src/tensor/tensor.js';
import { pack, pagedCopy } from '../support/kv-layouts.js';
import { useFakeCudaStack } from './fake-cuda.js';

const { dir, skip } = useFakeCudaStack('attnlab-fake-cudnn-', { cudnnGraph: true, planCache: true });

interface Bound {
  ptr: string;
  byValue: number;
  value: number | string | null;
}

function lastExecute(): Record<string, Bound> {
  const lib = koffi.load(join(dir, 'libcudnn.so.9'));
  return JSON.parse(lib.func('const char *fake_last_execute()')() as string);
}

function deviceProblem(
  shape: number[],
  options: AttentionOptions,
  dtype: FloatDType = 'bfloat16',
): AttentionProblem {
  const [B, T, S, N, K, H] = shape;
  const q = randomNormal([B, T, N, H], { seed: 1, dtype }).to('cuda');
  const k = randomNormal([B, S, K, H], { seed: 2, dtype }).to('cuda');
  const v = randomNormal([B, S, K, H], { seed: 3, dtype }).to('cuda');
  const bias = options.bias?.to('cuda');
  const mask = options.mask?.to('cuda');
  return validateAttention(q, k, v, { ...options, bias, mask });
}

/** Runs `p` and checks that each uid of its graph was bound to the right pointer or value. */
function runAndCheckBindings(p: AttentionProblem): void {
  const r = runCudnnAttention(p);
  assert.match(
    r.variant,
    /^cudnn 9\.19\.0 (unified|composite) engine (7|-1) cudnn_generated_fake_sdpa_kernel0_0$/,
  );
  const env = cudnnEnvironment();
  assert.ok(env.ok);
  const d = describeSdpa(p, env.env);
  assert.ok(d.ok);
  const bound = lastExecute();
  const spec = buildSdpaGraph(d.features);
  assert.equal(Object.keys(bound).length, spec.bindings.size);
  for (const [uid, binding] of spec.bindings) {
    const got = bound[String(uid)];
    assert.ok(got, `uid ${uid} (${binding.kind}) not in the variant pack`);
    const expectPointer = (ptr: bigint | undefined) =>
      assert.equal(got.ptr, String(ptr), `uid ${uid} (${binding.kind})`);
    switch (binding.kind) {
      case 'query':
        expectPointer(p.query.buffer.ptr);
        break;
      case 'key':
        expectPointer(p.key.buffer.ptr);
        break;
      case 'value':
        expectPointer(p.value.buffer.ptr);
        break;
      case 'bias':
        // A converted bias is a buffer of this call, neither the mask nor the caller's bias.
        if (d.prepare.convertBias)
          assert.ok(![p.bias?.tensor.buffer.ptr, p.mask?.tensor.buffer.ptr].map(String).includes(got.ptr));
        else expectPointer(p.bias?.tensor.buffer.ptr);
        break;
      case 'output':
        expectPointer(r.output.buffer.ptr);
        break;
      case 'stats':
        // A packed query's log-sum-exp is cuDNN's (B,T,N) output packed into a new buffer.
        if (p.packed?.querySeqOffsets)
          assert.ok(got.ptr !== '0' && got.ptr !== String(r.logSumExp?.buffer.ptr));
        else expectPointer(r.logSumExp?.buffer.ptr);
        break;
      case 'seqLenQ':
      case 'seqLenKv': {
        const want =
          binding.kind === 'seqLenQ'
            ? (p.querySeqLengths ?? new Int32Array(p.B).fill(p.T))
            : (p.keyValueSeqLengths ?? new Int32Array(p.B).fill(p.S));
        const values = koffi.decode(BigInt(got.ptr), 'int32_t', p.B) as number[];
        assert.deepEqual([...values], [...want], `${binding.kind} contents`);
        break;
      }
      case 'pageTable': {
        const values = koffi.decode(BigInt(got.ptr), 'int32_t', p.B * (p.paged?.maxBlocksPerSeq ?? 0));
        assert.deepEqual([...(values as number[])], [...pageTableForCudnn(p)], 'page table contents');
        break;
      }
      case 'raggedQuery':
      case 'raggedKey':
      case 'raggedValue':
      case 'raggedOutput': {
        const query = binding.kind === 'raggedQuery' || binding.kind === 'raggedOutput';
        const offsets = (query ? p.packed?.querySeqOffsets : p.packed?.keyValueSeqOffsets) as Int32Array;
        const heads = query ? p.N : p.K;
        const width = binding.kind === 'raggedQuery' || binding.kind === 'raggedKey' ? p.H : p.Hv;
        const values = koffi.decode(BigInt(got.ptr), 'int64_t', p.B + 1) as ArrayLike<number | bigint>;
        assert.deepEqual(
          Array.from(values, Number),
          [...offsets].map((o) => o * heads * width),
          binding.kind,
        );
        break;
      }
      case 'scale':
        assert.equal(got.value, Math.fround(p.scale));
        break;
      case 'constant':
        assert.equal(got.value, binding.value === -Infinity ? '-inf' : binding.value, `constant uid ${uid}`);
        break;
    }
  }
  r.output.dispose();
  r.logSumExp?.dispose();
}

/** Runs the cuDNN backward of `options` on the stand-in and checks every uid's binding. */
function runBackwardAndCheckBindings(shape: number[], options: BackwardOptions): void {
  const [B, T, S, N, K, H] = shape;
  const { deterministic: _, ...forward } = options;
  const p = deviceProblem(shape, forward);
  const output = randomNormal([B, T, N, H], { seed: 4, dtype: 'bfloat16' }).to('cuda');
  const lse = randomNormal([B, T, N], { seed: 5, dtype: 'float32' }).to('cuda');
  const dO = randomNormal([B, T, N, H], { seed: 6, dtype: 'bfloat16' }).to('cuda');
  const bias = p.bias?.tensor;
  const r = attentionBackward(p.query, p.key, p.value, output, lse, dO, {
    ...options,
    bias,
    implementation: 'cudnn',
  });
  assert.equal(r.backend, 'cudnn');
  assert.match(r.variant, /^cudnn 9\.19\.0 composite backward engine (7|-1) /);
  assert.deepEqual(r.dKey.shape, [B, S, K, H]);
  const env = cudnnEnvironment();
  assert.ok(env.ok);
  const d = describeSdpaBackward(
    validateBackward(p.query, p.key, p.value, output, lse, dO, { ...options, bias }),
    env.env,
  );
  assert.ok(d.ok, d.ok ? '' : d.reason);
  const spec = buildSdpaBackwardGraph(d.features);
  const bound = lastExecute();
  assert.equal(Object.keys(bound).length, spec.bindings.size);
  const want: Partial<Record<string, bigint | undefined>> = {
    query: p.query.buffer.ptr,
    key: p.key.buffer.ptr,
    value: p.value.buffer.ptr,
    output: output.buffer.ptr,
    stats: lse.buffer.ptr,
    dOutput: dO.buffer.ptr,
    bias: bias?.buffer.ptr,
    dQuery: r.dQuery.buffer.ptr,
    dKey: r.dKey.buffer.ptr,
    dValue: r.dValue.buffer.ptr,
    dBias: r.dBias?.buffer.ptr,
  };
  const scratch = new Set<string>();
  for (const [uid, binding] of spec.bindings) {
    const got = bound[String(uid)];
    assert.ok(got, `uid ${uid} (${binding.kind}) not in the variant pack`);
    if (binding.kind === 'softmaxSum' || binding.kind === 'dQueryAccum') scratch.add(got.ptr);
    else if (binding.kind === 'scale') assert.equal(got.value, Math.fround(p.scale));
    else if (binding.kind in want)
      assert.equal(got.ptr, String(want[binding.kind]), `uid ${uid} (${binding.kind})`);
  }
  // softmaxSum, and dQ_accum unless dQ is written directly, each in a buffer of their own.
  assert.equal(scratch.size, d.features.directDQ ? 1 : 2);
  assert.ok(![...scratch].includes('0'));
  for (const t of [output, lse, dO, r.dQuery, r.dKey, r.dValue, r.dBias]) t?.dispose();
}

describe('cuDNN FFI flow against a stand-in library', { skip }, () => {
  it('loads it, reads its version and the GPU', () => {
    const e = cudnnEnvironment();
    assert.ok(e.ok, e.ok ? '' : e.reason);
    assert.equal(e.env.version, 91900);
    assert.equal(e.env.gpuName, 'Fake H200');
  });

  it('keeps the sub-libraries loaded through garbage collections (koffi unloads unreferenced ones)', () => {
    assert.ok(cudnnEnvironment().ok);
    setFlagsFromString('--expose-gc');
    const gc = runInNewContext('gc') as () => void;
    for (let i = 0; i < 3; i++) gc();
    const maps = readFileSync('/proc/self/maps', 'utf8');
    assert.ok(maps.includes(join(dir, 'libcudnn_graph.so.9')), 'libcudnn_graph.so.9 was unloaded');
  });

  const shape = [2, 24, 40, 4, 2, 64];
  const cases: [string, AttentionOptions][] = [
    ['unified', {}],
    [
      'unified + padding + lse',
      { querySeqLengths: [24, 7], keyValueSeqLengths: [40, 13], returnLogSumExp: true },
    ],
    ['composite causal + lse', { isCausal: true, returnLogSumExp: true }],
    [
      'bottom-right causal + padding',
      {
        isCausal: true,
        causalAlignment: 'bottom_right',
        querySeqLengths: [20, 7],
        keyValueSeqLengths: [40, 13],
      },
    ],
    ['bottom-right window, no padding', { localWindowSize: [5, 2], causalAlignment: 'bottom_right' }],
    ['top-left left-bounded window', { localWindowSize: [6, 100] }],
    [
      'bias (1,N,T,S) + causal',
      { isCausal: true, bias: randomNormal([1, 4, 24, 40], { seed: 9, dtype: 'bfloat16' }) },
    ],
  ];
  for (const [name, options] of cases)
    it(`binds every uid: ${name}`, () => runAndCheckBindings(deviceProblem(shape, options)));
  // The same shape with and without `deterministic`, and again: the kept descriptions (cudnn/backward.ts)
  // must follow the loop asked for (a deterministic backward binds no dQ accumulator).
  const backwardCases: [string, BackwardOptions][] = [
    ['GQA', {}],
    ['GQA, deterministic', { deterministic: true }],
    ['GQA again', {}],
    ['causal, deterministic', { isCausal: true, deterministic: true }],
    [
      'bottom-right causal + padding',
      {
        isCausal: true,
        causalAlignment: 'bottom_right',
        querySeqLengths: [20, 7],
        keyValueSeqLengths: [40, 13],
      },
    ],
    ['bias (1,N,T,S) → dBias', { bias: randomNormal([1, 4, 24, 40], { seed: 9, dtype: 'bfloat16' }) }],
  ];
  for (const [name, options] of backwardCases)
    it(`backward binds every uid: ${name}`, () => runBackwardAndCheckBindings(shape, options));
  // NaN and Inf inputs run on cuDNN; the gradient repair follows on the stream (no read back, no wait).
  it('backward: the gradient NaN repair is the one launch after cuDNN, and the call waits on nothing', () => {
    const lib = koffi.load(join(dir, 'libcuda.so.1'));
    const launches = lib.func('int fake_launch_count()');
    const syncs = lib.func('int fake_sync_count()');
    const lastLaunch = lib.func('const char *fake_last_launch()');
    const [B, T, S, N, K, H] = shape;
    const bias = randomNormal([1, N, T, S], { seed: 9, dtype: 'bfloat16' });
    const poisoned = randomNormal([B, T, N, H], { seed: 1, dtype: 'bfloat16' }).toFloat64Array();
    poisoned[5] = Number.NaN;
    poisoned[7] = Number.POSITIVE_INFINITY;
    const q = Tensor.fromArray(poisoned, [B, T, N, H], 'bfloat16').to('cuda');
    const [k, v] = [2, 3].map((seed) => randomNormal([B, S, K, H], { seed, dtype: 'bfloat16' }).to('cuda'));
    const output = randomNormal([B, T, N, H], { seed: 4, dtype: 'bfloat16' }).to('cuda');
    const lse = randomNormal([B, T, N], { seed: 5, dtype: 'float32' }).to('cuda');
    const dO = randomNormal([B, T, N, H], { seed: 6, dtype: 'bfloat16' }).to('cuda');
    const options: BackwardOptions = { isCausal: true, bias: bias.to('cuda'), implementation: 'cudnn' };
    attentionBackward(q, k, v, output, lse, dO, options); // plan and kernel built, lengths uploaded
    const [launched, synced] = [launches(), syncs()];
    const r = attentionBackward(q, k, v, output, lse, dO, options);
    assert.equal(r.backend, 'cudnn');
    assert.ok(r.dBias, 'dBias');
    assert.equal(launches() - launched, 1);
    assert.equal(lastLaunch(), 'attnlab_grad_nan_repair');
    assert.equal(syncs() - synced, 0);
  });
  // Paged and packed (paged.ts): the pools, page tables and ragged offsets reach cuDNN as built.
  const layoutProblem = (paged: boolean, packedQuery: boolean, packedKv: boolean, T = 4) => {
    const [B, S, N, K, H] = [3, 40, 4, 2, 64];
    const q = randomNormal([B, T, N, H], { seed: 1, dtype: 'bfloat16' });
    const k = randomNormal([B, S, K, H], { seed: 2, dtype: 'bfloat16' });
    const v = randomNormal([B, S, K, H], { seed: 3, dtype: 'bfloat16' });
    const [qLengths, kvLengths] = [
      [4, 0, 2],
      [40, 7, 1],
    ];
    const options: AttentionOptions = {
      isCausal: true,
      causalAlignment: 'bottom_right',
      returnLogSumExp: true,
    };
    let [query, key, value] = [q, k, v];
    if (packedQuery) {
      const packed = pack(q, qLengths);
      query = packed.tensor;
      options.querySeqOffsets = packed.offsets;
    }
    if (paged) {
      const [pk, pv] = [pagedCopy(k, 16, 5), pagedCopy(v, 16, 5)];
      [key, value] = [pk.pool, pv.pool];
      Object.assign(options, { blockTable: pk.table, keyValueSeqLengths: kvLengths });
    } else if (packedKv) {
      const [pk, pv] = [pack(k, kvLengths), pack(v, kvLengths)];
      [key, value] = [pk.tensor, pv.tensor];
      options.keyValueSeqOffsets = pk.offsets;
    }
    const [qd, kd, vd] = [query, key, value].map((t) => t.to('cuda'));
    return validateAttention(qd, kd, vd, { ...options, implementation: 'cudnn' });
  };
  it('binds every uid: paged cache (block size 16)', () =>
    runAndCheckBindings(layoutProblem(true, false, false)));
  it('binds every uid: packed query and key/value', () =>
    runAndCheckBindings(layoutProblem(false, true, true)));
  it('binds every uid: packed query on a paged cache', () =>
    runAndCheckBindings(layoutProblem(true, true, false)));
  it('binds every uid: paged decode step on the unified op (ATTNLAB_CUDNN_GRAPH=unified)', () => {
    process.env.ATTNLAB_CUDNN_GRAPH = 'unified';
    reloadConfig();
    try {
      const p = layoutProblem(true, false, false, 1);
      const env = cudnnEnvironment();
      const d = env.ok ? describeSdpa(p, env.env) : null;
      assert.equal(d?.ok && d.features.graph, 'unified');
      runAndCheckBindings(p);
    } finally {
      delete process.env.ATTNLAB_CUDNN_GRAPH;
      reloadConfig();
    }
  });
  it('binds every uid: float16 H=256', () =>
    runAndCheckBindings(deviceProblem([1, 8, 8, 2, 1, 256], { isCausal: true }, 'float16')));

  it('converts a mask before cuDNN and fixes empty rows after it, on the stream, with no host wait', () => {
    const [B, T, S, N] = [2, 24, 40, 4];
    const keepAll = (shape: number[]) =>
      Tensor.fromRaw(new Uint8Array(shape.reduce((x, y) => x * y)).fill(1), shape, 'bool');
    const cases: [string, AttentionOptions, string[]][] = [
      ['plain', {}, ['execute']],
      [
        'mask (1,1,T,S)',
        { mask: keepAll([1, 1, T, S]) },
        [`launch ${T}`, 'execute', `launch ${(B * T * N) / 8}`],
      ],
      [
        'mask (B,N,T,S) + causal',
        { mask: keepAll([B, N, T, S]), isCausal: true },
        [`launch ${B * N * T}`, 'execute', 'launch 24'],
      ],
      [
        'bias over T',
        { bias: randomNormal([B, 1, 1, S], { seed: 9, dtype: 'bfloat16' }) },
        [`launch ${B * T}`, 'execute'],
      ],
      ['S_b = 0', { keyValueSeqLengths: [S, 0] }, ['execute', 'launch 24']],
      [
        'bias + bottom-right causal (the bound folded into the bias)',
        {
          bias: randomNormal([1, 1, T, S], { seed: 9, dtype: 'bfloat16' }),
          isCausal: true,
          causalAlignment: 'bottom_right',
        },
        [`launch ${T}`, 'execute'],
      ],
    ];
    const driver = cu() as unknown as Record<string, (...args: unknown[]) => unknown>;
    const fn = loadCudnn().fn as unknown as Record<string, (...args: unknown[]) => unknown>;
    const [launch, execute] = [driver.cuLaunchKernel, fn.cudnnBackendExecute];
    const trace: string[] = [];
    driver.cuLaunchKernel = (...a: unknown[]) => {
      trace.push(`launch ${a[1]}`);
      return launch(...a);
    };
    fn.cudnnBackendExecute = (...a: unknown[]) => {
      trace.push('execute');
      return execute(...a);
    };
    const sync = driver.cuStreamSynchronize;
    driver.cuStreamSynchronize = (...a: unknown[]) => {
      trace.push('synchronize');
      return sync(...a);
    };
    try {
      for (const [name, options, expected] of cases) {
        const p = deviceProblem([B, T, S, N, 2, 64], { ...options, returnLogSumExp: true });
        runCudnnAttention(p); // builds the plan and compiles the kernels
        trace.length = 0;
        runAndCheckBindings(p);
        assert.deepEqual(trace, expected, name);
      }
    } finally {
      driver.cuLaunchKernel = launch;
      fn.cudnnBackendExecute = execute;
      driver.cuStreamSynchronize = sync;
    }
  });

  it('reuses a variant pack only for the same pointers, and always passes the current scale', () => {
    const p = deviceProblem([1, 16, 16, 2, 2, 32], {});
    const outputs = [runCudnnAttention(p), runCudnnAttention(p), runCudnnAttention(p)].map((r) => r.output);
    const bound = () => Object.values(lastExecute());
    assert.ok(bound().some((b) => b.ptr === String(outputs[2].buffer.ptr)));
    for (const t of outputs) t.dispose();
    for (const scale of [0.25, 2]) {
      const q = deviceProblem([1, 16, 16, 2, 2, 32], { scale });
      const r = runCudnnAttention({ ...q, query: p.query, key: p.key, value: p.value });
      const values = bound()
        .filter((b) => b.byValue)
        .map((b) => b.value);
      assert.deepEqual(values, [scale]);
      assert.ok(bound().some((b) => b.ptr === String(r.output.buffer.ptr)));
      r.output.dispose();
    }
  });

  it('builds a plan once, then takes it from memory, then from disk once memory is cleared', () => {
    const p = deviceProblem([1, 16, 16, 2, 2, 32], { isCausal: true });
    const first = runCudnnAttention(p);
    assert.equal(first.planSource, 'built');
    assert.equal(runCudnnAttention(p).planSource, 'memory');
    const files = readdirSync(join(dir, 'cache', 'cudnn-plans'));
    assert.ok(files.some((f) => f.endsWith('.json')) && !files.some((f) => f.endsWith('.tmp')));
    clearMemoryPlanCache();
    const again = runCudnnAttention(p);
    assert.equal(again.planSource, 'disk');
    assert.equal(again.variant, first.variant);
    assert.equal(runCudnnAttention(p).planSource, 'memory');
  });

  it('writes no plan file with ATTNLAB_CUDNN_PLAN_CACHE=0', () => {
    const before = planCacheStats().diskWrites;
    process.env.ATTNLAB_CUDNN_PLAN_CACHE = '0';
    reloadConfig();
    try {
      runCudnnAttention(deviceProblem([1, 8, 8, 1, 1, 16], {}));
    } finally {
      delete process.env.ATTNLAB_CUDNN_PLAN_CACHE;
      reloadConfig();
    }
    assert.equal(planCacheStats().diskWrites, before);
  });

  it('is picked by auto dispatch, and a forced float32 call throws the reason', () => {
    const q = randomNormal([1, 8, 2, 32], { seed: 4, dtype: 'bfloat16' }).to('cuda');
    assert.equal(attention(q, q, q).backend, 'cudnn');
    const f = randomNormal([1, 8, 2, 32], { seed: 4, dtype: 'float32' }).to('cuda');
    assert.throws(
      () => attention(f, f, f, { implementation: 'cudnn' }),
      (e: unknown) =>
        e instanceof UnsupportedError && /cudnn \(cuda\) cannot run this case: .*got float32/.test(e.message),
    );
    assert.ok(existsSync(dir));
  });
});

describe('kernel launches against the stand-in driver', { skip }, () => {
  it('a launch past 48 KiB of shared memory opts in once, with the whole carveout for shared memory', () => {
    const driver = cu() as unknown as Record<string, (...args: unknown[]) => unknown>;
    const setAttribute = driver.cuFuncSetAttribute;
    const set: [number, number][] = [];
    driver.cuFuncSetAttribute = (...args: unknown[]) => {
      set.push([args[1] as number, args[2] as number]);
      return setAttribute(...args);
    };
    try {
      const kernel = 0x4242n; // the stand-in runs nothing; launchKernel only passes the handle on
      const launch = (sharedBytes: number) =>
        launchKernel(kernel, { grid: [1, 1, 1], block: [128, 1, 1], sharedBytes }, [i32(1)]);
      launch(32 << 10);
      assert.deepEqual(set, [], 'within the default 48 KiB nothing is set');
      launch(100 << 10);
      assert.deepEqual(set, [
        [CU_FUNC_ATTRIBUTE.MAX_DYNAMIC_SHARED_SIZE_BYTES, 100 << 10],
        [CU_FUNC_ATTRIBUTE.PREFERRED_SHARED_MEMORY_CARVEOUT, 100],
      ]);
      launch(100 << 10);
      assert.equal(set.length, 2, 'a second launch of the same size sets nothing again');
    } finally {
      driver.cuFuncSetAttribute = setAttribute;
    }
  });
});
