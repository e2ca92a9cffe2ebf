/**
 * The ring runner: every step of ringSchedule on every rank, with the key/value exchange of the next
 * step enqueued before the current step's attention so that the two overlap (the transport puts the
 * exchange on a communication stream; the calls run on each rank's compute stream), and each call's
 * (output, log-sum-exp) merged into the rank's accumulator.
 *
 * Buffers: rank r starts on its own key/value; the exchange writes into one of two receive sets,
 * alternating, so the inputs are never overwritten and the set a step reads is not the one the next
 * exchange writes.
 */
import type { AttentionProblem } from '../backends/problem.js';
import type { Accumulator, RingOps, RingTransport, RowRange } from '../backends/ring-backend.js';
import { Tensor } from '../tensor/tensor.js';
import type { MaskMod, ScoreMod } from '../variants/modifiers.js';
import { atGlobalPositions } from '../variants/positions.js';
import { attention } from './attention.js';
import { chunksOf, type RingCall, type RingStep, ringSchedule } from './ring-schedule.js';

/** A validated context-parallel problem: P shards of (B, T/P, N, H) queries and (B, S/P, K, H) keys. */
export interface RingProblem
  extends Pick<
    AttentionProblem,
    | 'B'
    | 'N'
    | 'Hv'
    | 'dtype'
    | 'scale'
    | 'causal'
    | 'alignment'
    | 'window'
    | 'querySeqLengths'
    | 'keyValueSeqLengths'
    | 'implementation'
    | 'float32Precision'
  > {
  readonly P: number;
  /** Global lengths (P times a shard's rows); lengths, alignment and window refer to these. */
  readonly T: number;
  readonly S: number;
  readonly query: readonly Tensor[];
  readonly key: readonly Tensor[];
  readonly value: readonly Tensor[];
  /** Modifiers written for global positions (b, q, kv of the whole sequence); each call reads them there. */
  readonly scoreMod?: ScoreMod;
  readonly maskMod?: MaskMod;
}

export interface RingOutput {
  readonly outputs: Tensor[];
  readonly logSumExps: Tensor[];
  /** The backends and kernel variants the calls ran (each once, in order of first use). */
  readonly backends: string[];
  readonly variants: string[];
  /** Attention calls made, over all ranks and steps. */
  readonly calls: number;
}

/** Batches that share one diagonal offset run as one group (all of them unless bottom_right padding). */
interface BatchGroup {
  readonly b0: number;
  readonly nb: number;
  readonly steps: RingStep[][];
}

function batchGroups(p: RingProblem): BatchGroup[] {
  const offsetOf = (b: number) =>
    p.alignment === 'bottom_right' ? (p.keyValueSeqLengths?.[b] ?? p.S) - (p.querySeqLengths?.[b] ?? p.T) : 0;
  const schedule = (offset: number) =>
    ringSchedule({ P: p.P, T: p.T, S: p.S, causal: p.causal, offset, window: p.window });
  const offsets = Array.from({ length: p.B }, (_, b) => offsetOf(b));
  if (offsets.every((o) => o === offsets[0])) return [{ b0: 0, nb: p.B, steps: schedule(offsets[0]) }];
  const byOffset = new Map<number, RingStep[][]>();
  return offsets.map((o, b) => {
    if (!byOffset.has(o)) byOffset.set(o, schedule(o));
    return { b0: b, nb: 1, steps: byOffset.get(o)! };
  });
}

/**
 * Valid rows of `rows` (shard rows of a rank holding global chunks `chunks` of `chunk` rows each)
 * under a global valid length: a prefix, because the shard's second chunk lies after its first.
 */
function validRows(rows: RowRange, chunks: readonly [number, number], chunk: number, valid: number): number {
  let count = 0;
  for (const u of [0, 1]) {
    const from = Math.max(rows.start, u * chunk);
    const to = Math.min(rows.start + rows.length, (u + 1) * chunk);
    if (from >= to) continue;
    const globalFrom = chunks[u] * chunk + (from - u * chunk);
    count += Math.min(Math.max(valid - globalFrom, 0), to - from);
  }
  return count;
}

/** Benchmark knobs (benchmarks/harnesses/context-parallel.ts); contextParallelAttention passes none. */
export interface RunOptions {
  /** false: leave the exchange out (each rank meets its own shard P times): the compute alone, wrong results. */
  readonly exchange?: boolean;
  /** Wraps each rank's work of each step (its calls and merges), e.g. to time it with events. */
  readonly around?: (step: number, rank: number, work: () => void) => void;
}

export function runRing(
  p: RingProblem,
  ops: RingOps,
  transport: RingTransport,
  options: RunOptions = {},
): RingOutput {
  const exchange = options.exchange ?? true;
  const { P } = p;
  const tc = p.T / (2 * P);
  const sc = p.S / (2 * P);
  const groups = batchGroups(p);
  const acc = p.query.map((q, r) =>
    transport.onRank(r, () => ops.accumulator({ B: p.B, T: q.shape[1], N: p.N, Hv: p.Hv })),
  );
  const backends = new Set<string>();
  const variants = new Set<string>();
  let calls = 0;
  let current: (readonly Tensor[])[] = p.key.map((k, r) => [k, p.value[r]]);
  const receive =
    exchange && P > 1
      ? [0, 1].map(() =>
          current.map((pair, r) => pair.map((t) => transport.onRank(r, () => transport.like(r, t)))),
        )
      : [];
  try {
    for (let step = 0; step < P; step++) {
      const next = receive[step % 2];
      if (next && step < P - 1) transport.shift(current, next);
      for (let rank = 0; rank < P; rank++) {
        const [k, v] = current[rank];
        const work = () => {
          for (const group of groups) {
            const at = group.steps[step][rank];
            for (const call of at.calls) {
              const done = runCall(p, ops, acc[rank], group, call, [rank, at.source], [k, v], tc, sc);
              if (!done) continue;
              calls++;
              backends.add(done.backend);
              variants.add(done.variant);
            }
          }
        };
        transport.onRank(rank, () => (options.around ? options.around(step, rank, work) : work()));
      }
      if (next && step < P - 1) {
        transport.wait();
        current = next;
      }
    }
    const finished = acc.map((a, r) => transport.onRank(r, () => ops.finish(a, p.dtype)));
    return {
      outputs: finished.map((f) => f.output),
      logSumExps: finished.map((f) => f.logSumExp),
      backends: [...backends],
      variants: [...variants],
      calls,
    };
  } finally {
    // Stream-ordered: every compute stream waited for the last exchange before its last step.
    for (const set of receive) for (const pair of set) for (const t of pair) t.dispose();
  }
}

/** Rows of batches of `t`: `t` itself when that is all of it (no copy). */
function slice(ops: RingOps, t: Tensor, group: BatchGroup, rows: RowRange): Tensor {
  const [B, T] = t.shape;
  if (group.nb === B && rows.start === 0 && rows.length === T) return t;
  return ops.gather([{ tensor: t, rows }], group.b0, group.nb);
}

/** One call of the schedule on one batch group; null when padding leaves it nothing to compute. */
function runCall(
  p: RingProblem,
  ops: RingOps,
  acc: Accumulator,
  group: BatchGroup,
  call: RingCall,
  [rank, source]: readonly [number, number],
  [key, value]: readonly Tensor[],
  tc: number,
  sc: number,
): { backend: string; variant: string } | null {
  const lengths = (
    all: Int32Array | null,
    rows: RowRange,
    chunks: readonly [number, number],
    chunk: number,
  ) => {
    if (!all) return null;
    return Int32Array.from({ length: group.nb }, (_, b) => validRows(rows, chunks, chunk, all[group.b0 + b]));
  };
  const qLens = lengths(p.querySeqLengths, call.queryRows, chunksOf(rank, p.P), tc);
  const kvLens = lengths(p.keyValueSeqLengths, call.keyRows, chunksOf(source, p.P), sc);
  if (qLens?.every((l) => l === 0) || kvLens?.every((l) => l === 0)) return null;
  const q = slice(ops, p.query[rank], group, call.queryRows);
  const k = slice(ops, key, group, call.keyRows);
  const v = slice(ops, value, group, call.keyRows);
  const made = [q, k, v].filter((t, i) => t !== [p.query[rank], key, value][i]);
  try {
    const full = (lens: Int32Array | null, size: number) => (lens?.some((l) => l < size) ? lens : undefined);
    const modifiers = globalModifiers(
      p,
      q.device,
      made,
      group,
      [call.queryRows, chunksOf(rank, p.P), tc],
      [call.keyRows, chunksOf(source, p.P), sc],
    );
    const r = attention(q, k, v, {
      ...modifiers,
      scale: p.scale,
      isCausal: call.causal,
      localWindowSize: call.window ? [call.window.left, call.window.right] : undefined,
      querySeqLengths: full(qLens, call.queryRows.length),
      keyValueSeqLengths: full(kvLens, call.keyRows.length),
      implementation: p.implementation,
      float32Precision: p.float32Precision,
      returnLogSumExp: true,
    });
    try {
      ops.merge(acc, group.b0, r.output, r.logSumExp!, call.queryRows.start);
    } finally {
      r.output.dispose();
      r.logSumExp?.dispose();
    }
    return { backend: r.backend, variant: r.variant };
  } finally {
    for (const t of made) t.dispose();
  }
}

/** The global position of each shard row of `rows` (a rank holding chunks `chunks` of `chunk` rows). */
function globalRows(rows: RowRange, chunks: readonly [number, number], chunk: number): number[] {
  return Array.from({ length: rows.length }, (_, i) => {
    const x = rows.start + i;
    return x < chunk ? chunks[0] * chunk + x : chunks[1] * chunk + (x - chunk);
  });
}

/** The problem's modifiers reading this call's global positions (the tables go into `made`), or none. */
function globalModifiers(
  p: RingProblem,
  device: Tensor['device'],
  made: Tensor[],
  group: BatchGroup,
  queries: readonly [RowRange, readonly [number, number], number],
  keys: readonly [RowRange, readonly [number, number], number],
): { scoreMod?: ScoreMod; maskMod?: MaskMod } {
  if (!p.scoreMod && !p.maskMod) return {};
  const table = (values: number[]) => {
    const host = Tensor.fromArray(values, [values.length], 'int32');
    const t = device === 'cpu' ? host : host.to(device);
    made.push(t);
    if (t !== host) host.dispose();
    return t;
  };
  const tables = {
    b: table(Array.from({ length: group.nb }, (_, i) => group.b0 + i)),
    q: table(globalRows(...queries)),
    kv: table(globalRows(...keys)),
  };
  return {
    ...(p.scoreMod && { scoreMod: atGlobalPositions(p.scoreMod, tables) }),
    ...(p.maskMod && { maskMod: atGlobalPositions(p.maskMod, tables) }),
  };
}
