/**
 * `attnlab bench --suite NAME`: a named suite (src/bench/suites.ts) with its pass and peer implementations,
 * filed under benchmarks/results/<gpu>/<suite>/<date>-<commit>.json and .html (results/suite-path.ts).
 * Size options given beside it replace the suite's values in every group (small sizes for a CPU),
 * and the results file says which.
 */
import type { Command } from 'commander';
import { cudaAvailable, getCudaContext } from '../backends/cuda/runtime/context.js';
import { attnlabCommit } from '../bench/machine.js';
import type { PeerName } from '../bench/peers.js';
import type { SweepGroup } from '../bench/run-bench.js';
import {
  type BenchSuite,
  findSuite,
  resolveSuite,
  SUITES,
  type SuiteOverrides,
  suiteListing,
} from '../bench/suites.js';
import { parseBoolList, parseDTypeList, parseImplList, parseIntList } from '../bench/sweep.js';
import { InvalidArgumentError } from '../errors.js';
import type { Pass, SuiteInfo } from '../results/schema.js';
import { gpuSlug, SUITE_RESULTS_ROOT, suiteResultsFiles } from '../results/suite-path.js';
import { givenOnCommandLine, optionValue } from './options.js';
import { checkDistinctPaths, checkOutputDir, checkOutputFile, type Output } from './output-path.js';

export interface SuiteFlags {
  suite: string;
  quick?: boolean;
  batch: string;
  seq: string;
  kvSeq?: string;
  heads: string;
  kvHeads?: string;
  headDim: string;
  blockSize?: string;
  dtype: string;
  causal: string;
  impl?: string;
  out?: string;
  json?: string;
  html?: string;
}

export interface SuitePlan {
  readonly suite: BenchSuite;
  readonly groups: SweepGroup[];
  readonly pass: Pass;
  readonly peerImpls: Readonly<Record<PeerName, readonly string[]>>;
  readonly info: SuiteInfo;
  readonly json: Output;
  readonly html: Output;
}

/** Options a suite sets itself: given beside --suite they would be dropped or contradict it. */
const SUITE_REFUSES = ['--preset', '--pass', '--name'] as const;

/** The options that replace a suite's values, each with how its value is read. */
const OVERRIDES: readonly [string, keyof SuiteOverrides, (option: string, text: string) => unknown][] = [
  ['--batch', 'batch', parseIntList],
  ['--seq', 'seq', parseIntList],
  ['--kv-seq', 'kvSeq', parseIntList],
  ['--heads', 'heads', parseIntList],
  ['--kv-heads', 'kvHeads', parseIntList],
  ['--head-dim', 'headDim', parseIntList],
  ['--block-size', 'blockSize', parseIntList],
  ['--dtype', 'dtype', parseDTypeList],
  ['--causal', 'causal', parseBoolList],
  ['--impl', 'impl', parseImplList],
];

/** `--suite list`: the suites, one a line. */
export function suiteListText(): string {
  return `${suiteListing()}\n\nRun one: attnlab bench --suite NAME [--quick] [--peers torch,jax]`;
}

/**
 * The suite's groups, pass, peers and output files, every option checked before anything runs.
 * Without CUDA a GPU-sized suite runs only with sizes given beside it: at its own sizes (B=4,
 * T=8192) one CPU call takes hours.
 */
export function planSuite(flags: SuiteFlags, command: Command): SuitePlan {
  const suite = findSuite(flags.suite);
  if (!suite) {
    throw new InvalidArgumentError(
      '--suite',
      `one of ${SUITES.map((s) => s.name).join(', ')}, or list`,
      JSON.stringify(flags.suite),
    );
  }
  for (const option of SUITE_REFUSES) {
    if (givenOnCommandLine(command, option))
      throw new InvalidArgumentError(
        option,
        `no ${option} beside --suite (the suite '${suite.name}' sets it)`,
        JSON.stringify(optionValue(command, option)),
      );
  }
  const overrides: Record<string, unknown> = {};
  const typed: string[] = [];
  for (const [option, key, parse] of OVERRIDES) {
    if (!givenOnCommandLine(command, option)) continue;
    const text = String(optionValue(command, option));
    overrides[key] = parse(option, text);
    typed.push(`${option} ${text}`);
  }
  const cuda = cudaAvailable();
  const sizes = typed.filter((t) => !t.startsWith('--impl ') && !t.startsWith('--dtype '));
  if (suite.gpuSizes && !cuda.ok && sizes.length === 0) {
    throw new InvalidArgumentError(
      '--suite',
      `a GPU for the suite '${suite.name}' at its own sizes (no CUDA here: ${cuda.reason}), or sizes for the CPU beside it (e.g. --batch 1 --seq 64 --heads 2 --head-dim 32 --impl reference,flash)`,
      JSON.stringify(suite.name),
    );
  }
  const groups = resolveSuite(suite, {
    device: cuda.ok ? 'cuda' : 'cpu',
    quick: flags.quick === true,
    overrides: overrides as SuiteOverrides,
  });
  const gpu = cuda.ok ? gpuSlug(getCudaContext().properties.name) : 'cpu';
  const { json, html } = suiteOutputs(flags, suite.name, gpu);
  return {
    suite,
    groups,
    pass: suite.pass,
    peerImpls: suite.peerImpls,
    info: { name: suite.name, gpu, quick: flags.quick === true, overrides: typed },
    json,
    html,
  };
}

/**
 * The results and report files: <root>/<gpu>/<suite>/<date>-<commit>.json and .html, root being
 * --out or benchmarks/results; --json and --html name either file instead.
 */
function suiteOutputs(flags: SuiteFlags, suite: string, gpu: string): { json: Output; html: Output } {
  if (flags.out !== undefined && flags.json !== undefined && flags.html !== undefined) {
    throw new InvalidArgumentError(
      '--out',
      'no --out beside both --json and --html (they name every file it would)',
      JSON.stringify(flags.out),
    );
  }
  const root = flags.out ?? SUITE_RESULTS_ROOT;
  // A commit from ATTNLAB_COMMIT is the user's text: only what a file name can hold.
  const commit = attnlabCommit().replace(/[^\w.-]+/g, '-');
  const filed = suiteResultsFiles(root, gpu, suite, new Date(), commit);
  const json: Output =
    flags.json !== undefined ? { option: '--json', path: flags.json } : { option: '--out', path: filed.json };
  const html: Output =
    flags.html !== undefined ? { option: '--html', path: flags.html } : { option: '--out', path: filed.html };
  if (flags.out !== undefined) checkOutputDir('--out', flags.out);
  checkOutputFile(json.option, json.path);
  checkOutputFile(html.option, html.path);
  checkDistinctPaths(html.option, html.path, [json]);
  return { json, html };
}
