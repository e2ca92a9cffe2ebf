/**
 * The FP8 step's whole FFI flow on a machine without a GPU: the module under autocast on "cuda"
 * tensors, against the stand-in libcuda/libcudnn of cudnn-fake.c and a stand-in NVRTC
 * (te-fake-nvrtc.c). Kernels do not run there, so numbers are not checked; what is checked is what
 * a caller can get wrong before the GPU does anything: the kernels named in the source, the FP8 graph
 * accepted op by op (ranks, matmul shapes, attribute types), a variant pack that binds every
 * non-virtual tensor once, the eight FP8 scalars at their slots of one block, the by-value scalars.
 */
import assert from 'node:assert/strict';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import koffi from 'koffi';
import { validateAttention } from '../../src/api/validate.js';
import { loadCudnn } from '../../src/backends/cuda/ffi/cudnn.js';
import { DESCRIPTOR } from '../../src/backends/cuda/ffi/cudnn-constants.js';
import { cu } from '../../src/backends/cuda/ffi/driver.js';
import {
  buildFp8Graph,
  fp8GraphFeatures,
  SCALAR_BLOCK_BYTES,
  SCALAR_SLOTS,
} from '../../src/backends/cuda/fp8/graph.js';
import { pipelineChunks } from '../../src/backends/cuda/fp8/pipeline.js';
import { runCudaFp8 } from '../../src/backends/cuda/fp8/run.js';
import { DeviceDelayedState } from '../../src/backends/cuda/fp8/state.js';
import { getCudaContext } from '../../src/backends/cuda/runtime/context.js';
import { InvalidArgumentError } from '../../src/errors.js';
import { autocast } from '../../src/te/autocast.js';
import { Fp8State } from '../../src/te/fp8-state.js';
import { DotProductAttention, SequenceDescriptor } from '../../src/te/module.js';
import { DelayedScaling } from '../../src/te/recipe.js';
import { randomNormal } from '../../src/tensor/random.js';
import { useFakeCudaStack } from './fake-cuda.js';

const { dir, skip } = useFakeCudaStack('attnlab-fake-fp8-');

interface Bound {
  ptr: string;
  byValue: number;
  value: number | string | null;
}

describe('FP8 step through the FFI (stand-in libraries)', { skip }, () => {
  it('builds, binds and executes the FP8 graph with every scalar in its slot', () => {
    const [B, T, N, K, H] = [2, 64, 4, 2, 64];
    const q = randomNormal([B, T, N, H], { seed: 1, dtype: 'bfloat16' }).to('cuda');
    const k = randomNormal([B, T, K, H], { seed: 2, dtype: 'bfloat16' }).to('cuda');
    const v = randomNormal([B, T, K, H], { seed: 3, dtype: 'bfloat16' }).to('cuda');
    const attn = new DotProductAttention({
      headDim: H,
      numAttentionHeads: N,
      numGqaGroups: K,
      attnMaskType: 'padding_causal',
    });
    const sequenceDescriptor = SequenceDescriptor.fromSeqLens([64, 40]);
    const r = autocast({ recipe: new DelayedScaling({ amaxHistoryLen: 2 }) }, () =>
      attn.apply(q, k, v, { sequenceDescriptor, keepFp8Output: true }),
    );
    assert.equal(r.precision, 'fp8');
    assert.equal(r.backend, 'cudnn-fp8');
    assert.match(r.variant, /^cudnn 9\.19\.0 fp8 engine 7 cudnn_generated_fake_sdpa_kernel0_0$/);
    assert.deepEqual(r.output.shape, [B, T, N, H]);
    assert.equal(r.output.dtype, 'bfloat16');
    assert.equal(r.output8?.tensor.dtype, 'float8_e4m3fn');
    // The delayed-scaling state went to the device and reads back through the FFI; the stand-in runs
    // no kernels, so it reads back as uploaded: TE's first scales (1, with S at fp8max), no history.
    const metas = attn.fp8State.metas!;
    const names = ['q', 'k', 'v', 's', 'o'] as const;
    assert.deepEqual(
      names.map((n) => metas[n].scale),
      [1, 1, 1, 448, 1],
    );
    for (const n of names) assert.deepEqual(Array.from(metas[n].amaxHistory), [0, 0]);
    assert.equal(attn.fp8State.steps, 1);

    const nvrtc = koffi.load(join(dir, 'libnvrtc.so.13'));
    const options = nvrtc.func('const char *fake_nvrtc_options()')() as string;
    assert.match(options, /--gpu-architecture=sm_90a/);

    const cudnn = koffi.load(join(dir, 'libcudnn.so.9'));
    const bound = JSON.parse(cudnn.func('const char *fake_last_execute()')() as string) as Record<
      string,
      Bound
    >;
    const problem = validateAttention(q, k, v, {
      isCausal: true,
      querySeqLengths: [64, 40],
      keyValueSeqLengths: [64, 40],
    });
    const { spec, roles } = buildFp8Graph(fp8GraphFeatures(problem));
    const memory = spec.tensors.filter((t) => !t.virtual);
    assert.equal(Object.keys(bound).length, memory.length, 'every non-virtual tensor bound once');
    const pointer = (uid: number) => BigInt(bound[String(uid)].ptr);
    const scalarUid = (slot: number) =>
      [...roles].find(([, role]) => role.kind === 'scalar' && role.slot === slot)![0];
    const base = pointer(scalarUid(SCALAR_SLOTS.descaleQ));
    for (const [name, slot] of Object.entries(SCALAR_SLOTS)) {
      if (slot > SCALAR_SLOTS.amaxO) continue; // slots 8–13 belong to the kernels, not the graph
      assert.equal(pointer(scalarUid(slot)) - base, BigInt(slot * 16), `${name} at slot ${slot}`);
    }
    const byValue = memory.filter((t) => t.byValue).map((t) => bound[String(t.uid)].value);
    assert.deepEqual(byValue.sort(), [0.125, '-inf', '-inf'].sort());
    const uidOf = (kind: string) => [...roles].find(([, role]) => role.kind === kind)![0];
    assert.equal(pointer(uidOf('q8')) !== pointer(uidOf('k8')), true);
    assert.equal(pointer(uidOf('o8')), r.output8!.tensor.buffer.ptr);
  });

  it('delayed-scaling steps wait for nothing until their state or reports are read', () => {
    const [B, T, N, H] = [1, 64, 2, 64];
    const [q, k, v] = [4, 5, 6].map((seed) =>
      randomNormal([B, T, N, H], { seed, dtype: 'bfloat16' }).to('cuda'),
    );
    const attn = new DotProductAttention({ headDim: H, numAttentionHeads: N });
    const recipe = new DelayedScaling({ amaxHistoryLen: 4 });
    const driver = cu() as unknown as Record<string, (...args: unknown[]) => unknown>;
    const synchronize = driver.cuStreamSynchronize;
    let waits = 0;
    driver.cuStreamSynchronize = (...args: unknown[]) => {
      waits++;
      return synchronize(...args);
    };
    // Variant packs made: a step whose pointers were seen before reuses its pack.
    const fn = loadCudnn().fn as unknown as Record<string, (...args: unknown[]) => unknown>;
    const create = fn.cudnnBackendCreateDescriptor;
    let packs = 0;
    fn.cudnnBackendCreateDescriptor = (...args: unknown[]) => {
      if (args[0] === DESCRIPTOR.VARIANT_PACK) packs++;
      return create(...args);
    };
    try {
      // The first step uploads the state; the pool's blocks settle into the pointers that recur.
      for (let i = 0; i < 3; i++) autocast({ recipe }, () => attn.apply(q, k, v)).output.dispose();
      assert.ok(packs >= 1 && packs <= 3, `${packs} packs in the first steps`);
      [waits, packs] = [0, 0];
      const results = [1, 2, 3].map(() => autocast({ recipe }, () => attn.apply(q, k, v)));
      assert.equal(waits, 0, 'steps 4–6 enqueued without waiting for the GPU');
      assert.equal(packs, 0, 'steps 4–6 reuse the variant packs of earlier steps');
      assert.equal(attn.fp8State.steps, 6);
      assert.ok(attn.fp8State.metas, 'reading the state waits once');
      assert.equal(waits, 1);
      assert.deepEqual(Object.keys(results[2].fp8!.scales), ['q', 'k', 'v', 's', 'o']);
    } finally {
      driver.cuStreamSynchronize = synchronize;
      fn.cudnnBackendCreateDescriptor = create;
    }
  });

  it('a step pipelined in batch chunks orders its two streams and binds each chunk its slices', () => {
    const [B, T, N, K, H] = [4, 64, 4, 2, 64];
    const q = randomNormal([B, T, N, H], { seed: 7, dtype: 'bfloat16' }).to('cuda');
    const [k, v] = [8, 9].map((seed) => randomNormal([B, T, K, H], { seed, dtype: 'bfloat16' }).to('cuda'));
    const lengths = [64, 50, 33, 64];
    const problem = validateAttention(q, k, v, {
      isCausal: true,
      querySeqLengths: lengths,
      keyValueSeqLengths: lengths,
    });
    const state = new Fp8State().mirrorFor(new DelayedScaling(), DeviceDelayedState.upload);
    const step = (chunks: number) =>
      runCudaFp8({
        problem,
        dtype8: 'float8_e4m3fn',
        scaling: { kind: 'delayed', state, margin: 0, mostRecent: false },
        keepFp8Output: false,
        chunks,
      });
    assert.throws(
      () => step(3),
      (error: unknown) =>
        error instanceof InvalidArgumentError && /chunks/.test(error.message) && /B=4/.test(error.message),
    );
    step(2).output.dispose(); // builds the B=2 plan, so that the traced step below only enqueues

    // The driver's and cuDNN's calls in order, streams and events named by first appearance.
    const { stream: main } = getCudaContext();
    const names = new Map<unknown, string>([[main, 'main']]);
    let events = 0;
    const name = (handle: unknown, kind: 'stream' | 'event') => {
      if (!names.has(handle)) names.set(handle, kind === 'stream' ? 'side' : `e${events++}`);
      return names.get(handle);
    };
    const trace: string[] = [];
    const executes: Record<string, Bound>[] = [];
    const driver = cu() as unknown as Record<string, (...args: unknown[]) => unknown>;
    const fn = loadCudnn().fn as unknown as Record<string, (...args: unknown[]) => unknown>;
    const lastExecute = koffi.load(join(dir, 'libcudnn.so.9')).func('const char *fake_last_execute()');
    const wrapped = {
      launch: [driver, 'cuLaunchKernel', (a: unknown[]) => `launch ${name(a[8], 'stream')}`],
      record: [
        driver,
        'cuEventRecord',
        (a: unknown[]) => `record ${name(a[0], 'event')} ${name(a[1], 'stream')}`,
      ],
      wait: [
        driver,
        'cuStreamWaitEvent',
        (a: unknown[]) => `wait ${name(a[0], 'stream')} ${name(a[1], 'event')}`,
      ],
      sync: [driver, 'cuStreamSynchronize', () => 'synchronize'],
      execute: [fn, 'cudnnBackendExecute', () => 'execute'],
    } as const;
    const originals = Object.values(wrapped).map(([target, key]) => [target, key, target[key]] as const);
    /** When set, this execute (counted from 1 in the traced step) fails as cuDNN would. */
    let failingExecute = 0;
    for (const [target, key, describe] of Object.values(wrapped)) {
      const original = target[key];
      target[key] = (...args: unknown[]) => {
        trace.push(describe(args));
        if (key === 'cudnnBackendExecute' && executes.length + 1 === failingExecute) {
          executes.push({});
          return 5000; // CUDNN_STATUS_EXECUTION_FAILED
        }
        const status = original(...args);
        if (key === 'cudnnBackendExecute') executes.push(JSON.parse(lastExecute() as string));
        return status;
      };
    }
    let stepTrace: string[] = [];
    let stepExecutes: Record<string, Bound>[] = [];
    try {
      step(2).output.dispose();
      [stepTrace, stepExecutes] = [trace.splice(0), executes.splice(0)];
      // A step whose second chunk fails still joins the side stream into the main one before it
      // throws, so the pool cannot hand its buffers to later work while the side stream uses them.
      failingExecute = 2;
      assert.throws(() => step(2), /cudnnBackendExecute \(FP8 SDPA\)/);
    } finally {
      for (const [target, key, original] of originals) target[key] = original;
    }
    const failedTrace = trace;
    assert.deepEqual(failedTrace, [
      ...['launch main', 'record e0 main', 'wait side e0', 'launch side', 'record e1 side'],
      ...['launch side', 'record e2 side', 'wait main e1', 'execute', 'record e3 main', 'wait side e3'],
      ...['launch side', 'wait main e2', 'execute'], // chunk 1's attention fails
      ...['record e5 side', 'wait main e5'], // the join; no scale update after a failed step
    ]);
    assert.deepEqual(stepTrace, [
      'launch main', // the step's scales into both chunks' blocks
      'record e0 main', // fork
      'wait side e0',
      'launch side', // quantise chunk 0
      'record e1 side',
      'launch side', // quantise chunk 1, beside chunk 0's attention
      'record e2 side',
      'wait main e1',
      'execute', // attention, chunk 0
      'record e3 main',
      'wait side e3',
      'launch side', // dequantise chunk 0, beside chunk 1's attention
      'wait main e2',
      'execute', // attention, chunk 1
      'record e4 main',
      'wait side e4',
      'launch side', // dequantise chunk 1
      'record e5 side', // join
      'wait main e5',
      'launch main', // the NaN repair of O: this problem hides keys (causal, padding)
      'launch main', // O8 takes the repaired values
      'launch main', // the delayed-scaling update, after everything
    ]);
    // Chunk 1's graph reads the second half of each operand, its own scalar block and lengths.
    const { roles } = buildFp8Graph({ ...fp8GraphFeatures(problem), B: 2 });
    const uidOf = (kind: string, slot?: number) =>
      String(
        [...roles].find(
          ([, role]) =>
            role.kind === kind && (slot === undefined || (role.kind === 'scalar' && role.slot === slot)),
        )![0],
      );
    const step1 = (kind: string, slot?: number) =>
      BigInt(stepExecutes[1][uidOf(kind, slot)].ptr) - BigInt(stepExecutes[0][uidOf(kind, slot)].ptr);
    assert.equal(step1('q8'), BigInt(2 * T * N * H));
    assert.equal(step1('k8'), BigInt(2 * T * K * H));
    assert.equal(step1('o8'), BigInt(2 * T * N * H));
    assert.equal(step1('seqLenKv'), 8n);
    assert.equal(step1('scalar', SCALAR_SLOTS.amaxO), BigInt(SCALAR_BLOCK_BYTES));
  });

  it('pipelines only problems large enough to hide the passes, in chunks that divide the batch', () => {
    const size = { B: 4, T: 8192, S: 8192, N: 16, K: 16, H: 128 };
    assert.equal(pipelineChunks(size), 4);
    assert.equal(pipelineChunks({ ...size, B: 6 }), 2);
    assert.equal(pipelineChunks({ ...size, B: 3 }), 1);
    assert.equal(pipelineChunks({ ...size, T: 2048, N: 8, H: 64 }), 1); // the codelab's largest
  });
});
