/**
 * A flash decode step's launches as one captured CUDA graph (src/backends/cuda/runtime/launch-graph.ts) on
 * the stand-in driver, whose stream capture records the kernels launched and whose graph launch runs them:
 * the first call of a set of arguments launches, the second captures and launches the graph, later ones are
 * one cuGraphLaunch; arguments seen twice again are captured into the same executable graph
 * (cuGraphExecUpdate); arguments that change every call never capture; a capture the driver invalidates
 * runs the launches plainly and ends the route for that plan; ATTNLAB_LAUNCH_GRAPH=0 launches.
 */
import assert from 'node:assert/strict';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import koffi from 'koffi';
import { attention } from '../../src/api/attention.js';
import { launchGraphStats } from '../../src/backends/cuda/runtime/launch-graph.js';
import { seededInput } from '../../src/bench/measure.js';
import { reloadConfig } from '../../src/config.js';
import type { Tensor } from '../../src/tensor/tensor.js';
import { libraryCallsDuring, useFakeCudaStack } from './fake-cuda.js';

const { dir, skip } = useFakeCudaStack('attnlab-launch-graph-');

/** A B=1 decode step's query, keys and values: S cached tokens, K=8 N=32 H=128. */
function decodeInputs(S: number): Tensor[] {
  return [
    [1, 32, 1],
    [S, 8, 2],
    [S, 8, 3],
  ].map(([length, heads, seed]) => seededInput([1, length, heads, 128], seed, 'bfloat16').to('cuda'));
}

describe("a decode step's launches as one CUDA graph", { skip }, () => {
  const launches = () => koffi.load(join(dir, 'libcuda.so.1')).func('int fake_launch_count()')() as number;
  const lastLaunch = () =>
    koffi.load(join(dir, 'libcuda.so.1')).func('const char *fake_last_launch()')() as string;

  it('launches, then captures, then launches the graph; the graph runs both kernels', () => {
    const [q, k, v] = decodeInputs(4096);
    const step = () => {
      const r = attention(q, k, v, { implementation: 'flash' });
      r.output.dispose();
      return r.variant;
    };
    const first = libraryCallsDuring(dir, step);
    assert.match(first.result, /\.split\d+$/);
    assert.equal(first.calls.cuLaunchKernel, 2, JSON.stringify(first.calls));
    const plainLast = lastLaunch();
    const second = libraryCallsDuring(dir, step);
    for (const name of [
      'cuStreamBeginCapture_v2',
      'cuStreamEndCapture',
      'cuGraphInstantiateWithFlags',
      'cuGraphLaunch',
    ])
      assert.equal(second.calls[name], 1, `${name}: ${JSON.stringify(second.calls)}`);
    const before = launches();
    const third = libraryCallsDuring(dir, step);
    assert.deepEqual(third.calls, { cuGraphLaunch: 1 });
    assert.equal(launches() - before, 2, 'the split kernel and the combine');
    assert.equal(lastLaunch(), plainLast, 'the combine last, as launched one by one');
    for (const t of [q, k, v]) t.dispose();
  });

  it('new arguments seen twice are captured into the same executable graph', () => {
    const [q, k, v] = decodeInputs(2048);
    const [q2] = decodeInputs(2048);
    const step = (query: Tensor) => () =>
      attention(query, k, v, { implementation: 'flash' }).output.dispose();
    for (let i = 0; i < 3; i++) step(q)();
    const captures = launchGraphStats.captures;
    assert.equal(libraryCallsDuring(dir, step(q2)).calls.cuLaunchKernel, 2, 'a new query: launched');
    const again = libraryCallsDuring(dir, step(q2)).calls;
    assert.equal(again.cuGraphExecUpdate_v2, 1, JSON.stringify(again));
    assert.equal(again.cuGraphInstantiateWithFlags, undefined);
    assert.equal(launchGraphStats.captures, captures + 1);
    assert.deepEqual(libraryCallsDuring(dir, step(q2)).calls, { cuGraphLaunch: 1 });
    for (const t of [q, k, v, q2]) t.dispose();
  });

  it('arguments that change every call (outputs kept) launch every time and never capture', () => {
    const [q, k, v] = decodeInputs(1024);
    const kept: Tensor[] = [];
    const captures = launchGraphStats.captures;
    for (let i = 0; i < 4; i++) {
      const { calls, result } = libraryCallsDuring(dir, () =>
        attention(q, k, v, { implementation: 'flash' }),
      );
      assert.equal(calls.cuLaunchKernel, 2, `call ${i}: ${JSON.stringify(calls)}`);
      assert.equal(calls.cuGraphLaunch, undefined);
      kept.push(result.output);
    }
    assert.equal(launchGraphStats.captures, captures);
    for (const t of [q, k, v, ...kept]) t.dispose();
  });

  it('a capture the driver invalidates runs the launches plainly, and the plan launches plainly from then on', () => {
    const [q, k, v] = decodeInputs(1536);
    const step = () => attention(q, k, v, { implementation: 'flash' }).output.dispose();
    step();
    process.env.FAKE_CUDA_CAPTURE = 'invalidate';
    try {
      const before = launches();
      const { calls } = libraryCallsDuring(dir, step);
      assert.equal(calls.cuStreamEndCapture, 1, JSON.stringify(calls));
      assert.equal(calls.cuGraphLaunch, undefined);
      assert.equal(launches() - before, 2, 'the split kernel and the combine ran once, plainly');
    } finally {
      delete process.env.FAKE_CUDA_CAPTURE;
    }
    for (let i = 0; i < 3; i++) assert.deepEqual(libraryCallsDuring(dir, step).calls, { cuLaunchKernel: 2 });
    for (const t of [q, k, v]) t.dispose();
  });

  it('ATTNLAB_LAUNCH_GRAPH=0 launches the kernels one by one', () => {
    process.env.ATTNLAB_LAUNCH_GRAPH = '0';
    reloadConfig();
    try {
      const [q, k, v] = decodeInputs(3072);
      for (let i = 0; i < 4; i++) {
        const { calls } = libraryCallsDuring(dir, () =>
          attention(q, k, v, { implementation: 'flash' }).output.dispose(),
        );
        if (i > 0) assert.deepEqual(calls, { cuLaunchKernel: 2 }, `call ${i}`);
      }
      for (const t of [q, k, v]) t.dispose();
    } finally {
      delete process.env.ATTNLAB_LAUNCH_GRAPH;
      reloadConfig();
    }
  });
});
