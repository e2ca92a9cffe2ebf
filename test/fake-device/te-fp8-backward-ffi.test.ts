/**
 * The module's FP8 backward through the FFI on a machine without a GPU, against the stand-in
 * libcuda/libcudnn (cudnn-fake.c) and NVRTC (te-fake-nvrtc.c): the forward keeps its residuals and
 * statistics, the backward graph is accepted op by op (ranks, matmul shapes, attribute types), its
 * variant pack binds every non-virtual tensor once, it reads the forward's Q8, K8, V8, O8 and Stats
 * where the forward wrote them, and its 16 scalars sit at their slots of one block holding the
 * forward's descales and the backward's scales. Kernels do not run there; numbers are the GPU test's.
 */
import assert from 'node:assert/strict';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import koffi from 'koffi';
import { validateAttention } from '../../src/api/validate.js';
import { loadCudnn } from '../../src/backends/cuda/ffi/cudnn.js';
import { cu } from '../../src/backends/cuda/ffi/driver.js';
import { BACKWARD_SLOTS, buildFp8BackwardGraph } from '../../src/backends/cuda/fp8/backward-graph.js';
import { backwardFeatures } from '../../src/backends/cuda/fp8/backward-run.js';
import { buildFp8Graph, type Fp8Role, fp8GraphFeatures } from '../../src/backends/cuda/fp8/graph.js';
import { getCudaContext } from '../../src/backends/cuda/runtime/context.js';
import { autocast } from '../../src/te/autocast.js';
import { DotProductAttention } from '../../src/te/module.js';
import { DelayedScaling } from '../../src/te/recipe.js';
import { randomNormal } from '../../src/tensor/random.js';
import { useFakeCudaStack } from './fake-cuda.js';

const { dir, skip } = useFakeCudaStack('attnlab-fake-fp8-bwd-');

interface Bound {
  ptr: string;
  byValue: number;
  value: number | string | null;
}

const uidOf = (roles: ReadonlyMap<number, Fp8Role>, kind: string, slot?: number) =>
  String(
    [...roles].find(
      ([, role]) =>
        role.kind === kind && (slot === undefined || (role.kind === 'scalar' && role.slot === slot)),
    )![0],
  );

describe('FP8 backward through the FFI (stand-in libraries)', { skip }, () => {
  it('runs the forward with its statistics kept, then the backward graph on the same residuals', () => {
    const [B, T, N, K, H] = [2, 64, 4, 2, 128];
    const q = randomNormal([B, T, N, H], { seed: 1, dtype: 'bfloat16' }).to('cuda');
    const k = randomNormal([B, T, K, H], { seed: 2, dtype: 'bfloat16' }).to('cuda');
    const v = randomNormal([B, T, K, H], { seed: 3, dtype: 'bfloat16' }).to('cuda');
    const dO = randomNormal([B, T, N, H], { seed: 4, dtype: 'bfloat16' }).to('cuda');
    const attn = new DotProductAttention({ headDim: H, numAttentionHeads: N, numGqaGroups: K });
    const fn = loadCudnn().fn as unknown as Record<string, (...args: unknown[]) => unknown>;
    const lastExecute = koffi.load(join(dir, 'libcudnn.so.9')).func('const char *fake_last_execute()');
    const execute = fn.cudnnBackendExecute;
    const executes: Record<string, Bound>[] = [];
    const blocks: Float32Array[] = [];
    fn.cudnnBackendExecute = (...args: unknown[]) => {
      const status = execute(...args);
      const bound = JSON.parse(lastExecute() as string) as Record<string, Bound>;
      executes.push(bound);
      if (executes.length === 2) {
        // The backward's block, read where its scalars are bound, while it is live (the stand-in's
        // "device" memory is host memory).
        const block = new Float32Array(18 * 4);
        const base = BigInt(bound[uidOf(backwardGraph.roles, 'scalar', 0)].ptr);
        cu().cuMemcpyDtoHAsync_v2(
          new Uint8Array(block.buffer),
          base,
          block.byteLength,
          getCudaContext().stream,
        );
        blocks.push(block);
      }
      return status;
    };
    let r: ReturnType<DotProductAttention['backward']>;
    const problem = validateAttention(q, k, v, { isCausal: true });
    const backwardGraph = buildFp8BackwardGraph(
      backwardFeatures({ problem, dtype8: 'float8_e5m2' } as Parameters<typeof backwardFeatures>[0]),
    );
    try {
      r = autocast({ recipe: new DelayedScaling({ amaxHistoryLen: 3 }) }, () => attn.backward(q, k, v, dO));
    } finally {
      fn.cudnnBackendExecute = execute;
    }
    assert.equal(r.precision, 'fp8');
    assert.equal(r.backend, 'cudnn-fp8');
    assert.match(r.variant, /^cudnn 9\.19\.0 fp8 engine 7 \S+ \+ cudnn 9\.19\.0 fp8 backward engine 7 /);
    assert.equal(r.fp8!.gradients8.dQuery.dtype, 'float8_e5m2');
    assert.deepEqual(r.dKey.shape, [B, T, K, H]);
    assert.equal(r.dValue.dtype, 'bfloat16');
    assert.equal(executes.length, 2, 'one forward graph, one backward graph');

    const forwardGraph = buildFp8Graph({ ...fp8GraphFeatures(problem), stats: true });
    const [forward, backward] = executes;
    const memory = backwardGraph.spec.tensors.filter((t) => !t.virtual);
    assert.equal(Object.keys(backward).length, memory.length, 'every non-virtual tensor bound once');
    for (const role of ['q8', 'k8', 'v8', 'o8', 'stats']) {
      assert.equal(
        backward[uidOf(backwardGraph.roles, role)].ptr,
        forward[uidOf(forwardGraph.roles, role)].ptr,
        `the backward reads the forward's ${role}`,
      );
    }
    const pointer = (kind: string, slot?: number) =>
      BigInt(backward[uidOf(backwardGraph.roles, kind, slot)].ptr);
    const base = pointer('scalar', 0);
    for (const [name, slot] of Object.entries(BACKWARD_SLOTS)) {
      if (slot > BACKWARD_SLOTS.amaxDP) continue; // dO's scale and amax belong to the kernels
      assert.equal(pointer('scalar', slot) - base, BigInt(slot * 16), `${name} at slot ${slot}`);
    }
    const distinct = new Set(['dO8', 'dQ8', 'dK8', 'dV8', 'q8'].map((kind) => pointer(kind)));
    assert.equal(distinct.size, 5, 'dO8 and the three gradients have buffers of their own');
    const byValue = memory.filter((t) => t.byValue).map((t) => backward[String(t.uid)].value);
    // float32(1/√128) printed with 9 digits, and the causal mask's fill.
    assert.deepEqual(byValue.sort(), [0.0883883461, '-inf'].sort());
    // TE's first backward scales (1) and their descales. (The forward's scales come from its report,
    // which kernels write: the stand-in runs none, so the GPU test checks those.)
    const at = (name: keyof typeof BACKWARD_SLOTS) => blocks[0][BACKWARD_SLOTS[name] * 4];
    assert.deepEqual([at('descaleDO'), at('descaleDP')], [1, 1]);
    for (const name of ['scaleDP', 'scaleDQ', 'scaleDK', 'scaleDV', 'scaleDO'] as const)
      assert.equal(at(name), 1);
    assert.equal(attn.fp8State.backwardSteps, 1);
    assert.equal(attn.fp8State.steps, 1);
  });
});
