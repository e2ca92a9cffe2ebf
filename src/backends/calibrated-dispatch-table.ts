/**
 * The calibrated dispatch table: backends timed on this very GPU, driver and library versions, by
 * `attnlab tune` over a list of shape classes or by ATTNLAB_TUNE=auto the first time a class is seen.
 * `auto` follows an entry of it before any recorded table (device-dispatch-table.ts has the order).
 *
 * A shape class is what decides which backend is fastest — the operation (forward, backward, decode
 * step), dtype, head dims, mask and layout, and the sizes in octaves: T and S for the forward and
 * backward (the H200 record turns from cudnn to flash between T=2k and 8k at H=128), the cached
 * tokens and B for a decode step (bandwidth-bound: the total read decides) — so one timing speaks
 * for every problem of its class. The file is keyed by the GPU (name, UUID), driver and library
 * versions and attnlab's version: an upgrade of any of them starts a new file, since each can change
 * which kernel runs.
 *
 * This module is the device-free part (classes, the file, the timing rule); tuning-registry.ts times
 * real backends with it.
 */
import { createHash } from 'node:crypto';
import { mkdirSync, readFileSync, renameSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import type { AttentionProblem } from './problem.js';

export type TunedOperation = 'forward' | 'backward' | 'decode';

/** What a calibrated file is keyed by: the GPU and every version that can change which kernel runs. */
export interface CalibrationKey {
  readonly gpu: string;
  /** The GPU's UUID where the driver reports it: two cards of one name may differ (clocks, power caps). */
  readonly uuid: string | null;
  readonly computeCapability: string;
  readonly multiprocessors: number;
  readonly memoryBandwidthGBs: number | null;
  /** e.g. 'CUDA 13.0'. */
  readonly driver: string;
  readonly cudnn: string | null;
  readonly nvrtc: string | null;
  readonly attnlab: string;
}

/** One shape class's timing: every backend that supports it, fastest first. */
export interface CalibratedEntry {
  /** Backend names, fastest first. */
  readonly order: readonly string[];
  /** Median device time of one call per backend, in ms. */
  readonly ms: Readonly<Record<string, number>>;
  /** The backends that refused the measured problem, or failed on it, with why. */
  readonly skipped: Readonly<Record<string, string>>;
  /** The problem measured, e.g. 'B=4 T=8192 S=8192 N=16 K=16 H=128 bfloat16 causal'. */
  readonly measured: string;
  /** When (ISO time). */
  readonly at: string;
}

export interface CalibratedTable {
  readonly format: typeof CALIBRATION_FORMAT;
  readonly key: CalibrationKey;
  readonly entries: Readonly<Record<string, CalibratedEntry>>;
}

/** Bumped when a shape class or the file changes meaning: files of another format are ignored. */
export const CALIBRATION_FORMAT = 1;

const octave = (n: number) => Math.round(Math.log2(Math.max(1, n)));

/** The operation `p` is, as the tables see it: a forward call with one query row is a decode step. */
export function operationOf(p: AttentionProblem, backward: boolean): TunedOperation {
  if (backward) return 'backward';
  return p.T === 1 ? 'decode' : 'forward';
}

/**
 * The shape class of `p` for `operation`, e.g. 'forward bfloat16 H128 Hv128 causal-tl dense G1 T2^13
 * S2^13 BN2^6' (sizes in octaves, rounded). Bias, mask and window are part of it as present or not:
 * their values change no kernel choice, their presence does.
 */
export function shapeClass(operation: TunedOperation, p: AttentionProblem): string {
  const mask = p.causal ? `causal-${p.alignment === 'bottom_right' ? 'br' : 'tl'}` : 'full';
  const layout = p.paged ? `paged${p.paged.blockSize}` : p.packed ? 'packed' : 'dense';
  const extras = [p.bias ? 'bias' : '', p.mask ? 'mask' : '', p.window ? 'window' : ''].filter(Boolean);
  const head = [operation, p.dtype, `H${p.H}`, `Hv${p.Hv}`, mask, layout, `G${p.N / p.K}`, ...extras];
  if (operation === 'decode') {
    const tokens = p.keyValueSeqLengths ? p.keyValueSeqLengths.reduce((a, l) => a + l, 0) : p.B * p.S;
    return [...head, `N${p.N}`, `B2^${octave(p.B)}`, `tokens2^${octave(tokens)}`].join(' ');
  }
  const deterministic = 'deterministic' in p && p.deterministic ? ['deterministic'] : [];
  return [
    ...head,
    ...deterministic,
    `T2^${octave(p.T)}`,
    `S2^${octave(p.S)}`,
    `BN2^${octave(p.B * p.N)}`,
  ].join(' ');
}

/** The problem's sizes in words, as an entry records what it measured. */
export function describeProblem(p: AttentionProblem): string {
  const mask = p.causal ? ` causal${p.alignment === 'bottom_right' ? ' bottom-right' : ''}` : '';
  const layout = p.paged ? ` paged${p.paged.blockSize}` : p.packed ? ' packed' : '';
  return `B=${p.B} T=${p.T} S=${p.S} N=${p.N} K=${p.K} H=${p.H}${p.Hv !== p.H ? ` Hv=${p.Hv}` : ''} ${p.dtype}${mask}${layout}`;
}

/** The file of `key` under `dir`: the GPU's name (made safe) and a hash of the whole key. */
export function calibrationFile(dir: string, key: CalibrationKey): string {
  const hash = createHash('sha256').update(JSON.stringify(key)).digest('hex').slice(0, 16);
  return join(dir, `${calibrationFilePrefix(key.gpu)}${hash}.json`);
}

/** The start of every calibrated file's name for a GPU of this name. */
export function calibrationFilePrefix(gpu: string): string {
  return `${gpu.replace(/[^A-Za-z0-9]+/g, '-').replace(/^-|-$/g, '') || 'gpu'}-`;
}

/**
 * The calibrated table in `file` for `key`, or an empty one: a missing file, one of another format or
 * key (a hash collision, a hand edit) or one that does not parse counts as none, since it can only
 * cost a calibration, never a wrong answer.
 */
export function loadCalibration(file: string, key: CalibrationKey): CalibratedTable {
  const empty: CalibratedTable = { format: CALIBRATION_FORMAT, key, entries: {} };
  let parsed: unknown;
  try {
    parsed = JSON.parse(readFileSync(file, 'utf8'));
  } catch {
    return empty;
  }
  if (!isTable(parsed) || JSON.stringify(parsed.key) !== JSON.stringify(key)) return empty;
  return parsed;
}

function isTable(value: unknown): value is CalibratedTable {
  if (typeof value !== 'object' || value === null) return false;
  const t = value as Partial<CalibratedTable>;
  if (t.format !== CALIBRATION_FORMAT || typeof t.key !== 'object' || typeof t.entries !== 'object')
    return false;
  return Object.values(t.entries ?? {}).every(
    (e) => Array.isArray(e?.order) && e.order.every((n) => typeof n === 'string') && typeof e.ms === 'object',
  );
}

/** Writes `table` to `file` atomically (a temporary file, then rename): a reader never sees half a file. */
export function saveCalibration(file: string, table: CalibratedTable): void {
  mkdirSync(join(file, '..'), { recursive: true });
  const temporary = `${file}.${process.pid}.tmp`;
  writeFileSync(temporary, `${JSON.stringify(table, null, 2)}\n`);
  renameSync(temporary, file);
}

/** `table` with `entries` added (a later timing of a class replaces the earlier one). */
export function withEntries(
  table: CalibratedTable,
  entries: Readonly<Record<string, CalibratedEntry>>,
): CalibratedTable {
  return { ...table, entries: { ...table.entries, ...entries } };
}

/** A backend as calibration sees it: its name and one call, returning that call's device time in ms. */
export interface Contender {
  readonly name: string;
  /** Runs the problem once and returns its device time in ms; throws if the backend fails on it. */
  timeOnce(): number;
}

/** How a calibration spends its time. */
export interface CalibrationBudget {
  /** Wall time for the whole class, in ms: each contender gets an equal share. */
  readonly budgetMs: number;
  /** The most timed calls per contender (after one untimed warm-up call, which may compile). */
  readonly maxCalls?: number;
  /** The wall clock in ms (performance.now by default; tests pass their own). */
  readonly now?: () => number;
}

/**
 * Times each contender: one untimed call first (it compiles or builds a plan: 1.4–2.4 s for a Hopper
 * flash variant on a cold cache, ~44 ms for cuDNN), then timed calls until its share of the budget is
 * spent or maxCalls (default 15) were made, at least 3; the median decides. A contender that throws
 * is skipped with its message. Returns the entry (without `measured`/`at`, which the caller knows).
 */
export function calibrate(
  contenders: readonly Contender[],
  budget: CalibrationBudget,
): Pick<CalibratedEntry, 'order' | 'ms' | 'skipped'> {
  const now = budget.now ?? (() => performance.now());
  const maxCalls = budget.maxCalls ?? 15;
  const share = budget.budgetMs / Math.max(1, contenders.length);
  const ms: Record<string, number> = {};
  const skipped: Record<string, string> = {};
  for (const contender of contenders) {
    const start = now();
    try {
      contender.timeOnce();
      const times: number[] = [];
      while (times.length < maxCalls && (times.length < 3 || now() - start < share))
        times.push(contender.timeOnce());
      ms[contender.name] = median(times);
    } catch (error) {
      skipped[contender.name] = error instanceof Error ? error.message : String(error);
    }
  }
  const order = Object.keys(ms).sort((a, b) => ms[a] - ms[b]);
  return { order, ms, skipped };
}

function median(values: readonly number[]): number {
  const sorted = [...values].sort((a, b) => a - b);
  const mid = sorted.length >> 1;
  return sorted.length % 2 ? sorted[mid] : (sorted[mid - 1] + sorted[mid]) / 2;
}
