/**
 * Peers: the same cases through JAX and PyTorch, run by the small Python scripts in ./peers/ with a
 * JSON request on stdin and a JSON answer on stdout. A peer whose Python package is missing is
 * reported as such (with every interpreter tried) and the benchmark goes on without it.
 */

import { spawn, spawnSync } from 'node:child_process';
import { existsSync, readdirSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { config, readConfig } from '../config.js';
import { InvalidArgumentError } from '../errors.js';
import { neutraliseLine } from '../results/safe-text.js';
import type { CeilingInfo, Pass, PeerInfo, ResultRow } from '../results/schema.js';
import { invalidRowReason } from '../results/validate.js';
import { withDecodeBandwidth } from './bandwidth.js';
import { rowFlops } from './pass-call.js';
import { type BenchCase, splitList } from './sweep.js';

export type PeerName = 'jax' | 'torch';
export const PEERS: readonly PeerName[] = ['jax', 'torch'];

/**
 * The implementations a backward run times (the forward's: PEER_IMPLS, results/schema.ts): those with a fused backward (PyTorch's math backend and
 * JAX's XLA path differentiate an unfused graph of (B,N,T,S) tensors, minutes at long sequences).
 */
export const BACKWARD_PEER_IMPLS: Record<PeerName, readonly string[]> = {
  jax: ['cudnn'],
  torch: ['flash', 'cudnn', 'efficient'],
};

const MODULE: Record<PeerName, string> = { jax: 'jax', torch: 'torch' };

export interface PeerRequest {
  cases: (Omit<BenchCase, 'impl'> & { sweep: string })[];
  impls: readonly string[];
  warmup: number;
  repeats: number;
  min_repeats: number;
  budget_ms: number;
  settle_ms: number;
  seed: number;
  check_error: boolean;
  /** L2 size in bytes, for input rotation (attnlab knows it from the driver; JAX does not expose it). */
  l2_bytes: number;
  /** torch only: also measure the bf16 matmul ceiling. */
  ceiling?: boolean;
  /** What to time: the forward call (default), the pullback alone, or both (see the peer scripts). */
  pass?: Pass;
}

export interface PeerRun {
  info: PeerInfo;
  rows: ResultRow[];
  ceiling?: CeilingInfo;
}

/** `jax,torch` as peer names. */
export function parsePeerList(text: string): PeerName[] {
  const names = splitList('--peers', text);
  for (const name of names) {
    if (!(PEERS as readonly string[]).includes(name)) {
      throw new InvalidArgumentError('--peers', `a list of ${PEERS.join(', ')}`, JSON.stringify(name));
    }
  }
  return names as PeerName[];
}

/**
 * Interpreters to try, in order: python3, /opt/torch/.venv/bin/python (where the GPU machine keeps
 * PyTorch), then any /opt/<name>/.venv/bin/python. $ATTNLAB_PYTHON, when set, is the only one tried:
 * an explicit choice is a demand, and a wrong one should fail loudly rather than fall back.
 */
export function pythonCandidates(env?: NodeJS.ProcessEnv): string[] {
  const chosen = (env ? readConfig(env) : config()).python;
  if (chosen) return [chosen];
  const found = ['python3', '/opt/torch/.venv/bin/python'];
  try {
    for (const dir of readdirSync('/opt')) found.push(`/opt/${dir}/.venv/bin/python`);
  } catch {
    // no /opt: nothing more to try
  }
  return [...new Set(found)].filter((p) => !p.includes('/') || existsSync(p));
}

/** The first interpreter that imports the peer's package, with its version, or why none does. */
export function findPython(
  peer: PeerName,
  candidates = pythonCandidates(),
): { python: string } | { reason: string } {
  const tried: string[] = [];
  for (const python of candidates) {
    const probe = spawnSync(python, ['-c', `import ${MODULE[peer]}, numpy`], {
      encoding: 'utf8',
      timeout: 120_000,
    });
    if (probe.status === 0) return { python };
    const why = probe.error ? probe.error.message : lastLine(probe.stderr) || `exit ${probe.status}`;
    tried.push(`${python}: ${why}`);
  }
  return { reason: `no Python with ${MODULE[peer]} and numpy (tried ${tried.join('; ')})` };
}

/** The peer's script: beside this file in src/, or back in src/ when running from dist/. */
export function peerScript(peer: PeerName): string {
  for (const folder of ['./peers/', '../../../src/bench/peers/']) {
    const path = fileURLToPath(new URL(`${folder}${peer}_peer.py`, import.meta.url));
    if (existsSync(path)) return path;
  }
  throw new InvalidArgumentError(
    'peer',
    `${peer}_peer.py shipped with attnlab`,
    'no such file beside src/bench',
  );
}

/**
 * Runs one peer over the request; `onProgress` receives each case as the script starts it.
 * Never throws for a missing or failing peer: the answer says it was not available, and why.
 */
export async function runPeer(
  peer: PeerName,
  request: PeerRequest,
  onProgress: (done: number, total: number, label: string) => void = () => {},
  ceilingTflops: number | null = null,
  signal?: AbortSignal,
  caseLimitMs = DEFAULT_PEER_CASE_LIMIT_MS,
): Promise<PeerRun> {
  // setTimeout fires at once for a delay past 2^31 − 1 ms (24.8 days): the peer would be stopped at its start.
  if (!(caseLimitMs > 0 && caseLimitMs <= MAX_TIMER_MS)) {
    throw new InvalidArgumentError(
      'caseLimitMs',
      `a time in (0, ${MAX_TIMER_MS}] ms (setTimeout's largest delay)`,
      String(caseLimitMs),
    );
  }
  const found = findPython(peer);
  if ('reason' in found) return { info: { name: peer, available: false, reason: found.reason }, rows: [] };
  const { python } = found;
  const child = spawn(python, [peerScript(peer)], {
    env: peerEnvironment(),
    stdio: ['pipe', 'pipe', 'pipe'],
    signal, // aborted: the peer gets SIGTERM, and the answer says it failed (the caller drops it)
  });
  let stdout = '';
  let stdoutBytes = 0;
  const diagnostics: string[] = [];
  let pending = '';
  // A peer that never answers is stopped: each case (and the import before the first) has caseLimitMs, the
  // watch restarting at every PROGRESS line; SIGTERM first, SIGKILL 5 s later if it is still there.
  let timedOut: string | null = null;
  let current = 'its start (imports, device set-up)';
  let watch: NodeJS.Timeout | undefined;
  const rearm = () => {
    clearTimeout(watch);
    watch = setTimeout(() => {
      timedOut = `no answer within ${caseLimitMs / 1000} s on ${current}: stopped (--peer-case-s sets the limit)`;
      child.kill('SIGTERM');
      // Its pipes are closed from this side: a process it started (a shell's child) may hold them open, and
      // the wait below is for them as well as for the peer.
      child.stdout.destroy();
      child.stderr.destroy();
      setTimeout(() => child.kill('SIGKILL'), 5000).unref();
    }, caseLimitMs);
  };
  rearm();
  child.stdout.on('data', (chunk: Buffer) => {
    // Bounded: an answer is a few hundred bytes a row; a peer writing without end is not read into memory.
    stdoutBytes += chunk.length;
    if (stdoutBytes <= MAX_ANSWER_BYTES) stdout += chunk.toString('utf8');
  });
  child.stderr.on('data', (chunk: Buffer) => {
    pending += chunk.toString('utf8');
    const lines = pending.split('\n');
    pending = lines.pop() ?? '';
    if (pending.length > 65_536) pending = pending.slice(-65_536);
    for (const line of lines) {
      const progress = /^PROGRESS (\d+) (\d+) (.*)$/.exec(line);
      if (progress) {
        current = `case ${Number(progress[1]) + 1} of ${progress[2]} (${neutraliseLine(progress[3].slice(0, 200))})`;
        rearm();
        onProgress(Number(progress[1]), Number(progress[2]), progress[3]);
      } else if (line.trim()) {
        diagnostics.push(line.slice(0, 500));
        if (diagnostics.length > 20) diagnostics.shift();
      }
    }
  });
  // A peer that ends before reading its request (stopped, or failing at import) closes the pipe: the
  // EPIPE is the exit code's story, told below, not an uncaught error of attnlab's.
  child.stdin.on('error', () => {});
  child.stdin.end(JSON.stringify(request));
  const code = await new Promise<number | null>((resolve) => {
    child.on('error', () => resolve(-1));
    child.on('close', resolve);
  });
  clearTimeout(watch);
  const fail = (why: string): PeerRun => ({
    info: {
      name: peer,
      available: false,
      python,
      reason: neutraliseLine(`${why}; stderr: ${diagnostics.slice(-3).join(' | ') || '(empty)'}`),
    },
    rows: [],
  });
  if (timedOut) return fail(timedOut);
  if (code !== 0) return fail(`${peerScript(peer)} exited with ${code}`);
  if (stdoutBytes > MAX_ANSWER_BYTES) return fail(`its answer passed ${MAX_ANSWER_BYTES} bytes`);
  let parsed: unknown;
  try {
    parsed = JSON.parse(stdout.trim().split('\n').pop() ?? '');
  } catch {
    return fail('its output was not JSON');
  }
  return peerAnswer(peer, python, request, parsed, ceilingTflops, fail);
}

/** The most bytes of a peer's answer read: 64 MiB is ~100,000 rows. */
const MAX_ANSWER_BYTES = 64 * 2 ** 20;

/** The time a peer has for one case before it is stopped (--peer-case-s): JAX's first compile of a long case is ~1 min. */
export const DEFAULT_PEER_CASE_LIMIT_MS = 600_000;

/** The largest delay setTimeout keeps: past it Node warns and fires after 1 ms. */
export const MAX_TIMER_MS = 2 ** 31 - 1;

/**
 * The peer's parsed answer, read defensively: each field's type is checked, each row completed and validated on
 * its own. A row that is not valid, or a second row for one case, is dropped, and each case of the request left
 * without a valid row gets an 'unavailable' row saying why; attnlab's own rows never depend on it.
 */
export function peerAnswer(
  peer: PeerName,
  python: string,
  request: PeerRequest,
  parsed: unknown,
  ceilingTflops: number | null,
  fail: (why: string) => PeerRun,
): PeerRun {
  if (parsed === null || typeof parsed !== 'object' || Array.isArray(parsed))
    return fail('its answer was not a JSON object');
  const answer = parsed as Record<string, unknown>;
  const versions = stringRecord(answer.versions);
  if (answer.unavailable !== undefined) {
    const reason = typeof answer.unavailable === 'string' ? answer.unavailable : 'it said it is unavailable';
    return {
      info: { name: peer, available: false, python, reason: neutraliseLine(reason), versions },
      rows: [],
    };
  }
  const c = answer.ceiling as CeilingInfo | undefined;
  const ceilingInfo =
    c !== null &&
    typeof c === 'object' &&
    typeof c.tflops === 'number' &&
    c.tflops > 0 &&
    Number.isFinite(c.tflops) &&
    typeof c.dtype === 'string' &&
    typeof c.source === 'string'
      ? { tflops: c.tflops, dtype: c.dtype, source: c.source }
      : undefined;
  const ceiling = ceilingTflops ?? ceilingInfo?.tflops ?? null;
  // Torch's script runs on CUDA only; JAX's says its device's platform ('gpu …', or 'cpu …' without one).
  const onGpu = peer === 'torch' || !(versions.device ?? '').startsWith('cpu');
  const given = Array.isArray(answer.rows) ? answer.rows : [];
  const problems: string[] = [];
  if (answer.rows !== undefined && !Array.isArray(answer.rows)) problems.push('its rows were not a list');
  const valid: ResultRow[] = [];
  const seen = new Set<string>();
  const fileCeiling = ceiling === null ? null : { tflops: ceiling, dtype: 'bfloat16', source: 'peer' };
  given.forEach((raw, i) => {
    let row: ResultRow;
    try {
      if (raw === null || typeof raw !== 'object' || Array.isArray(raw)) throw new Error('not an object');
      row = completeRow({ ...(raw as ResultRow), source: peer }, ceiling, onGpu);
    } catch (error) {
      problems.push(`row ${i}: ${error instanceof Error ? error.message : String(error)}`);
      return;
    }
    const why = invalidRowReason(row, fileCeiling);
    if (why) problems.push(`row ${i}: ${why.replace(/^row: \$\.rows\[0\]/, '')}`);
    else if (seen.has(caseOf(row))) problems.push(`row ${i}: a second row for one case`);
    else {
      seen.add(caseOf(row));
      valid.push(row);
    }
  });
  const rows = [...valid];
  if (problems.length > 0) {
    const reason = neutraliseLine(
      `${peer}'s answer had ${problems.length} invalid row(s), none valid for this case; first: ${problems[0]}`.slice(
        0,
        500,
      ),
    );
    for (const shape of request.cases)
      for (const impl of request.impls) {
        const row = unavailableRow(peer, impl, shape, request.pass ?? 'forward', reason);
        if (!seen.has(caseOf(row))) rows.push(row);
      }
  }
  return { info: { name: peer, available: true, python, versions }, rows, ceiling: ceilingInfo };
}

/** The case a row answers: sweep, source, implementation, shape, dtype, mask and pass. */
function caseOf(r: ResultRow): string {
  return JSON.stringify([
    r.sweep,
    r.source,
    r.impl,
    r.B,
    r.T,
    r.S,
    r.N,
    r.K,
    r.H,
    r.dtype,
    r.causal,
    r.pass ?? 'forward',
  ]);
}

function unavailableRow(
  peer: PeerName,
  impl: string,
  shape: PeerRequest['cases'][number],
  pass: Pass,
  reason: string,
): ResultRow {
  const { sweep, B, T, S, N, K, H, dtype, causal } = shape;
  const short: Record<string, string> = { bfloat16: 'bf16', float16: 'f16', float32: 'f32', float64: 'f64' };
  return {
    sweep,
    source: peer,
    impl,
    label: `${peer} ${impl} ${short[dtype] ?? dtype}${causal ? ' causal' : ''}`,
    ...{ B, T, S, N, K, H, dtype, causal },
    ...(pass !== 'forward' ? { pass } : {}),
    status: 'unavailable',
    reason,
    flops: rowFlops({ B, T, S, N, H, causal, pass }),
  };
}

/** The string-valued entries of `value` (a peer's versions), neutralised; anything else dropped. */
function stringRecord(value: unknown): Record<string, string> {
  if (value === null || typeof value !== 'object' || Array.isArray(value)) return {};
  return Object.fromEntries(
    Object.entries(value)
      .filter(([, v]) => typeof v === 'string')
      .map(([k, v]) => [neutraliseLine(k), neutraliseLine(v as string)]),
  );
}

/**
 * The peers' environment. JAX and PyTorch load the cuDNN and cuBLAS of their own wheels, and
 * PyTorch refuses to use cuDNN at all when an older one is found first; a folder on
 * LD_LIBRARY_PATH holding a libcudnn or libcublas (the system and toolkit folders that attnlab's GPU
 * set-up adds) would be searched first, so such folders are left out. Others (the driver's) stay.
 */
export function peerEnvironment(env: NodeJS.ProcessEnv = process.env): NodeJS.ProcessEnv {
  const bundledByPeers = (dir: string) => {
    try {
      return readdirSync(dir).some((f) => f.startsWith('libcudnn') || f.startsWith('libcublas'));
    } catch {
      return false;
    }
  };
  const kept = (env.LD_LIBRARY_PATH ?? '').split(':').filter((dir) => dir && !bundledByPeers(dir));
  const result: NodeJS.ProcessEnv = {
    ...env,
    PYTHONDONTWRITEBYTECODE: '1',
    // JAX otherwise takes 75% of GPU memory at start, which would also starve the other peers.
    XLA_PYTHON_CLIENT_PREALLOCATE: 'false',
    TF_CPP_MIN_LOG_LEVEL: '2',
  };
  if (kept.length > 0) result.LD_LIBRARY_PATH = kept.join(':');
  else delete result.LD_LIBRARY_PATH;
  return result;
}

/** Work, throughput, ceiling share and a decode step's bandwidth are computed here, by attnlab's rows' formulas. */
export function completeRow(row: ResultRow, ceilingTflops: number | null, onGpu = true): ResultRow {
  const flops = rowFlops(row);
  const done: ResultRow = { ...row, flops };
  const median = row.timing?.ms.median;
  if (row.status === 'ok' && median !== undefined && median > 0) {
    done.tflops = flops / (median * 1e-3) / 1e12;
    if (ceilingTflops) done.ceilingPercent = (100 * done.tflops) / ceilingTflops;
  }
  return withDecodeBandwidth(done, onGpu);
}

function lastLine(text: string | null | undefined): string {
  return (text ?? '').trim().split('\n').pop() ?? '';
}
