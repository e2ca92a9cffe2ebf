/**
 * contextParallelAttention: attention over a sequence split across the ranks of a RingGroup (Ring
 * Attention, arXiv 2310.01889; TransformerEngine's context parallelism with cp_comm_type="p2p").
 * Validates once, then runs the ring (ring-run.ts) with the device's RingOps and the group's transport.
 * shardSequence / gatherSequence convert between a whole sequence and the load-balanced shards.
 */
import { checkKeys, checkOptionsObject, describeValue, snapshotList } from '../arguments.js';
import { cudaRingOps } from '../backends/cuda/ring/ops.js';
import type { AttentionOptions, Implementation } from '../backends/problem.js';
import type { RingOps } from '../backends/ring-backend.js';
import { InvalidArgumentError, UnsupportedError } from '../errors.js';
import { checkTensor, type Tensor } from '../tensor/tensor.js';
import { asModifier, checkModifiers } from '../variants/check.js';
import type { MaskMod, ScoreMod } from '../variants/modifiers.js';
import { checkLengths } from './kv-layout.js';
import { checkGroup, type RingGroup, transportOf } from './ring-group.js';
import { hostRingOps } from './ring-ops.js';
import { type RingProblem, runRing } from './ring-run.js';
import { chunksOf } from './ring-schedule.js';
import { ATTENTION_OPTION_ALIASES, ATTENTION_OPTION_KEYS, validateAttention } from './validate.js';

/** The modifiers as given (validated against the global sizes): each block call shifts them to its rows. */
function checkModifierOptions(
  options: { scoreMod?: ScoreMod | string; maskMod?: MaskMod | string },
  sizes: { B: number; N: number; T: number; S: number },
  device: 'cpu' | 'cuda' | 'webgpu',
  alignment: 'top_left' | 'bottom_right',
): { scoreMod?: ScoreMod; maskMod?: MaskMod } {
  // A causal()/slidingWindow() mask is already the shards' built-in causal flag or window (validateAttention).
  const { builtin } = checkModifiers(options, sizes, device, alignment);
  return {
    ...(options.scoreMod !== undefined && { scoreMod: asModifier('scoreMod', options.scoreMod) as ScoreMod }),
    ...(options.maskMod !== undefined &&
      !builtin && { maskMod: asModifier('maskMod', options.maskMod) as MaskMod }),
  };
}

/** attention's options that a sharded call takes, and the group. */
export interface ContextParallelOptions
  extends Pick<
    AttentionOptions,
    | 'scale'
    | 'isCausal'
    | 'causalAlignment'
    | 'querySeqLengths'
    | 'keyValueSeqLengths'
    | 'localWindowSize'
    | 'implementation'
    | 'float32Precision'
    | 'returnLogSumExp'
    | 'scoreMod'
    | 'maskMod'
  > {
  /** The ranks, one shard each: RingGroup.loopback(P) or RingGroup.nccl(devices). */
  group: RingGroup;
}

export interface ContextParallelResult {
  /** Each rank's output shard (B, T/P, N, Hv) in the query's dtype, on the rank's device. */
  readonly outputs: Tensor[];
  /** Each rank's log-sum-exp shard (B, T/P, N) float32, when returnLogSumExp was set. */
  readonly logSumExps?: Tensor[];
  /** The backend(s) and kernel variants the block calls ran, each once. */
  readonly backends: Implementation[];
  readonly variants: string[];
}

/** attention options this call refuses: they would need sharding of their own. */
const REFUSED = ['bias', 'mask', 'blockMask', 'blockTable', 'querySeqOffsets', 'keyValueSeqOffsets'] as const;

/**
 * Attention with `attention`'s semantics over a sequence split across P ranks: rank r holds query
 * rows and key/value rows of chunks r and 2P−1−r of 2P equal chunks (the load-balanced layout that
 * `shardSequence` makes), and gets the output rows of the same chunks. Key/value shards travel round
 * the ring (rank r sends to r+1) while each rank computes attention against the shard it holds;
 * the partial results are merged by their log-sum-exp. Lengths, windows and the causal alignment are
 * of the GLOBAL sequence (T = P·T_shard, S = P·S_shard); T and S must be divisible by 2P.
 *
 * query[r] (B, T/P, N, H), key[r] (B, S/P, K, H), value[r] (B, S/P, K, Hv); N % K == 0.
 *
 * @example
 * const group = RingGroup.loopback(2);
 * const q = randomNormal([1, 64, 4, 32], { seed: 0 });
 * const k = randomNormal([1, 64, 2, 32], { seed: 1 });
 * const v = randomNormal([1, 64, 2, 32], { seed: 2 });
 * const { outputs } = contextParallelAttention(shardSequence(q, 2), shardSequence(k, 2), shardSequence(v, 2), { group, isCausal: true });
 * const out = gatherSequence(outputs); // equals attention(q, k, v, { isCausal: true }).output
 */
export function contextParallelAttention(
  query: readonly Tensor[],
  key: readonly Tensor[],
  value: readonly Tensor[],
  options: ContextParallelOptions,
): ContextParallelResult {
  const checked = validateContextParallel(query, key, value, options);
  const { problem, group, returnLogSumExp } = checked;
  const transport = transportOf(group, checked.device);
  // The validated copies of the shard lists, not the caller's arrays (read once, in validateContextParallel).
  for (const [name, list] of [
    ['query', problem.query],
    ['key', problem.key],
    ['value', problem.value],
  ] as const)
    list.forEach((t, r) => {
      transport.checkShard?.(`${name}[${r}]`, r, t);
    });
  const ops: RingOps = checked.device === 'cpu' ? hostRingOps : cudaRingOps;
  const out = runRing(problem, ops, transport);
  if (!returnLogSumExp) for (const t of out.logSumExps) t.dispose();
  return {
    outputs: out.outputs,
    logSumExps: returnLogSumExp ? out.logSumExps : undefined,
    backends: out.backends as Implementation[],
    variants: out.variants,
  };
}

/** The one validation of contextParallelAttention's arguments; exported for the bench. */
export function validateContextParallel(
  query: unknown,
  key: unknown,
  value: unknown,
  optionsIn: unknown,
): { problem: RingProblem; group: RingGroup; device: 'cpu' | 'cuda'; returnLogSumExp: boolean } {
  const options = checkOptionsObject<ContextParallelOptions>('options', optionsIn, 'an object with a group');
  if (optionsIn === undefined) throw new InvalidArgumentError('options.group', 'a RingGroup', 'undefined');
  // Keys first, this call's own (group among them): a misspelt `groups` was reported as a missing group.
  // attention's keys (those it refuses below included, to say why) and its aliases: `is_causal` → isCausal.
  checkKeys('options', options, ['group', ...ATTENTION_OPTION_KEYS], ATTENTION_OPTION_ALIASES);
  for (const name of REFUSED) {
    if ((options as unknown as Record<string, unknown>)[name] !== undefined) {
      throw new UnsupportedError(
        'contextParallelAttention',
        `${name} is not sharded across ranks (use attention on the gathered sequence, or lengths and windows)`,
      );
    }
  }
  const { group, querySeqLengths, keyValueSeqLengths, ...local } = options;
  checkGroup(group); // before anything else: its size says how many shards to expect
  const P = group.size;
  // Each list read once into a frozen copy: the problem keeps the copy, never the caller's array.
  const shards = (name: string, given: unknown): Tensor[] => {
    const list = snapshotList(name, given, `an array of ${P} shards (one per rank, P=${P})`);
    if (list.length !== P)
      throw new InvalidArgumentError(
        name,
        `an array of ${P} shards (one per rank, P=${P})`,
        describeValue(list),
      );
    // Every index, holes included (forEach skips a hole, which then reached attention as 'query').
    for (let r = 0; r < P; r++) checkTensor(`${name}[${r}]`, list[r]);
    return list as Tensor[];
  };
  const q = shards('query', query);
  const k = shards('key', key);
  const v = shards('value', value);
  const arrays = [
    ['query', q],
    ['key', k],
    ['value', v],
  ] as const;
  // Each rank's shards must be a valid attention call on their own (dtypes, heads, devices, options).
  const first = validateAttention(q[0], k[0], v[0], local);
  if (first.device === 'webgpu') {
    throw new UnsupportedError(
      'contextParallelAttention',
      'the ring runs on cpu and cuda; the shards are on webgpu',
    );
  }
  for (let r = 1; r < P; r++) {
    validateAttention(q[r], k[r], v[r], local);
    for (const [name, list] of arrays) {
      const t = (list as Tensor[])[r];
      const t0 = (list as Tensor[])[0];
      if (t.shape.join() !== t0.shape.join() || t.dtype !== t0.dtype || t.device !== t0.device)
        throw new InvalidArgumentError(
          `${name}[${r}]`,
          `the shape, dtype and device of ${name}[0] ([${t0.shape.join(', ')}] ${t0.dtype} ${t0.device})`,
          `[${t.shape.join(', ')}] ${t.dtype} ${t.device}`,
        );
    }
  }
  if (!first.batched)
    throw new InvalidArgumentError('query[0]', 'rank 4 shards (B, T/P, N, H)', `rank ${q[0].rank}`);
  const T = P * first.T;
  const S = P * first.S;
  for (const [name, rows, letter] of [
    ['query', first.T, 'T'],
    ['key', first.S, 'S'],
  ] as const) {
    if (rows % 2 !== 0)
      throw new InvalidArgumentError(
        name,
        `${letter} = P·${letter}_shard divisible by 2P=${2 * P} (rank r holds chunks r and 2P−1−r of ${letter}/(2P) rows)`,
        `${letter}_shard=${rows}, ${letter}=${T === 0 ? 0 : P * rows}`,
      );
  }
  // Modifiers index the GLOBAL sequence: checked against its sizes here; each block call reads them at its
  // rows' global positions (ring-run.ts).
  const modifiers = checkModifierOptions(
    local,
    { B: first.B, N: first.N, T, S },
    first.device,
    first.alignment,
  );
  const problem: RingProblem = {
    ...modifiers,
    P,
    B: first.B,
    T,
    S,
    N: first.N,
    Hv: first.Hv,
    dtype: first.dtype,
    query: q,
    key: k,
    value: v,
    scale: first.scale,
    causal: first.causal,
    alignment: first.alignment,
    window: first.window,
    querySeqLengths: checkLengths('querySeqLengths', querySeqLengths, first.B, T, 'T'),
    keyValueSeqLengths: checkLengths('keyValueSeqLengths', keyValueSeqLengths, first.B, S, 'S'),
    implementation: first.implementation,
    float32Precision: first.float32Precision,
  };
  return { problem, group, device: first.device as 'cpu' | 'cuda', returnLogSumExp: first.returnLogSumExp };
}

/** The RingOps of a tensor's device. */
function opsFor(t: Tensor): RingOps {
  return t.device === 'cpu' ? hostRingOps : cudaRingOps;
}

/**
 * The load-balanced shards of a (B, T, heads, dim) sequence for P ranks: shard r holds chunks r and
 * 2P−1−r of 2P chunks of T/(2P) rows, on the tensor's device. T must be divisible by 2P.
 */
export function shardSequence(tensor: Tensor, ranks: number): Tensor[] {
  const t = checkTensor('tensor', tensor);
  if (!Number.isInteger(ranks) || ranks < 1)
    throw new InvalidArgumentError('ranks', 'a positive integer', describeValue(ranks));
  if (t.rank !== 4) throw new InvalidArgumentError('tensor', 'rank 4 (B, T, heads, dim)', `rank ${t.rank}`);
  const [B, T] = t.shape;
  if (T % (2 * ranks) !== 0 || T === 0)
    throw new InvalidArgumentError('tensor', `T divisible by 2P=${2 * ranks} (and not 0)`, `T=${T}`);
  const chunk = T / (2 * ranks);
  return Array.from({ length: ranks }, (_, r) =>
    opsFor(t).gather(
      chunksOf(r, ranks).map((c) => ({ tensor: t, rows: { start: c * chunk, length: chunk } })),
      0,
      B,
    ),
  );
}

/** The whole sequence again from shardSequence's layout: shards (B, T/P, heads, dim) → (B, T, heads, dim). */
export function gatherSequence(shardsIn: readonly Tensor[]): Tensor {
  // The list read once (a Proxy, a getter or a revoked Proxy is read or refused here, never inside the gather).
  const shards = snapshotList('shards', shardsIn, 'a non-empty array of shards') as readonly Tensor[];
  if (shards.length === 0)
    throw new InvalidArgumentError('shards', 'a non-empty array of shards', describeValue(shardsIn));
  // Every index, holes included: forEach skipped a hole, which then failed inside the gather as a TypeError.
  for (let r = 0; r < shards.length; r++) checkTensor(`shards[${r}]`, shards[r]);
  const P = shards.length;
  const s0 = shards[0];
  if (s0.rank !== 4)
    throw new InvalidArgumentError('shards[0]', 'rank 4 (B, T/P, heads, dim)', `rank ${s0.rank}`);
  shards.forEach((s, r) => {
    if (s.shape.join() !== s0.shape.join() || s.dtype !== s0.dtype || s.device !== s0.device)
      throw new InvalidArgumentError(
        `shards[${r}]`,
        `shards[0]'s shape, dtype and device`,
        `[${s.shape.join(', ')}] ${s.dtype} ${s.device}`,
      );
  });
  if (s0.shape[1] % 2 !== 0)
    throw new InvalidArgumentError('shards[0]', 'an even number of rows (two chunks)', `${s0.shape[1]} rows`);
  const chunk = s0.shape[1] / 2;
  const pieces = [];
  for (let c = 0; c < 2 * P; c++) {
    const rank = c < P ? c : 2 * P - 1 - c;
    pieces.push({ tensor: shards[rank], rows: { start: c < P ? 0 : chunk, length: chunk } });
  }
  return opsFor(s0).gather(pieces, 0, s0.shape[0]);
}
