/**
 * The quantise → attention → dequantise part of an FP8 step, in one batch chunk on attnlab's stream
 * or pipelined in several over two streams (pipelineChunks decides; run.ts calls enqueueChunks).
 */
import type { ProblemSize } from '../../problem.js';
import { CU_EVENT_DISABLE_TIMING, cu, outBigInt } from '../ffi/driver.js';
import { getCudaContext } from '../runtime/context.js';
import { SCALAR_BLOCK_BYTES } from './graph.js';
import { launchDequantise, launchQuantise3 } from './kernels.js';
import { executeFp8Plan, type Fp8Plan } from './plan.js';

/**
 * Problems with at least this many query elements (B·T·N·H) run pipelined when B allows: at B=4,
 * T=8192, N=16, H=128 (2^26) the quantise and dequantise passes take 0.2 of 2.6 ms; at the codelab's
 * largest sweep shape (2^22) attention is 30× shorter and a chunk would not fill the GPU.
 */
const PIPELINE_MIN_QUERY_ELEMENTS = 2 ** 25;

/**
 * How many batch chunks the step splits into (1: not pipelined). Within a chunk, quantise →
 * attention → dequantise depend on each other; across chunks they do not, so the memory-bound
 * passes of one chunk (on the side stream) run beside the compute-bound attention of another, and
 * only the first chunk's quantise and the last one's dequantise stay on the critical path.
 */
export function pipelineChunks(size: ProblemSize): number {
  const { B, T, N, H } = size;
  if (B * T * N * H < PIPELINE_MIN_QUERY_ELEMENTS) return 1;
  return [4, 2].find((chunks) => B % chunks === 0) ?? 1;
}

/** Events that order the two streams of a pipelined step, made once, recorded again each step. */
let streamEvents: { fork: bigint; join: bigint; quantised: bigint[]; attended: bigint[] } | undefined;

function pipelineEvents(chunks: number): NonNullable<typeof streamEvents> {
  const make = () => outBigInt((slot) => cu().cuEventCreate(slot, CU_EVENT_DISABLE_TIMING));
  streamEvents ??= { fork: make(), join: make(), quantised: [], attended: [] };
  while (streamEvents.quantised.length < chunks) {
    streamEvents.quantised.push(make());
    streamEvents.attended.push(make());
  }
  return streamEvents;
}

/** Device pointers of one step's buffers, and their sizes in elements. */
export interface StepBuffers {
  readonly inputs: readonly [bigint, bigint, bigint];
  readonly quantised: readonly [bigint, bigint, bigint];
  readonly o8: bigint;
  readonly output: bigint;
  /** Float32 (B,N,T) log-sum-exp when the plan writes it (a residual of the FP8 backward): B·N·T rows. */
  readonly stats?: { readonly ptr: bigint; readonly rows: number };
  readonly blocks: bigint;
  /** Sequence lengths per batch element (int32), when the problem has padding. */
  readonly lengths: readonly [bigint, bigint] | null;
  readonly batch: number;
  readonly queryElements: number;
  readonly keyValueElements: number;
}

/**
 * Quantise, attention and dequantise of `chunks` equal batch chunks. With one chunk, all on the main
 * stream. With more, the side stream forks from the main one, quantises every chunk (chunk c's
 * attention waits for chunk c's quantise) and dequantises chunk c once its attention is done, then
 * joins back: later work on the main stream, and the memory pool's reuse of these buffers, come
 * after all of it. Chunk c's graph writes its amax_s and amax_o into block c.
 */
export function enqueueChunks(plan: Fp8Plan, buffers: StepBuffers, chunks: number, attnScale: number): void {
  const { stream: main, sideStream: side } = getCudaContext();
  const stream = chunks === 1 ? main : side;
  const events = chunks === 1 ? null : pipelineEvents(chunks);
  const [q, kv] = [buffers.queryElements / chunks, buffers.keyValueElements / chunks];
  const offset = (pointer: bigint, elements: number, c: number, bytes: number) =>
    pointer + BigInt(c * elements * bytes);
  const d = cu();
  if (events) {
    d.cuEventRecord(events.fork, main);
    d.cuStreamWaitEvent(side, events.fork, 0);
  }
  const quantise = (c: number) => {
    const [qIn, kIn, vIn] = buffers.inputs;
    const [q8, k8, v8] = buffers.quantised;
    launchQuantise3(
      [offset(qIn, q, c, 2), offset(kIn, kv, c, 2), offset(vIn, kv, c, 2)],
      [offset(q8, q, c, 1), offset(k8, kv, c, 1), offset(v8, kv, c, 1)],
      q,
      kv,
      buffers.blocks, // every chunk's scales, and the amax of Q, K, V across chunks, are in block 0
      false,
      stream,
    );
    if (events) d.cuEventRecord(events.quantised[c], side);
  };
  try {
    for (let c = 0; c < chunks; c++) if (events || c === 0) quantise(c);
    for (let c = 0; c < chunks; c++) {
      if (events) d.cuStreamWaitEvent(main, events.quantised[c], 0);
      const block = offset(buffers.blocks, SCALAR_BLOCK_BYTES, c, 1);
      executeFp8Plan(
        plan,
        {
          q8: offset(buffers.quantised[0], q, c, 1),
          k8: offset(buffers.quantised[1], kv, c, 1),
          v8: offset(buffers.quantised[2], kv, c, 1),
          o8: offset(buffers.o8, q, c, 1),
          stats: buffers.stats && offset(buffers.stats.ptr, buffers.stats.rows / chunks, c, 4),
          scalarBlock: block,
          seqLenQ: buffers.lengths?.[0] && offset(buffers.lengths[0], buffers.batch / chunks, c, 4),
          seqLenKv: buffers.lengths?.[1] && offset(buffers.lengths[1], buffers.batch / chunks, c, 4),
        },
        attnScale,
      );
      if (events) {
        d.cuEventRecord(events.attended[c], main);
        d.cuStreamWaitEvent(side, events.attended[c], 0);
      }
      launchDequantise(offset(buffers.o8, q, c, 1), offset(buffers.output, q, c, 2), q, block, stream);
    }
  } finally {
    // Joined even when a launch failed half-way: the caller then releases the step's buffers to the
    // main stream's pool, and the side stream's work on them must come first.
    if (events) {
      d.cuEventRecord(events.join, side);
      d.cuStreamWaitEvent(main, events.join, 0);
    }
  }
}
