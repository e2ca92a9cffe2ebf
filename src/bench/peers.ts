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
import type { CeilingInfo, Pass, PeerInfo, ResultRow } from '../results/schema.js';
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
): Promise<PeerRun> {
  const found = findPython(peer);
  if ('reason' in found) return { info: { name: peer, available: false, reason: found.reason }, rows: [] };
  const { python } = found;
  const child = spawn(python, [peerScript(peer)], {
    env: peerEnvironment(),
    stdio: ['pipe', 'pipe', 'pipe'],
    signal, // aborted: the peer gets SIGTERM, and the answer says it failed (the caller drops it)
  });
  let stdout = '';
  const diagnostics: string[] = [];
  let pending = '';
  child.stdout.on('data', (chunk: Buffer) => {
    stdout += chunk.toString('utf8');
  });
  child.stderr.on('data', (chunk: Buffer) => {
    pending += chunk.toString('utf8');
    const lines = pending.split('\n');
    pending = lines.pop() ?? '';
    for (const line of lines) {
      const progress = /^PROGRESS (\d+) (\d+) (.*)$/.exec(line);
      if (progress) onProgress(Number(progress[1]), Number(progress[2]), progress[3]);
      else if (line.trim()) diagnostics.push(line);
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
  const fail = (why: string): PeerRun => ({
    info: {
      name: peer,
      available: false,
      python,
      reason: `${why}; stderr: ${diagnostics.slice(-3).join(' | ') || '(empty)'}`,
    },
    rows: [],
  });
  if (code !== 0) return fail(`${peerScript(peer)} exited with ${code}`);
  let answer: {
    versions?: Record<string, string>;
    rows?: ResultRow[];
    ceiling?: CeilingInfo;
    unavailable?: string;
  };
  try {
    answer = JSON.parse(stdout.trim().split('\n').pop() ?? '');
  } catch {
    return fail('its output was not JSON');
  }
  if (answer.unavailable)
    return {
      info: { name: peer, available: false, python, reason: answer.unavailable, versions: answer.versions },
      rows: [],
    };
  const ceiling = ceilingTflops ?? answer.ceiling?.tflops ?? null;
  // Torch's script runs on CUDA only; JAX's says its device's platform ('gpu …', or 'cpu …' without one).
  const onGpu = peer === 'torch' || !(answer.versions?.device ?? '').startsWith('cpu');
  const rows = (answer.rows ?? []).map((row) => completeRow(row, ceiling, onGpu));
  return {
    info: { name: peer, available: true, python, versions: answer.versions ?? {} },
    rows,
    ceiling: answer.ceiling,
  };
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
