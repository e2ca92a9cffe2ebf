/**
 * cuDNN's CUDA-graph route (src/backends/cuda/cudnn/cuda-graph.ts) on the stand-in driver and cuDNN: a
 * variant pack's first call executes, its second populates and instantiates a graph, later ones are one
 * cuGraphLaunch; a new scale on the same pointers updates the graph; a plan cuDNN refuses keeps to
 * cudnnBackendExecute; ATTNLAB_CUDNN_CUDA_GRAPH=0 turns the route off. The stand-in's graph records what
 * cuDNN would have run when it was populated, and its launch reports that, so each check reads the
 * pointers and scale the graph's kernels would get.
 */
import assert from 'node:assert/strict';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import koffi from 'koffi';
import { validateAttention } from '../../src/api/validate.js';
import { runCudnnAttention } from '../../src/backends/cuda/cudnn/backend.js';
import { graphRouteStats } from '../../src/backends/cuda/cudnn/cuda-graph.js';
import { clearMemoryPlanCache } from '../../src/backends/cuda/cudnn/plan-cache.js';
import type { AttentionOptions, AttentionProblem } from '../../src/backends/problem.js';
import { reloadConfig } from '../../src/config.js';
import { randomNormal } from '../../src/tensor/random.js';
import type { Tensor } from '../../src/tensor/tensor.js';
import { libraryCallsDuring, useFakeCudaStack } from './fake-cuda.js';

const { dir, skip } = useFakeCudaStack('attnlab-cudnn-graph-', { cudnnGraph: true });

interface Bound {
  ptr: string;
  byValue: number;
  value: number | string | null;
}

function lastRun(): Record<string, Bound> {
  const lib = koffi.load(join(dir, 'libcudnn.so.9'));
  return JSON.parse(lib.func('const char *fake_last_execute()')() as string);
}

/** A device problem of B=1 N=K=2 H=32 with T=S=`length` (each test its own length: its own plan). */
function problem(length: number, options: AttentionOptions = {}): AttentionProblem {
  const [q, k, v] = [1, 2, 3].map((seed) =>
    randomNormal([1, length, 2, 32], { seed, dtype: 'bfloat16' }).to('cuda'),
  );
  return validateAttention(q, k, v, options);
}

/** Runs `p` once, returning its library calls, what the enqueued work read, and the output. */
function call(p: AttentionProblem): {
  calls: Record<string, number>;
  bound: Record<string, Bound>;
  output: Tensor;
} {
  const { calls, result } = libraryCallsDuring(dir, () => runCudnnAttention(p));
  return { calls, bound: lastRun(), output: result.output };
}

function pointers(bound: Record<string, Bound>): string[] {
  return Object.values(bound).map((b) => b.ptr);
}

describe("cuDNN's CUDA-graph route", { skip }, () => {
  it('a pointer set executes once, becomes a graph on its second call, and is one launch after', () => {
    const p = problem(16);
    const first = call(p);
    assert.equal(first.calls.cudnnBackendExecute, 1, JSON.stringify(first.calls));
    const firstOutput = first.output.buffer.ptr;
    first.output.dispose();
    const second = call(p);
    assert.equal(second.output.buffer.ptr, firstOutput, "the pool hands back the last output's block");
    for (const name of [
      'cudnnBackendPopulateCudaGraph',
      'cuGraphCreate',
      'cuGraphInstantiateWithFlags',
      'cuGraphLaunch',
    ])
      assert.equal(second.calls[name], 1, `${name}: ${JSON.stringify(second.calls)}`);
    assert.equal(second.calls.cudnnBackendExecute, undefined);
    assert.deepEqual(second.bound, first.bound, 'the graph runs what execute ran');
    second.output.dispose();
    const third = call(p);
    assert.deepEqual(third.calls, { cuGraphLaunch: 1 });
    assert.deepEqual(third.bound, first.bound);
    for (const t of [p.query, p.key, p.value])
      assert.ok(pointers(third.bound).includes(String(t.buffer.ptr)));
    assert.ok(pointers(third.bound).includes(String(third.output.buffer.ptr)));
    third.output.dispose();
  });

  it('a new scale on the same pointers updates the graph, and the launch reads the new scale', () => {
    const p = problem(24);
    for (let i = 0; i < 3; i++) call(p).output.dispose();
    for (const scale of [0.25, 2, 0.25]) {
      const q = { ...p, scale };
      const updated = call(q);
      assert.deepEqual(
        updated.calls,
        { cudnnBackendUpdateCudaGraph: 1, cuGraphExecUpdate_v2: 1, cuGraphLaunch: 1 },
        `scale ${scale}`,
      );
      assert.deepEqual(
        Object.values(updated.bound)
          .filter((b) => b.byValue)
          .map((b) => b.value),
        [scale],
      );
      updated.output.dispose();
      const again = call(q);
      assert.deepEqual(again.calls, { cuGraphLaunch: 1 });
      again.output.dispose();
    }
  });

  it('pointers that change every call stay on cudnnBackendExecute and build no graph', () => {
    const p = problem(32);
    const kept: Tensor[] = [];
    for (let i = 0; i < 4; i++) {
      const r = call(p);
      const graphCalls = Object.keys(r.calls).filter((name) => /Graph/.test(name));
      assert.deepEqual(graphCalls, [], `call ${i}: a new output block each call`);
      assert.equal(r.calls.cudnnBackendExecute, 1);
      assert.ok(pointers(r.bound).includes(String(r.output.buffer.ptr)));
      kept.push(r.output);
    }
    for (const t of kept) t.dispose();
  });

  it('the graphs of a plan dropped from memory are destroyed with it', () => {
    const p = problem(40);
    for (let i = 0; i < 3; i++) call(p).output.dispose();
    const { calls } = libraryCallsDuring(dir, () => clearMemoryPlanCache());
    assert.ok(
      (calls.cuGraphExecDestroy ?? 0) >= 1 && calls.cuGraphExecDestroy === calls.cuGraphDestroy,
      JSON.stringify(calls),
    );
    const r = call(p);
    assert.equal(r.calls.cudnnBackendExecute, 1, 'a plan taken again starts over');
    r.output.dispose();
  });

  it('where cuDNN refuses the route, the plan keeps to execute and ATTNLAB_DEBUG=1 says so once', () => {
    const said: string[] = [];
    const error = console.error;
    process.env.FAKE_CUDNN_CUDA_GRAPH = 'refuse';
    process.env.ATTNLAB_DEBUG = '1';
    reloadConfig();
    console.error = (...args: unknown[]) => said.push(args.join(' '));
    try {
      const p = problem(48);
      const refusals = graphRouteStats.refusals;
      const all = Array.from({ length: 4 }, () => {
        const r = call(p);
        r.output.dispose();
        return r;
      });
      assert.equal(all[1].calls.cudnnBackendPopulateCudaGraph, 1);
      assert.equal(all[1].calls.cudnnBackendExecute, 1);
      for (const r of all.slice(2)) assert.deepEqual(r.calls, { cudnnBackendExecute: 1 });
      assert.deepEqual(all[3].bound, all[0].bound);
      assert.equal(graphRouteStats.refusals, refusals + 1);
      const lines = said.filter((line) => line.includes('no CUDA graph'));
      assert.equal(lines.length, 1, said.join('\n'));
      assert.match(lines[0], /native CUDA graph API/);
    } finally {
      console.error = error;
      delete process.env.FAKE_CUDNN_CUDA_GRAPH;
      delete process.env.ATTNLAB_DEBUG;
      reloadConfig();
    }
  });

  it('ATTNLAB_CUDNN_CUDA_GRAPH=0 executes every call, binding what the graph route binds', () => {
    const p = problem(56);
    const viaGraph = Array.from({ length: 3 }, () => {
      const r = call(p);
      r.output.dispose();
      return r;
    });
    assert.deepEqual(viaGraph[2].calls, { cuGraphLaunch: 1 });
    process.env.ATTNLAB_CUDNN_CUDA_GRAPH = '0';
    reloadConfig();
    try {
      for (let i = 0; i < 3; i++) {
        const r = call(p);
        assert.deepEqual(r.calls, { cudnnBackendExecute: 1 });
        assert.deepEqual(r.bound, viaGraph[2].bound);
        r.output.dispose();
      }
    } finally {
      delete process.env.ATTNLAB_CUDNN_CUDA_GRAPH;
      reloadConfig();
    }
  });
});
