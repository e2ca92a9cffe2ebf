/**
 * `attnlab bench`: sweeps over sizes, dtypes, masks and implementations, timed with CUDA events (or
 * performance.now() on the CPU), optionally beside JAX and PyTorch; prints a table and writes JSON
 * and a self-contained HTML report.
 */
import { join } from 'node:path';
import type { Command } from 'commander';
import { cudaAvailable } from '../backends/cuda/runtime/context.js';
import type { Implementation } from '../backends/problem.js';
import { DEFAULT_MAX_CASE_S, memoryShortfall, timeShortfall } from '../bench/fit.js';
import { attnlabLabel, type MeasureOptions } from '../bench/measure.js';
import { rowFlops } from '../bench/pass-call.js';
import { DEFAULT_PEER_CASE_LIMIT_MS, parsePeerList } from '../bench/peers.js';
import { codelabSweeps } from '../bench/presets.js';
import { terminalProgress } from '../bench/progress.js';
import { makeResults } from '../bench/results.js';
import { runSweeps, type SweepGroup } from '../bench/run-bench.js';
import { SUITES } from '../bench/suites.js';
import {
  type BenchCase,
  checkSweepSize,
  DTYPE_ALIASES,
  expandSweep,
  parseBoolList,
  parseDTypeList,
  parseImplList,
  parseIntList,
  type SweepSpec,
} from '../bench/sweep.js';
import { InvalidArgumentError } from '../errors.js';
import { colorEnabled } from '../report/terminal.js';
import { writeReport } from '../report/write.js';
import { saveResults } from '../results/files.js';
import { neutraliseLine, neutraliseStrings } from '../results/safe-text.js';
import { PASSES, type Pass, type ResultRow } from '../results/schema.js';
import { shapeLabel } from '../results/shape-label.js';
import { FLOAT_DTYPES } from '../tensor/dtype.js';
import { planSuite, type SuiteFlags, suiteListText } from './bench-suite.js';
import { parseOption } from './numbers.js';
import { givenOnCommandLine, optionValue } from './options.js';
import {
  checkDistinctPaths,
  checkFileName,
  checkOutputDir,
  checkOutputFile,
  type Output,
  writingTo,
} from './output-path.js';
import { listenForStop, signalExitCode } from './signals.js';

interface BenchFlags {
  batch: string;
  seq: string;
  kvSeq?: string;
  heads: string;
  kvHeads?: string;
  headDim: string;
  blockSize?: string;
  dtype: string;
  causal: string;
  pass: string;
  impl?: string;
  preset?: string;
  suite?: string;
  quick?: boolean;
  name: string;
  peers?: string;
  peerCaseS: string;
  maxCaseS: string;
  warmup: string;
  repeats: string;
  budgetMs: string;
  settleMs: string;
  seed: string;
  check: boolean;
  ceiling?: string;
  out?: string;
  json?: string;
  html?: string;
  progress: boolean;
}

/** Adds `attnlab bench` to the program. */
export function registerBenchCommand(program: Command): void {
  program
    .command('bench')
    .description('Time attention over a sweep of shapes and implementations (and JAX/PyTorch peers)')
    .option('--batch <list>', 'B values; lists like 1,2,4 or doubling ranges like 1..16', '4')
    .option('--seq <list>', 'T values (S = T unless --kv-seq)', '128')
    .option('--kv-seq <list>', 'S values (key/value length)')
    .option('--heads <list>', 'N values (query heads)', '8')
    .option('--kv-heads <list>', 'K values (KV heads; N must be a multiple); default K = N')
    .option('--head-dim <list>', 'H values', '64')
    .option(
      '--block-size <list>',
      'key/value as a paged KV cache of blocks of these sizes (e.g. 16,64) behind a shuffled block table, instead of dense; decode steps: --seq 1 --kv-seq <cached tokens>',
    )
    .option(
      '--dtype <list>',
      // Every name parseDTypeList takes: the help once listed three of six (float64 and fp8 ran unlisted).
      `dtypes: ${FLOAT_DTYPES.join(', ')} (or ${Object.keys(DTYPE_ALIASES).join(', ')}); a backend that cannot take one gives unsupported rows`,
      'bfloat16',
    )
    .option('--causal <list>', 'true, false or true,false', 'false')
    .option(
      '--pass <pass>',
      'forward, backward (the pullback alone, residuals made beforehand) or forward+backward; backward TFLOP/s count 2.5x the forward flops',
      'forward',
    )
    .option('--impl <list>', 'attnlab backends: naive, flash, cudnn, reference (default: this machine’s)')
    .option(
      '--preset <name>',
      "'codelab': the codelab's default shape, sequence (64..1024) and batch sweeps; 'codelab-long': T to 16384 (sets every size, dtype and mask; --impl keeps some of its implementations)",
    )
    .option(
      '--suite <name>',
      `a named suite: ${SUITES.map((s) => s.name).join(', ')} ('list' prints what each times); writes benchmarks/results/<gpu>/<suite>/<date>-<commit>.json and .html (--out <dir> for another root); size options beside it replace the suite's values`,
    )
    .option('--quick', "with --suite: the suite's shorter list (its headline shapes)")
    .option('--name <text>', 'the group name of the rows (not with --preset) and of the --out files', 'bench')
    .option('--peers <list>', 'also run jax and/or torch on the same shapes, e.g. jax,torch')
    .option(
      '--peer-case-s <s>',
      'seconds a peer may take on one case (its imports count as the first) before it is stopped',
      String(DEFAULT_PEER_CASE_LIMIT_MS / 1000),
    )
    .option(
      '--max-case-s <s>',
      'most seconds a CPU case may need at the least (its first, warm-up and fewest timed calls at ≤ 10 GFLOP/s); longer ones are not run',
      String(DEFAULT_MAX_CASE_S),
    )
    .option('--warmup <n>', 'untimed calls after the first', '5')
    .option('--repeats <n>', 'most timed calls per case', '100')
    .option('--budget-ms <ms>', 'timed-call budget per case; slow cases get fewer repeats (≥ 10)', '1000')
    .option(
      '--settle-ms <ms>',
      'back-to-back calls for this long right before timing, so every row is timed in the GPU’s sustained (power-capped) state',
      '300',
    )
    .option('--seed <n>', 'seed of the random inputs', '0')
    .option('--no-check', 'skip the max-error check against the float64 oracle')
    .option('--ceiling <tflops>', 'matmul TFLOP/s for "% peak" instead of measuring it once')
    .option(
      '--out <dir>',
      'write <dir>/<name>.json and <dir>/<name>.html (<preset>.json with --preset and no --name)',
    )
    .option('--json <file>', 'write the results JSON here')
    .option('--html <file>', 'write the HTML report here')
    .option('--no-progress', 'no progress bar or progress lines')
    .addHelpText(
      'after',
      `
Lists: comma-separated, each value once (a repeat is dropped, the first order kept), no empty
item; a..b doubles from a while the value is ≤ b, so 64..1024 is 64,128,256,512,1024 and 3..10 is
3,6 (b is included only when the doubling reaches it).

Timing: the first call (compile, plan) is reported apart; then a warm-up, --settle-ms of
back-to-back calls, and many calls with CUDA events around each, inputs rotated over copies spanning 2x L2; median with p10/p90, and host wall
time per call. Results JSON follows docs/results-schema.md.

Examples:
  attnlab bench --suite forward --peers torch
  attnlab bench --suite list
  attnlab bench --seq 512..8192 --impl flash,cudnn --dtype bf16 --causal true,false
  attnlab bench --pass backward --batch 4 --seq 8192 --heads 16 --head-dim 128 --impl cudnn --causal true,false --peers jax,torch
  attnlab bench --preset codelab --peers jax,torch --out attnlab-out`,
    )
    .action(async (flags: BenchFlags, command: Command) => {
      if (flags.suite === 'list') {
        process.stdout.write(`${suiteListText()}\n`);
        return;
      }
      if (flags.quick && flags.suite === undefined)
        throw new InvalidArgumentError('--quick', '--quick with --suite (it shortens a suite)', 'no --suite');
      const plan = flags.suite !== undefined ? planSuite(flags as BenchFlags & SuiteFlags, command) : null;
      const groups = plan
        ? plan.groups
        : flags.preset
          ? presetGroups(flags.preset, command, flags.impl)
          : [{ name: flags.name, spec: specFrom(flags) }];
      const measure = { ...measureFrom(flags), ...(plan ? { pass: plan.pass } : {}) };
      if (measure.pass !== 'forward' && flags.blockSize !== undefined) {
        // Paged caches are timed on the forward only: each row would say 'unsupported' after the run.
        throw new InvalidArgumentError(
          '--block-size',
          `no --block-size with --pass ${measure.pass} (paged caches are timed on the forward only)`,
          JSON.stringify(flags.blockSize),
        );
      }
      const ceiling = flags.ceiling === undefined ? undefined : parseOption('bench --ceiling', flags.ceiling);
      const peers = flags.peers !== undefined ? parsePeerList(flags.peers) : [];
      const peerCaseLimitMs = 1000 * parseOption('bench --peer-case-s', flags.peerCaseS);
      const { name, json, html } = plan
        ? { name: plan.suite.name, json: plan.json, html: plan.html }
        : outputsFrom(flags);
      const suite = plan ? { suite: plan.info } : {};
      // The sizes first: a sweep of millions of cases is refused before a list of them is made.
      for (const group of groups) checkSweepSize(group.spec, `the sweep '${group.name}'`);
      const maxCaseS = parseOption('bench --max-case-s', flags.maxCaseS);
      const tooLarge = casesThatCannotFit(groups, measure, maxCaseS);
      // Ctrl-C, SIGTERM or SIGHUP stops the run after the case being measured and keeps what finished (a
      // second one quits at once): a sweep ended by a scheduler's SIGTERM used to lose every row.
      const stop = listenForStop('bench', 'stopping after the current case');
      let run: Awaited<ReturnType<typeof runSweeps>>;
      try {
        run = await runSweeps(groups, {
          measure,
          peers,
          ...(plan ? { peerImpls: plan.peerImpls } : {}),
          ceiling,
          skip: (c) => tooLarge.get(caseKey(c)) ?? null,
          progress: flags.progress ? terminalProgress() : undefined,
          // A run stopped part-way (a time limit on a lent GPU) keeps the parts it finished.
          onPartial: (partial) => {
            if (json)
              writingTo(json.option, json.path, () =>
                saveResults(json.path, makeResults('bench', { ...partial, ...suite })),
              );
          },
          signal: stop.signal,
          peerCaseLimitMs,
        });
      } finally {
        stop.dispose();
      }
      const received = stop.received();
      if (run.interrupted && received) {
        process.exitCode = signalExitCode(received); // 128 + the signal, as a shell reports a command it ended
        if (run.rows.length === 0) {
          process.stderr.write('attnlab: bench: interrupted before any case finished: nothing saved\n');
          return;
        }
      }
      const results = makeResults('bench', { ...run, ...suite });
      // The status before the output: a reader that has gone ends the process at the next write.
      const nothing = run.interrupted ? null : nothingRan(results.rows);
      if (nothing) process.exitCode = 1;
      if (json) writingTo(json.option, json.path, () => saveResults(json.path, results));
      // Printed as report prints a loaded file: every string (a hostname, a variable's value, a peer's
      // version) with its control characters written out, so nothing in them drives the terminal.
      const text = writingTo(html?.option ?? '--html', html?.path ?? '', () =>
        writeReport([{ name, results: neutraliseStrings(results) }], {
          htmlPath: html?.path,
          color: colorEnabled(),
        }),
      );
      process.stdout.write(`${text}\n`);
      // Paths as one inert line each: a control character in one is the user's typo, not an instruction.
      if (json) process.stdout.write(`results: ${neutraliseLine(json.path)}\n`);
      if (html) process.stdout.write(`report:  ${neutraliseLine(html.path)}\n`);
      if (nothing) process.stderr.write(`attnlab: bench: ${nothing}\n`);
      if (run.interrupted) {
        const saved = json ? `, saved to ${neutraliseLine(json.path)}` : ' (no --json or --out: not saved)';
        process.stderr.write(`attnlab: bench: interrupted: ${results.rows.length} rows finished${saved}\n`);
      }
    });
}

/**
 * The name of the rows' group and files, and the results and report files, every path checked before
 * the first case runs (a bad one costs nothing but its line). --out names the files that --json and
 * --html leave to it: beside both, it would name nothing, so that is refused rather than dropped.
 */
function outputsFrom(flags: BenchFlags): { name: string; json?: Output; html?: Output } {
  checkFileName('--name', flags.name);
  // Files are named by --name when one is given, else by the preset ('bench' by default).
  const name = flags.name !== 'bench' || !flags.preset ? flags.name : flags.preset;
  if (flags.out !== undefined && flags.json !== undefined && flags.html !== undefined) {
    throw new InvalidArgumentError(
      '--out',
      'no --out beside both --json and --html (they name every file it would)',
      JSON.stringify(flags.out),
    );
  }
  const inOut = (extension: string): Output | undefined =>
    flags.out === undefined ? undefined : { option: '--out', path: join(flags.out, `${name}.${extension}`) };
  const json = flags.json !== undefined ? { option: '--json', path: flags.json } : inOut('json');
  const html = flags.html !== undefined ? { option: '--html', path: flags.html } : inOut('html');
  if (flags.out !== undefined) checkOutputDir('--out', flags.out);
  if (json) checkOutputFile(json.option, json.path);
  if (html) checkOutputFile(html.option, html.path);
  if (json && html) checkDistinctPaths(html.option, html.path, [json]);
  return { name, json, html };
}

/** The timing options, each checked: a count of 0 repeats or a NaN budget cannot give a row. */
function measureFrom(flags: BenchFlags): Partial<MeasureOptions> {
  const repeats = parseOption('bench --repeats', flags.repeats);
  return {
    warmup: parseOption('bench --warmup', flags.warmup),
    repeats,
    minRepeats: Math.min(10, repeats),
    budgetMs: parseOption('bench --budget-ms', flags.budgetMs),
    settleMs: parseOption('bench --settle-ms', flags.settleMs),
    seed: parseOption('bench --seed', flags.seed),
    checkError: flags.check,
    pass: parsePass(flags.pass),
  };
}

function parsePass(text: string): Pass {
  if (!PASSES.includes(text as Pass)) {
    throw new InvalidArgumentError('--pass', PASSES.join(', '), JSON.stringify(text));
  }
  return text as Pass;
}

function caseKey(c: BenchCase): string {
  return [c.impl, c.dtype, c.B, c.T, c.S, c.N, c.K, c.H].join(' ');
}

/**
 * The cases too large for this machine's memory, or too long for --max-case-s, each with why, printed before
 * anything runs (their rows then say 'out-of-memory: not run: …' or 'unsupported: not run: …').
 */
function casesThatCannotFit(
  groups: readonly SweepGroup[],
  measure: Partial<MeasureOptions>,
  maxCaseS: number,
): Map<string, string | { status: 'unsupported'; reason: string }> {
  const reasons = new Map<string, string | { status: 'unsupported'; reason: string }>();
  const pass = measure.pass ?? 'forward';
  // The first call, the warm-up and the fewest timed calls: what a case runs however short its budget.
  const calls = 1 + (measure.warmup ?? 0) + (measure.minRepeats ?? 1);
  for (const group of groups) {
    for (const c of expandSweep(group.spec).cases) {
      const key = caseKey(c);
      if (reasons.has(key)) continue;
      const memory = memoryShortfall(c);
      const time = memory ? null : timeShortfall(c, rowFlops({ ...c, pass }), calls, maxCaseS);
      const why = memory ?? time;
      if (why) {
        reasons.set(key, memory ?? { status: 'unsupported', reason: why });
        process.stderr.write(`attnlab: bench: will not run ${attnlabLabel(c)} ${shapeLabel(c)}: ${why}\n`);
      }
    }
  }
  return reasons;
}

/** Why no row of the run produced a time, or null when at least one did. */
export function nothingRan(rows: readonly ResultRow[]): string | null {
  if (rows.some((r) => r.status === 'ok')) return null;
  if (rows.length === 0) return 'no case to run (every combination of the sizes was invalid)';
  const counts = new Map<string, number>();
  for (const r of rows) counts.set(r.status, (counts.get(r.status) ?? 0) + 1);
  const summary = [...counts].map(([status, n]) => `${n} ${status}`).join(', ');
  const first = rows[0];
  return `no row ran (${summary}); first: ${first.label} ${shapeLabel(first)}: ${first.reason ?? first.status}`;
}

/** What a preset sets itself: any of these given beside --preset would be dropped unsaid. */
const PRESET_SETS = [
  '--batch',
  '--seq',
  '--kv-seq',
  '--heads',
  '--kv-heads',
  '--head-dim',
  '--block-size',
  '--dtype',
  '--causal',
] as const;

/**
 * The preset's sweeps. Options the preset sets are refused beside it; --impl keeps only the named
 * implementations of the preset's series (the codelab's float32 series has no cuDNN, so
 * `--impl cudnn` times the bfloat16 one alone), and naming one the preset never times is refused.
 */
function presetGroups(preset: string, command: Command, implText: string | undefined): SweepGroup[] {
  if (preset !== 'codelab' && preset !== 'codelab-long') {
    throw new InvalidArgumentError('--preset', "'codelab' or 'codelab-long'", JSON.stringify(preset));
  }
  for (const option of PRESET_SETS) {
    if (givenOnCommandLine(command, option))
      throw new InvalidArgumentError(
        option,
        `no ${option} beside --preset (the preset '${preset}' sets the sizes, dtypes and mask)`,
        JSON.stringify(optionValue(command, option)),
      );
  }
  const groups = codelabSweeps(cudaAvailable().ok ? 'cuda' : 'cpu', preset === 'codelab-long');
  if (implText === undefined) return groups;
  const wanted = parseImplList('--impl', implText);
  const timed = [...new Set(groups.flatMap((g) => g.spec.impl))];
  const other = wanted.find((impl) => !timed.includes(impl));
  if (other)
    throw new InvalidArgumentError(
      '--impl',
      `implementations the preset '${preset}' times here (${timed.join(', ')})`,
      JSON.stringify(other),
    );
  return groups
    .map((g) => ({ ...g, spec: { ...g.spec, impl: g.spec.impl.filter((impl) => wanted.includes(impl)) } }))
    .filter((g) => g.spec.impl.length > 0);
}

/** The sweep the size options describe. The default implementations are the ones this machine runs. */
export function specFrom(
  flags: Omit<BenchFlags, 'name' | 'progress' | 'check' | 'peerCaseS' | 'maxCaseS'>,
): SweepSpec {
  const impl: Implementation[] =
    flags.impl !== undefined
      ? parseImplList('--impl', flags.impl)
      : cudaAvailable().ok
        ? ['naive', 'flash', 'cudnn']
        : ['reference', 'flash'];
  return {
    batch: parseIntList('--batch', flags.batch),
    seq: parseIntList('--seq', flags.seq),
    kvSeq: flags.kvSeq !== undefined ? parseIntList('--kv-seq', flags.kvSeq) : undefined,
    heads: parseIntList('--heads', flags.heads),
    kvHeads: flags.kvHeads !== undefined ? parseIntList('--kv-heads', flags.kvHeads) : undefined,
    headDim: parseIntList('--head-dim', flags.headDim),
    blockSize: flags.blockSize !== undefined ? parseIntList('--block-size', flags.blockSize) : undefined,
    dtype: parseDTypeList('--dtype', flags.dtype),
    causal: parseBoolList('--causal', flags.causal),
    impl,
  };
}
