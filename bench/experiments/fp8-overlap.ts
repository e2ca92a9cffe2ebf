/**
 * Experiment: can the FP8 step hide its quantise and dequantise passes (memory-bound, 0.2 ms at
 * B=4, T=8192, N=16, H=128) behind cuDNN's FP8 attention (compute-bound, 2.4 ms)? Within one step
 * they depend on each other, but batches do not: quantise batch b+1 on a second stream while
 * attention runs on batch b, and dequantise batch b while attention runs on b+1. Each batch runs a
 * B=1 plan with its own scalar block (its own amax_s and amax_o).
 *
 * Prints, in one process: the serial step (quantise, graph, dequantise on one stream) and the
 * chunked two-stream step, both timed with events on the main stream, median of rounds.
 *
 * Run on a GPU: node --import tsx bench/experiments/fp8-overlap.ts
 */

import { validateAttention } from '../../src/api/validate.js';
import { getCudaContext, synchronize } from '../../src/backends/cuda/context.js';
import { CU_EVENT_DEFAULT, cu, outBigInt } from '../../src/backends/cuda/ffi/driver.js';
import { fp8GraphFeatures } from '../../src/backends/cuda/fp8/graph.js';
import { launchDequantise, launchQuantise3 } from '../../src/backends/cuda/fp8/kernels.js';
import { executeFp8Plan, fp8Plan } from '../../src/backends/cuda/fp8/plan.js';
import { allocDevice } from '../../src/backends/cuda/memory.js';
import { problemFlops } from '../../src/backends/problem.js';
import { seededInput } from '../../src/bench/measure.js';
import { summarize } from '../../src/bench/stats.js';
import { calibratedScalarBlock } from './fp8-scalars.js';

const [B, T, N, H] = [4, 8192, 16, 128];
const ITERATIONS = 20;
const d = cu();
const main = getCudaContext().stream;
const side = outBigInt((s) => d.cuStreamCreate(s, 1 /* CU_STREAM_NON_BLOCKING */));
const event = () => outBigInt((s) => d.cuEventCreate(s, CU_EVENT_DEFAULT));
const DISABLE_TIMING = 2;
const marker = () => outBigInt((s) => d.cuEventCreate(s, DISABLE_TIMING));

const q = seededInput([B, T, N, H], 1, 'bfloat16').to('cuda');
const k = seededInput([B, T, N, H], 2, 'bfloat16').to('cuda');
const v = seededInput([B, T, N, H], 3, 'bfloat16').to('cuda');
const n = B * T * N * H;
const perBatch = n / B;
const [q8, k8, v8, o8] = [n, n, n, n].map((bytes) => allocDevice(bytes));
const out = allocDevice(2 * n);

const blocks = Array.from({ length: B }, calibratedScalarBlock);

for (const causal of [false, true]) {
  const p = validateAttention(q, k, v, { isCausal: causal });
  const whole = fp8Plan(fp8GraphFeatures(p));
  const single = fp8Plan({ ...fp8GraphFeatures(p), B: 1 });
  const at = (buffer: { ptr: bigint }, b: number, bytes = 1) => buffer.ptr + BigInt(b * perBatch * bytes);

  const serial = () => {
    launchQuantise3(
      [q.buffer.ptr, k.buffer.ptr, v.buffer.ptr],
      [q8.ptr, k8.ptr, v8.ptr],
      n,
      n,
      blocks[0].ptr,
      false,
    );
    executeFp8Plan(
      whole,
      { q8: q8.ptr, k8: k8.ptr, v8: v8.ptr, o8: o8.ptr, scalarBlock: blocks[0].ptr },
      p.scale,
    );
    launchDequantise(o8.ptr, out.ptr, n, blocks[0].ptr);
  };
  const quantised = Array.from({ length: B }, marker);
  const attended = Array.from({ length: B }, marker);
  const start = marker();
  const sideDone = marker();
  const chunked = () => {
    d.cuEventRecord(start, main);
    d.cuStreamWaitEvent(side, start, 0);
    for (let b = 0; b < B; b++) {
      launchQuantise3(
        [at(q.buffer, b, 2), at(k.buffer, b, 2), at(v.buffer, b, 2)],
        [at(q8, b), at(k8, b), at(v8, b)],
        perBatch,
        perBatch,
        blocks[b].ptr,
        false,
        side,
      );
      d.cuEventRecord(quantised[b], side);
    }
    for (let b = 0; b < B; b++) {
      d.cuStreamWaitEvent(main, quantised[b], 0);
      executeFp8Plan(
        single,
        { q8: at(q8, b), k8: at(k8, b), v8: at(v8, b), o8: at(o8, b), scalarBlock: blocks[b].ptr },
        p.scale,
      );
      d.cuEventRecord(attended[b], main);
      d.cuStreamWaitEvent(side, attended[b], 0);
      launchDequantise(at(o8, b), at(out, b, 2), perBatch, blocks[b].ptr, side);
    }
    d.cuEventRecord(sideDone, side);
    d.cuStreamWaitEvent(main, sideDone, 0);
  };
  const chunkedSerial = () => {
    for (let b = 0; b < B; b++) {
      launchQuantise3(
        [at(q.buffer, b, 2), at(k.buffer, b, 2), at(v.buffer, b, 2)],
        [at(q8, b), at(k8, b), at(v8, b)],
        perBatch,
        perBatch,
        blocks[b].ptr,
        false,
      );
      executeFp8Plan(
        single,
        { q8: at(q8, b), k8: at(k8, b), v8: at(v8, b), o8: at(o8, b), scalarBlock: blocks[b].ptr },
        p.scale,
      );
      launchDequantise(at(o8, b), at(out, b, 2), perBatch, blocks[b].ptr);
    }
  };
  const graphOnly = () =>
    executeFp8Plan(
      whole,
      { q8: q8.ptr, k8: k8.ptr, v8: v8.ptr, o8: o8.ptr, scalarBlock: blocks[0].ptr },
      p.scale,
    );

  const time = (fn: () => void) => {
    for (let i = 0; i < 3; i++) fn();
    synchronize();
    const events = Array.from({ length: ITERATIONS + 1 }, event);
    d.cuEventRecord(events[0], main);
    for (let i = 0; i < ITERATIONS; i++) {
      fn();
      d.cuEventRecord(events[i + 1], main);
    }
    synchronize();
    const ms = new Float32Array(1);
    const times = events.slice(1).map((e, i) => {
      d.cuEventElapsedTime(ms, events[i], e);
      return ms[0];
    });
    return summarize(times).median;
  };
  const flops = problemFlops(p);
  const rows: [string, number[]][] = [
    ['graph alone', []],
    ['serial step', []],
    ['B=1 chunks, one stream', []],
    ['B=1 chunks, two streams', []],
  ];
  const fns = [graphOnly, serial, chunkedSerial, chunked];
  for (let round = 0; round < 3; round++) for (const [i, fn] of fns.entries()) rows[i][1].push(time(fn));
  for (const [name, times] of rows) {
    const ms = Math.min(...times);
    console.log(
      `causal=${causal} ${name.padEnd(26)} ${times.map((t) => t.toFixed(3)).join(' / ')} ms; best ${ms.toFixed(3)} = ${(flops / (ms * 1e-3) / 1e12).toFixed(0)} TFLOP/s`,
    );
  }
}
