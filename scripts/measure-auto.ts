/**
 * What a user meets on a GPU, measured in one run (a few minutes on an H100):
 * - `auto` against each backend at the benchmarked shapes (forward B=4 T=S=8192 N=16 at H=64/128/256,
 *   causal and not; backward at H=64 and 128, causal and not; decode steps B=64 S=16k K=1 and B=8 S=128k
 *   K=8, N=32 H=128, dense): device time per call (the host hidden behind a spin, hidden-host.ts), which
 *   backend auto ran, and which step decided (calibrated, recorded, model);
 * - host time per call at the codelab's shape (B=4 T=128 N=8 H=64 bf16), a B=1 decode step (S=4096
 *   K=8 N=32 H=128) and a backward at the codelab's shape, causal, per backend (cudnn, flash, naive) and
 *   auto, and a KVCache step (append one token, then attention over the 4096+ cached) on flash and auto;
 *   cudnn and flash also with their host-time routes off ('cudnn-execute': ATTNLAB_CUDNN_CUDA_GRAPH=0; 'flash-launches': ATTNLAB_LAUNCH_GRAPH=0), with
 *   how cudnn's calls were enqueued and whether each route's output is bit-identical to the route off;
 * - first-call time of the flash kernel in a new process, by phase (validate, plan with the kernel load,
 *   enqueue, wait), and where its kernel came from (shipped, disk cache, NVRTC): with an empty kernel cache, then again with
 *   the cache that first process left; then auto's first call twice (its cuDNN plan built, then read back) (child processes: node --import tsx scripts/measure-auto.ts
 *   --first-call).
 * Writes JSON to the path given with --json, or with --record <what> to
 * <root>/<gpu>/dispatch/<date>-<commit>-<what>.json, the GPU's folder named from the card (h100-sxm, h200:
 * results/suite-path.ts) and <root> benchmarks/results unless --root says (prints one line a measurement).
 *
 * Run: node --import tsx scripts/measure-auto.ts [--json out.json | --record what [--root dir]]
 *   [--only small|forward|decode|backward]...
 */
import { spawnSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { attention } from '../src/api/attention.js';
import { attentionBackward } from '../src/api/backward.js';
import { KVCache } from '../src/api/kv-cache.js';
import { validateAttention } from '../src/api/validate.js';
import { backwardDecision } from '../src/backends/backward-registry.js';
import { graphRouteStats } from '../src/backends/cuda/cudnn/cuda-graph.js';
import { compileHistory } from '../src/backends/cuda/runtime/compile.js';
import { synchronize } from '../src/backends/cuda/runtime/context.js';
import { launchGraphStats } from '../src/backends/cuda/runtime/launch-graph.js';
import type { Implementation } from '../src/backends/problem.js';
import { autoDecision, chooseBackend, runPlanned } from '../src/backends/registry.js';
import { timeHostHidden } from '../src/bench/hidden-host.js';
import { attnlabCommit, describeMachine } from '../src/bench/machine.js';
import { seededInput } from '../src/bench/measure.js';
import { reloadConfig } from '../src/config.js';
import { gpuSlug, SUITE_RESULTS_ROOT, utcDay } from '../src/results/suite-path.js';
import type { Tensor } from '../src/tensor/tensor.js';

type Shape = { B: number; T: number; S: number; N: number; K: number; H: number; causal: boolean };
const BACKENDS: Array<Implementation | undefined> = [undefined, 'cudnn', 'flash'];
/**
 * At the small shapes the naive backend too (its (B,N,T,S) scores are 2 MB there, 8.6 GB at T=S=8192), and
 * the host-time routes switched, each timed beside the default: cudnn with ATTNLAB_CUDNN_CUDA_GRAPH=0
 * ('cudnn-execute': one cudnnBackendExecute a call), flash with ATTNLAB_LAUNCH_GRAPH=0 ('flash-launches': a
 * decode step's two launches one by one), naive with ATTNLAB_LAUNCH_GRAPH=all ('naive-graph': its cuBLASLt
 * matmuls and softmax as one graph, opt-in).
 */
const ROUTES = {
  'cudnn-execute': { backend: 'cudnn', variable: 'ATTNLAB_CUDNN_CUDA_GRAPH', value: '0' },
  'flash-launches': { backend: 'flash', variable: 'ATTNLAB_LAUNCH_GRAPH', value: '0' },
  'naive-graph': { backend: 'naive', variable: 'ATTNLAB_LAUNCH_GRAPH', value: 'all' },
  'flash-backward-graph': { backend: 'flash', variable: 'ATTNLAB_LAUNCH_GRAPH', value: 'all' },
} as const;
type Route = keyof typeof ROUTES;
/**
 * 'auto-last': auto timed again after every other entry of its row. auto is timed first, and its host time
 * read 2–3 µs above its backend's on an H100 (forward: 10.7 against cudnn's 7.7 µs) where the stand-in
 * device finds the same JavaScript a call in both (recent-decisions.ts keeps the decision): timed last
 * too, a difference that follows the order is the order's, not auto's.
 */
type Entry = Implementation | undefined | Route | 'auto-last';
const SMALL_BACKENDS: Entry[] = [
  ...BACKENDS,
  'cudnn-execute',
  'flash-launches',
  'naive',
  'naive-graph',
  'auto-last',
];
const label = (impl: Entry) => impl ?? 'auto';
const isRoute = (entry: Entry): entry is Route => entry !== undefined && entry in ROUTES;
/** The implementation an entry asks for: a route's backend, undefined for auto and 'auto-last'. */
const implementationOf = (entry: Entry): Implementation | undefined =>
  entry === 'auto-last' ? undefined : isRoute(entry) ? ROUTES[entry].backend : entry;

/** Runs `fn` with the entry's route switched (its variable set) where it names one. */
function underEntry<R>(entry: Entry, fn: () => R): R {
  if (!isRoute(entry)) return fn();
  const { variable, value } = ROUTES[entry];
  process.env[variable] = value;
  reloadConfig();
  try {
    return fn();
  } finally {
    delete process.env[variable];
    reloadConfig();
  }
}

/** The output's bytes (the stream drained), to compare two backends' or routes' results bit for bit. */
function outputBytes(t: Tensor): Buffer {
  const data = t.toHost().data;
  return Buffer.from(data.buffer, data.byteOffset, data.byteLength);
}

function inputs(s: Shape): Tensor[] {
  return [
    [s.T, s.N, 1],
    [s.S, s.K, 2],
    [s.S, s.K, 3],
  ].map(([len, heads, seed]) => seededInput([s.B, len, heads, s.H], seed, 'bfloat16').to('cuda'));
}

const describe = (s: Shape) =>
  `B=${s.B} T=${s.T} S=${s.S} N=${s.N} K=${s.K} H=${s.H}${s.causal ? ' causal' : ''}`;

/**
 * µs a call of `call` over `n` back-to-back calls, the stream drained at the end: what a caller that
 * issues calls in a loop waits (the larger of host and device time), as issue #45's table timed it.
 */
function wallPerCall(call: () => { dispose(): void }, n: number): number {
  // 1,000 untimed calls first: V8 optimises a backend's path over its first few hundred calls, and with 20
  // the first row measured (B=4 T=128 non-causal) read 6–10 µs above the causal row after it on an H100,
  // though a causal cudnn call adds a launch.
  for (let i = 0; i < 1000; i++) call().dispose();
  synchronize();
  const started = performance.now();
  for (let i = 0; i < n; i++) call().dispose();
  synchronize();
  return ((performance.now() - started) / n) * 1000;
}

/**
 * Device and host time a call of each backend and auto on `s`; auto's choice and what decided it. cudnn's
 * entries also say how its calls were enqueued while timed (graph launches, executes) and, at the small
 * shapes, whether its output is bit-identical to cudnn-execute's.
 */
function forwardRow(s: Shape, samples: number, batch: number, backends: Entry[] = BACKENDS) {
  const [q, k, v] = inputs(s);
  const row: Record<string, unknown> = { pass: 'forward', shape: describe(s) };
  const decision = autoDecision(validateAttention(q, k, v, { isCausal: s.causal }));
  row.decidedBy = decision?.source;
  row.why = decision?.why;
  const outputs = new Map<Entry, Buffer>();
  for (const entry of backends) {
    const impl = implementationOf(entry);
    try {
      underEntry(entry, () => {
        let ran = '';
        const call = () => {
          const r = attention(q, k, v, { isCausal: s.causal, implementation: impl });
          ran = `${r.backend} ${r.variant}`;
          return r.output;
        };
        const small = s.B * s.T * s.N * s.H <= 1 << 20 || s.T === 1;
        const routeBefore = { ...graphRouteStats };
        const groupsBefore = { ...launchGraphStats };
        const wallUs = small ? wallPerCall(call, 500) : undefined;
        let t: { deviceMs?: number; hostMs?: number; error?: string };
        try {
          t = timeHostHidden(call, { samples, batch, warmup: 3 });
        } catch (error) {
          t = { error: error instanceof Error ? error.message : String(error) };
        }
        const enqueued = ran.startsWith('cudnn')
          ? {
              graphLaunches: graphRouteStats.launches - routeBefore.launches,
              executes: graphRouteStats.executes - routeBefore.executes,
              graphRefusals: graphRouteStats.refusals - routeBefore.refusals,
            }
          : ran.startsWith('flash flash-decode') || ran.startsWith('naive')
            ? {
                graphLaunches: launchGraphStats.graphLaunches - groupsBefore.graphLaunches,
                plainLaunchGroups: launchGraphStats.plain - groupsBefore.plain,
              }
            : undefined;
        if (small && (entry === 'cudnn' || entry === 'flash' || entry === 'naive' || isRoute(entry))) {
          const out = call();
          outputs.set(entry, outputBytes(out));
          out.dispose();
        }
        row[label(entry)] = {
          deviceMs: t.deviceMs,
          hostUs: t.hostMs === undefined ? undefined : t.hostMs * 1000,
          wallUs,
          ran,
          ...(enqueued ? { enqueued } : {}),
          ...(t.error ? { hiddenHostError: t.error } : {}),
        };
      });
    } catch (error) {
      row[label(entry)] = { error: error instanceof Error ? error.message.split('\n')[0] : String(error) };
    }
  }
  // Each route against the same backend with it off, bit for bit.
  for (const [off, { backend }] of Object.entries(ROUTES)) {
    const on = outputs.get(backend);
    const plain = outputs.get(off as Route);
    if (on && plain) row[`${backend}IdenticalTo-${off}`] = on.equals(plain);
  }
  for (const t of [q, k, v]) t.dispose();
  return row;
}

function backwardRow(s: Shape, samples: number, host?: { batch: number; warm: number }) {
  const [q, k, v] = inputs(s);
  const f = attention(q, k, v, { isCausal: s.causal, returnLogSumExp: true });
  const [dOut] = inputs({ ...s, K: s.N, S: s.T });
  const row: Record<string, unknown> = { pass: 'backward', shape: describe(s) };
  const p = {
    ...validateAttention(q, k, v, { isCausal: s.causal }),
    output: f.output,
    logSumExp: f.logSumExp!,
    dOutput: dOut,
    deterministic: false,
  };
  const decision = backwardDecision(p);
  row.decidedBy = decision?.source;
  row.why = decision?.why;
  // At a small shape (`host`), naive too, and `warm` untimed calls first: V8 optimises the backward's path
  // over its first hundreds of calls, and with 2 warm-up calls the host time read ~310 µs on every backend.
  // 'flash-backward-graph': flash's three launches as one captured graph (ATTNLAB_LAUNCH_GRAPH=all, opt-in).
  const entries: Entry[] = host ? [...BACKENDS, 'flash-backward-graph', 'naive', 'auto-last'] : BACKENDS;
  for (const entry of entries) {
    const impl = implementationOf(entry);
    if (isRoute(entry)) {
      process.env[ROUTES[entry].variable] = ROUTES[entry].value;
      reloadConfig();
    }
    try {
      let ran = '';
      const call = () => {
        const r = attentionBackward(q, k, v, f.output, f.logSumExp!, dOut, {
          isCausal: s.causal,
          implementation: impl,
        });
        ran = `${r.backend} ${r.variant}`;
        // Freed in their order (dValue by the timer), as a loop over them or a tidy() scope frees them.
        r.dQuery.dispose();
        r.dKey.dispose();
        return r.dValue;
      };
      const wallUs = host ? wallPerCall(call, 500) : undefined;
      let t: { deviceMs?: number; hostMs?: number; error?: string };
      try {
        t = timeHostHidden(call, { samples, batch: host?.batch ?? 1, warmup: host?.warm ?? 2 });
      } catch (error) {
        t = { error: error instanceof Error ? error.message : String(error) };
      }
      row[label(entry)] = {
        deviceMs: t.deviceMs,
        hostUs: t.hostMs === undefined ? undefined : t.hostMs * 1000,
        wallUs,
        ran,
        ...(t.error ? { hiddenHostError: t.error } : {}),
      };
    } catch (error) {
      row[label(entry)] = { error: error instanceof Error ? error.message.split('\n')[0] : String(error) };
    } finally {
      if (isRoute(entry)) {
        delete process.env[ROUTES[entry].variable];
        reloadConfig();
      }
    }
  }
  for (const t of [q, k, v, f.output, f.logSumExp!, dOut]) t.dispose();
  return row;
}

/**
 * A KVCache decode step at B=1 (S=4096 cached tokens, K=8 N=32 H=128): host and device time a step of
 * append (one token) then attention, on flash and auto; the cache grows by one token a step.
 */
function kvCacheRow(samples: number, batch: number) {
  const row: Record<string, unknown> = {
    pass: 'kv-cache step',
    shape: 'B=1 S=4096+ N=32 K=8 H=128 block 64',
  };
  const [q] = inputs({ B: 1, T: 1, S: 1, N: 32, K: 32, H: 128, causal: false });
  const [token] = inputs({ B: 1, T: 1, S: 1, N: 8, K: 8, H: 128, causal: false });
  const [prefill] = inputs({ B: 1, T: 4096, S: 4096, N: 8, K: 8, H: 128, causal: false });
  // Not cudnn: it builds a graph per block-table width, and the table widens every 64 steps.
  // 'flash-graph': flash with ATTNLAB_LAUNCH_GRAPH=all, the append's launch as a graph too (opt-in).
  for (const entry of [undefined, 'flash', 'flash-graph', 'auto-last'] as const) {
    const impl = entry === 'flash-graph' ? 'flash' : entry === 'auto-last' ? undefined : entry;
    if (entry === 'flash-graph') {
      process.env.ATTNLAB_LAUNCH_GRAPH = 'all';
      reloadConfig();
    }
    // Room for the prefill and every step timed below (a few thousand tokens).
    const cache = new KVCache({ numBlocks: 256, blockSize: 64, numKvHeads: 8, headDim: 128 });
    try {
      const id = cache.addSequence();
      cache.append([id], prefill, prefill);
      let ran = '';
      const step = () => {
        cache.append([id], token, token);
        const r = cache.attention(q, [id], { implementation: impl });
        ran = `${r.backend} ${r.variant}`;
        return r.output;
      };
      const wallUs = wallPerCall(step, 500);
      let t: { deviceMs?: number; hostMs?: number; error?: string };
      try {
        t = timeHostHidden(step, { samples, batch, warmup: 3 });
      } catch (error) {
        t = { error: error instanceof Error ? error.message : String(error) };
      }
      row[entry ?? 'auto'] = {
        deviceMs: t.deviceMs,
        hostUs: t.hostMs === undefined ? undefined : t.hostMs * 1000,
        wallUs,
        ran,
        ...(t.error ? { hiddenHostError: t.error } : {}),
      };
    } catch (error) {
      row[entry ?? 'auto'] = { error: error instanceof Error ? error.message.split('\n')[0] : String(error) };
    } finally {
      cache.dispose();
      if (entry === 'flash-graph') {
        delete process.env.ATTNLAB_LAUNCH_GRAPH;
        reloadConfig();
      }
    }
  }
  for (const t of [q, token, prefill]) t.dispose();
  return row;
}

/**
 * First call of the flash kernel at the codelab's shape in this process: ms to a finished result, and
 * where they went — validation, the backend's plan (kernel loads included: `kernels` says where each
 * came from and its ms), the run's enqueue, the wait for the GPU — and the process's age when the call
 * began (Node.js, tsx and attnlab's imports, CUDA's context and the inputs: `readyMs`; the inputs alone: `inputsMs`).
 */
function firstCall(implementation: Implementation | undefined): void {
  const readyStarted = performance.now();
  const [q, k, v] = inputs({ B: 4, T: 128, S: 128, N: 8, K: 8, H: 64, causal: true });
  const inputsMs = performance.now() - readyStarted;
  const options = { isCausal: true, implementation } as const;
  // attention() is these four steps (api/attention.ts); timed one by one.
  const t0 = performance.now();
  const problem = validateAttention(q, k, v, options);
  const t1 = performance.now();
  const { backend, plan } = chooseBackend(problem);
  const t2 = performance.now();
  const r = runPlanned(backend, plan, problem);
  const t3 = performance.now();
  synchronize();
  const t4 = performance.now();
  const firstMs = t4 - t0;
  const phasesMs = { validate: t1 - t0, plan: t2 - t1, enqueue: t3 - t2, wait: t4 - t3 };
  const t5 = performance.now();
  attention(q, k, v, options).output.dispose();
  synchronize();
  const secondMs = performance.now() - t5;
  // Where each kernel came from: 'prebuilt' (shipped), 'disk' (the cache), 'nvrtc' (compiled now).
  const kernels = compileHistory().map((h) => `${h.file} ${h.source} ${h.milliseconds.toFixed(1)} ms`);
  process.stdout.write(
    `${JSON.stringify({ firstMs, phasesMs, secondMs, inputsMs, readyMs: t0, variant: r.variant, kernels })}\n`,
  );
}

function firstCallChild(cacheDir: string, implementation = 'flash'): Record<string, unknown> {
  const child = spawnSync(
    process.execPath,
    ['--import', 'tsx', fileURLToPath(import.meta.url), '--first-call', implementation],
    {
      env: { ...process.env, ATTNLAB_CACHE_DIR: cacheDir },
      encoding: 'utf8',
    },
  );
  try {
    return JSON.parse(child.stdout.trim().split('\n').at(-1) ?? '');
  } catch {
    return { error: `${child.status}: ${child.stderr.slice(-500)}` };
  }
}

function main(): void {
  const args = process.argv.slice(2);
  if (args.includes('--first-call')) {
    // `--first-call [flash|auto|cudnn|…]`: flash unless named.
    const named = args[args.indexOf('--first-call') + 1];
    firstCall(
      named === undefined || named.startsWith('--')
        ? 'flash'
        : named === 'auto'
          ? undefined
          : (named as Implementation),
    );
    return;
  }
  const jsonAt = args.indexOf('--json');
  const report: Record<string, unknown> = {
    command: ['node --import tsx scripts/measure-auto.ts', ...args].join(' '),
    commit: attnlabCommit(),
    machine: describeMachine(),
  };
  const print = (what: string, value: unknown) => process.stdout.write(`${what}: ${JSON.stringify(value)}\n`);
  const cacheDir = mkdtempSync(join(tmpdir(), 'attnlab-first-call-'));
  const only = args.flatMap((a, k) => (args[k - 1] === '--only' ? [a] : []));
  const wants = (part: string) => only.length === 0 || only.includes(part);
  const recordAt = args.indexOf('--record');
  const rootAt = args.indexOf('--root');
  const out =
    jsonAt >= 0
      ? args[jsonAt + 1]
      : recordAt >= 0
        ? join(
            rootAt >= 0 ? args[rootAt + 1] : SUITE_RESULTS_ROOT,
            gpuSlug((report.machine as { gpu?: { name?: string } }).gpu?.name),
            'dispatch',
            `${utcDay(new Date())}-${report.commit ?? 'unknown'}-${args[recordAt + 1]}.json`,
          )
        : null;
  const rows: unknown[] = [];
  // Written after every row: a run cut by its time cap keeps the rows it measured.
  const save = () => {
    report.rows = rows;
    if (out === null) return;
    mkdirSync(dirname(out), { recursive: true });
    writeFileSync(out, `${JSON.stringify(report, null, 2)}\n`);
  };
  if (wants('small')) {
    report.firstCallEmptyCache = firstCallChild(cacheDir);
    print('first call, empty cache (new process)', report.firstCallEmptyCache);
    report.firstCallWarmCache = firstCallChild(cacheDir);
    print('first call, warm cache (new process)', report.firstCallWarmCache);
    // What a user's first call meets: auto loads cuDNN and reads the calibrated table before it runs, and
    // where it takes cudnn, builds its plan (the first process) or reads it from the cache (the second).
    report.firstCallAutoColdPlan = firstCallChild(cacheDir, 'auto');
    print('first call of auto, no cuDNN plan cached (new process)', report.firstCallAutoColdPlan);
    report.firstCallAutoWarmCache = firstCallChild(cacheDir, 'auto');
    print('first call of auto, warm cache (new process)', report.firstCallAutoWarmCache);
    save();
    const small: Shape[] = [
      { B: 4, T: 128, S: 128, N: 8, K: 8, H: 64, causal: false },
      { B: 4, T: 128, S: 128, N: 8, K: 8, H: 64, causal: true },
      { B: 1, T: 1, S: 4096, N: 32, K: 8, H: 128, causal: false },
    ];
    for (const s of small) {
      // Only a decode step has launches to group.
      const entries = SMALL_BACKENDS.filter((e) => e !== 'flash-launches' || s.T === 1);
      const row = forwardRow(s, 30, 50, entries);
      rows.push(row);
      save();
      print('host time', row);
    }
    const kv = kvCacheRow(30, 50);
    rows.push(kv);
    save();
    print('host time', kv);
    // The backward at the codelab's shape, its host time once V8 has optimised the path (wallPerCall warms
    // up with 1,000 calls).
    const bwd = backwardRow({ B: 4, T: 128, S: 128, N: 8, K: 8, H: 64, causal: true }, 30, {
      batch: 20,
      warm: 3,
    });
    rows.push(bwd);
    save();
    print('host time', bwd);
  }
  if (wants('backward')) {
    // The recorded backward table's cases (backward-dispatch-table.ts): H=64 and 128, causal and not.
    for (const H of [64, 128])
      for (const causal of [false, true]) {
        const bwd = backwardRow({ B: 4, T: 8192, S: 8192, N: 16, K: 16, H, causal }, 5);
        rows.push(bwd);
        save();
        print('auto vs backends', bwd);
      }
  }
  // Decode first: its three rows take seconds, the forward's six compile and time longer.
  const large: Shape[] = [
    ...(wants('decode')
      ? [
          { B: 64, T: 1, S: 16384, N: 32, K: 1, H: 128, causal: false },
          { B: 8, T: 1, S: 131072, N: 32, K: 8, H: 128, causal: false },
          { B: 64, T: 1, S: 16384, N: 32, K: 8, H: 128, causal: false },
        ]
      : []),
    ...(wants('forward')
      ? [64, 128, 256].flatMap((H) =>
          [false, true].map((causal) => ({ B: 4, T: 8192, S: 8192, N: 16, K: 16, H, causal })),
        )
      : []),
  ];
  for (const s of large) {
    const row = forwardRow(s, 3, s.T === 1 ? 5 : 2);
    rows.push(row);
    save();
    print('auto vs backends', row);
  }

  save();
  if (out !== null) process.stdout.write(`wrote ${out}\n`);
}

main();
