/**
 * Runs named sweeps through attnlab and, when asked, through the JAX and PyTorch peers on the same
 * shapes, and gathers everything a results file needs: rows, peer versions, the ceiling, notes.
 */

import { cudaAvailable, getCudaContext } from '../backends/cuda/runtime/context.js';
import { emptyCache } from '../backends/cuda/runtime/memory.js';
import {
  type CeilingInfo,
  type Pass,
  PEER_IMPLS,
  type PeerInfo,
  type ResultRow,
  type RowStatus,
} from '../results/schema.js';
import { shapeLabel } from '../results/shape-label.js';
import { resolveCeiling } from './ceiling.js';
import { CpuCaseWorker, WORKER_MIN_FLOPS } from './cpu-worker.js';
import {
  attnlabLabel,
  DEFAULT_MEASURE,
  deviceFor,
  type MeasureOptions,
  measureAttnlabCase,
} from './measure.js';
import { rowFlops } from './pass-call.js';
import { BACKWARD_PEER_IMPLS, type PeerName, type PeerRequest, type PeerRun, runPeer } from './peers.js';
import { type Progress, SILENT_PROGRESS } from './progress.js';
import { type BenchCase, expandSweep, type SweepSpec } from './sweep.js';
import { type ModuleCall, moduleCall } from './te-calls.js';
import { measureWebgpuCase } from './webgpu-measure.js';

/** A sweep with the name its rows are grouped (and charted) under. */
export interface SweepGroup {
  readonly name: string;
  readonly spec: SweepSpec;
  /** Time the TransformerEngine-style module (bf16 or FP8 autocast) instead of attention(). */
  readonly module?: ModuleCall;
}

export interface RunOptions {
  measure?: Partial<MeasureOptions>;
  peers?: readonly PeerName[];
  /** Which implementations each peer runs (default: all, see PEER_IMPLS). */
  peerImpls?: Partial<Record<PeerName, readonly string[]>>;
  /** --ceiling: the matmul TFLOP/s to use instead of measuring. */
  ceiling?: number;
  /** A ceiling already resolved (the lab resolves it once for all its sections). */
  resolvedCeiling?: CeilingInfo | null;
  /**
   * Returns why a case must not run, or null to run it: a reason alone means it would not fit in memory (an
   * 'out-of-memory' row); with a status, that status ('unsupported' for a case past the time limit).
   */
  skip?: (c: BenchCase) => string | { status: RowStatus; reason: string } | null;
  progress?: Progress;
  /** Called with everything measured so far after attnlab's cases and after each peer. */
  onPartial?: (run: BenchRun) => void;
  /**
   * Aborted (bench's Ctrl-C): no case starts after it, a running peer is stopped, and the run returns
   * what finished, `interrupted` set and a note saying how far it got. The case being measured ends first.
   */
  signal?: AbortSignal;
  /** The time a peer has for one case before it is stopped (default DEFAULT_PEER_CASE_LIMIT_MS). */
  peerCaseLimitMs?: number;
}

export interface BenchRun {
  rows: ResultRow[];
  peers: PeerInfo[];
  ceiling: CeilingInfo | null;
  notes: string[];
  /** Stopped part-way by `signal`: the rows are those that finished. */
  interrupted?: boolean;
}

/** H200's L2 (50 MiB) for peers when attnlab cannot ask the driver (no CUDA: peers then run on CPU). */
const DEFAULT_L2_BYTES = 50 * 1024 * 1024;

/** Measures every case of every group, then the peers, in that order. */
export async function runSweeps(groups: readonly SweepGroup[], options: RunOptions = {}): Promise<BenchRun> {
  const progress = options.progress ?? SILENT_PROGRESS;
  const notes: string[] = [];
  const { ceiling: attnlabCeiling, note } =
    options.resolvedCeiling !== undefined
      ? { ceiling: options.resolvedCeiling }
      : resolveCeiling(options.ceiling);
  if (note) notes.push(note);
  let ceiling = attnlabCeiling;

  const cases: (BenchCase & { sweep: string; module?: ModuleCall })[] = [];
  for (const group of groups) {
    const { cases: expanded, skipped } = expandSweep(group.spec);
    const module = group.module ? { module: group.module } : {};
    for (const c of expanded) cases.push({ ...c, sweep: group.name, ...module });
    for (const s of skipped) notes.push(`${group.name}: skipped ${shapeLabel(s.case)}: ${s.reason}`);
  }
  const peers = options.peers ?? [];
  const shapes = uniqueShapes(cases);
  const pass = options.measure?.pass ?? 'forward';
  const defaultImpls = pass === 'forward' ? PEER_IMPLS : BACKWARD_PEER_IMPLS;
  const peerTotal = peers.reduce(
    (n, p) => n + shapes.length * (options.peerImpls?.[p] ?? defaultImpls[p]).length,
    0,
  );
  const total = cases.length + peerTotal;
  progress.start(total);

  const rows: ResultRow[] = [];
  const peerInfos: PeerInfo[] = [];
  const signal = options.signal;
  const stopped = (what: string): BenchRun => {
    progress.stop();
    // The signal's name where one stopped the run (bench aborts with it): '… (stopped by SIGTERM)'.
    const by = typeof signal?.reason === 'string' ? ` (stopped by ${signal.reason})` : '';
    notes.push(`interrupted: ${what}; the rows here are those that finished${by}`);
    return { rows, peers: peerInfos, ceiling, notes, interrupted: true };
  };
  let worker: CpuCaseWorker | undefined;
  for (const [i, c] of cases.entries()) {
    // Measuring is synchronous: a turn of the event loop between cases is where a Ctrl-C is heard.
    if (signal) await new Promise((resolve) => setImmediate(resolve));
    if (signal?.aborted) {
      await worker?.close();
      return stopped(`${i} of ${cases.length} attnlab cases measured, no peer run`);
    }
    const what = c.module ?? `attnlab ${c.impl}`;
    progress.update(i, `${c.sweep}: ${what} ${c.dtype}${c.causal ? ' causal' : ''} ${shapeLabel(c)}`);
    const why = options.skip?.(c);
    const measure = { ...options.measure, sweep: c.sweep, ceilingTflops: ceiling?.tflops ?? null };
    if (why) rows.push(skippedRow(c, why, pass));
    else if (c.impl === 'webgpu')
      rows.push(await measureWebgpuCase(c, { ...options.measure, sweep: c.sweep, ceilingTflops: null }));
    // A long CPU case runs in a worker thread when a signal may stop the run: the main thread stays free to
    // hear it (cpu-worker.ts). A custom `measure.call` is a function, which cannot cross to a thread.
    else if (
      signal &&
      !options.measure?.call &&
      deviceFor(c.impl) === 'cpu' &&
      rowFlops({ ...c, pass }) >= WORKER_MIN_FLOPS
    ) {
      worker ??= new CpuCaseWorker();
      // A worker that failed (ended, out of memory) costs this case's row, said as an error, not the run.
      const failed = (error: Error) => skippedRow(c, { status: 'error', reason: error.message }, pass);
      rows.push(await worker.measure(withoutModule(c), measure, c.module).catch(failed));
    } else rows.push(measureAttnlabCase(c, { ...measure, ...(c.module ? moduleCall(c.module, c) : {}) }));
  }
  await worker?.close();
  // A signal that came during the last case is heard here, as between cases: the run says it was stopped.
  if (signal) await new Promise((resolve) => setImmediate(resolve));
  if (signal?.aborted && peers.length === 0) return stopped(`all ${cases.length} attnlab cases measured`);

  options.onPartial?.({ rows, peers: peerInfos, ceiling, notes });
  if (peers.length > 0) {
    // Give attnlab's cached blocks back to the driver: the peers are other processes.
    if (cudaAvailable().ok) emptyCache();
    let done = cases.length;
    for (const [p, peer] of peers.entries()) {
      if (signal?.aborted)
        return stopped(`every attnlab case measured, peers ${peers.slice(p).join(', ')} not run`);
      const impls = options.peerImpls?.[peer] ?? defaultImpls[peer];
      const request = peerRequest(shapes, impls, options.measure ?? {});
      request.ceiling = peer === 'torch' && ceiling === null;
      const start = done;
      // A peer is another program: whatever goes wrong with it costs its own rows, never attnlab's.
      const run = await runPeer(
        peer,
        request,
        (d, _t, label) => progress.update(start + d, label),
        ceiling?.tflops ?? null,
        signal,
        options.peerCaseLimitMs,
      ).catch(
        (error: unknown): PeerRun => ({
          info: {
            name: peer,
            available: false,
            reason: `it failed in attnlab's hands: ${error instanceof Error ? error.message : String(error)}`,
          },
          rows: [],
        }),
      );
      // A peer stopped part-way answers nothing usable (its process was ended): none of its rows.
      if (signal?.aborted) {
        return stopped(`every attnlab case measured, peers ${peers.slice(p).join(', ')} stopped or not run`);
      }
      done = start + shapes.length * impls.length;
      progress.update(done - 1, `${peer} done`);
      peerInfos.push(run.info);
      if (!run.info.available) notes.push(`peer ${peer} not run: ${run.info.reason}`);
      if (run.ceiling && ceiling === null) ceiling = run.ceiling;
      rows.push(...run.rows);
      options.onPartial?.({ rows, peers: peerInfos, ceiling, notes });
    }
  }
  progress.stop();
  // A ceiling that only a peer could measure still applies to attnlab's rows.
  if (ceiling && !attnlabCeiling) {
    for (const row of rows)
      if (row.tflops !== undefined) row.ceilingPercent = (100 * row.tflops) / ceiling.tflops;
  }
  return { rows, peers: peerInfos, ceiling, notes };
}

/** The case as it crosses to the worker: its sweep and module travel as the request's own fields. */
function withoutModule(c: BenchCase & { sweep: string; module?: ModuleCall }): BenchCase {
  const { sweep: _sweep, module: _module, ...rest } = c;
  return rest;
}

/** Each (sweep, shape, dtype, causal) once: peers run their own list of implementations on it. */
function uniqueShapes(
  cases: readonly (BenchCase & { sweep: string; module?: ModuleCall })[],
): PeerRequest['cases'] {
  const seen = new Map<string, PeerRequest['cases'][number]>();
  // Peers run each dense shape once: a paged case's peer row is the dense cache it stands for.
  for (const { impl: _impl, blockSize: _blockSize, module: _module, ...shape } of cases) {
    const key = JSON.stringify(shape);
    if (!seen.has(key)) seen.set(key, shape);
  }
  return [...seen.values()];
}

function peerRequest(
  cases: PeerRequest['cases'],
  impls: readonly string[],
  options: Partial<MeasureOptions>,
): PeerRequest {
  const m = { ...DEFAULT_MEASURE, ...options };
  return {
    cases,
    impls,
    warmup: m.warmup,
    repeats: m.repeats,
    min_repeats: m.minRepeats,
    budget_ms: m.budgetMs,
    settle_ms: m.settleMs,
    seed: m.seed,
    check_error: m.checkError,
    pass: m.pass,
    l2_bytes: cudaAvailable().ok ? getCudaContext().properties.l2CacheBytes : DEFAULT_L2_BYTES,
  };
}

/** The row of a case that was not run because it could not fit: says so instead of leaving a gap. */
function skippedRow(
  c: BenchCase & { sweep: string; module?: ModuleCall },
  why: string | { status: RowStatus; reason: string },
  pass: Pass,
): ResultRow {
  const { sweep, impl, B, T, S, N, K, H, dtype, causal } = c;
  const { status, reason } =
    typeof why === 'string' ? { status: 'out-of-memory' as const, reason: why } : why;
  const named = c.module
    ? { impl: c.module, label: `${c.module} ${c.dtype}${c.causal ? ' causal' : ''}` }
    : {};
  return {
    sweep,
    source: 'attnlab',
    impl,
    label: attnlabLabel(c, pass),
    ...named,
    ...{ B, T, S, N, K, H, dtype, causal },
    ...(pass !== 'forward' ? { pass } : {}),
    status,
    reason: `not run: ${reason}`,
    flops: rowFlops({ ...c, pass }),
  };
}
