/**
 * `attnlab bench`: sweeps over sizes, dtypes, masks and implementations, timed with CUDA events (or
 * performance.now() on the CPU), optionally beside JAX and PyTorch; prints a table and writes JSON
 * and a self-contained HTML report.
 */
import { join } from 'node:path';
import type { Command } from 'commander';
import { cudaAvailable } from '../backends/cuda/context.js';
import type { Implementation } from '../backends/problem.js';
import { parsePeerList } from '../bench/peers.js';
import { codelabSweeps } from '../bench/presets.js';
import { terminalProgress } from '../bench/progress.js';
import { makeResults } from '../bench/results.js';
import { runSweeps, type SweepGroup } from '../bench/run-bench.js';
import {
  parseBoolList,
  parseDTypeList,
  parseImplList,
  parseIntList,
  type SweepSpec,
} from '../bench/sweep.js';
import { InvalidArgumentError } from '../errors.js';
import { writeReport } from '../report/write.js';
import { saveResults } from '../results/files.js';

interface BenchFlags {
  batch: string;
  seq: string;
  kvSeq?: string;
  heads: string;
  kvHeads?: string;
  headDim: string;
  dtype: string;
  causal: string;
  impl?: string;
  preset?: string;
  name: string;
  peers?: string;
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
    .option('--dtype <list>', 'dtypes: bfloat16, float16, float32 (bf16, fp16, f32)', 'bfloat16')
    .option('--causal <list>', 'true, false or true,false', 'false')
    .option('--impl <list>', 'attnlab backends: naive, flash, cudnn, reference (default: this machine’s)')
    .option(
      '--preset <name>',
      "'codelab': the codelab's default shape, sequence (64..1024) and batch sweeps; 'codelab-long': T to 16384",
    )
    .option('--name <text>', 'the group name of the rows (not with --preset) and of the --out files', 'bench')
    .option('--peers <list>', 'also run jax and/or torch on the same shapes, e.g. jax,torch')
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
Timing: the first call (compile, plan) is reported apart; then a warm-up, --settle-ms of
back-to-back calls, and many calls with CUDA events around each, inputs rotated over copies spanning 2x L2; median with p10/p90, and host wall
time per call. Results JSON follows docs/results-schema.md.

Examples:
  attnlab bench --seq 512..8192 --impl flash,cudnn --dtype bf16 --causal true,false
  attnlab bench --preset codelab --peers jax,torch --out bench/results/h200`,
    )
    .action(async (flags: BenchFlags) => {
      const groups = flags.preset
        ? presetGroups(flags.preset)
        : [{ name: flags.name, spec: specFrom(flags) }];
      const count = (option: string, text: string) => {
        const value = Number(text);
        if (!Number.isInteger(value) || value < 0)
          throw new InvalidArgumentError(option, 'an integer ≥ 0', text);
        return value;
      };
      const ceiling = flags.ceiling === undefined ? undefined : Number(flags.ceiling);
      if (ceiling !== undefined && !(ceiling > 0)) {
        throw new InvalidArgumentError('--ceiling', 'a positive TFLOP/s value', String(flags.ceiling));
      }
      // Files are named by --name when one is given, else by the preset ('bench' by default).
      const name = flags.name !== 'bench' || !flags.preset ? flags.name : flags.preset;
      const jsonPath = flags.json ?? (flags.out ? join(flags.out, `${name}.json`) : undefined);
      const htmlPath = flags.html ?? (flags.out ? join(flags.out, `${name}.html`) : undefined);
      const run = await runSweeps(groups, {
        measure: {
          warmup: count('--warmup', flags.warmup),
          repeats: Math.max(1, count('--repeats', flags.repeats)),
          minRepeats: Math.min(10, Math.max(1, count('--repeats', flags.repeats))),
          budgetMs: count('--budget-ms', flags.budgetMs),
          settleMs: count('--settle-ms', flags.settleMs),
          seed: count('--seed', flags.seed),
          checkError: flags.check,
        },
        peers: flags.peers ? parsePeerList(flags.peers) : [],
        ceiling,
        progress: flags.progress ? terminalProgress() : undefined,
        // A run stopped part-way (a time limit on a lent GPU) keeps the parts it finished.
        onPartial: (partial) => {
          if (jsonPath) saveResults(jsonPath, makeResults('bench', partial));
        },
      });
      const results = makeResults('bench', run);
      if (jsonPath) saveResults(jsonPath, results);
      process.stdout.write(
        `${writeReport([{ name, results }], { htmlPath, color: Boolean(process.stdout.isTTY) })}\n`,
      );
      if (jsonPath) process.stdout.write(`results: ${jsonPath}\n`);
      if (htmlPath) process.stdout.write(`report:  ${htmlPath}\n`);
    });
}

function presetGroups(preset: string): SweepGroup[] {
  if (preset !== 'codelab' && preset !== 'codelab-long') {
    throw new InvalidArgumentError('--preset', "'codelab' or 'codelab-long'", JSON.stringify(preset));
  }
  return codelabSweeps(cudaAvailable().ok ? 'cuda' : 'cpu', preset === 'codelab-long');
}

/** The sweep the size options describe. The default implementations are the ones this machine runs. */
export function specFrom(flags: Omit<BenchFlags, 'name' | 'progress' | 'check'>): SweepSpec {
  const impl: Implementation[] = flags.impl
    ? parseImplList('--impl', flags.impl)
    : cudaAvailable().ok
      ? ['naive', 'flash', 'cudnn']
      : ['reference', 'flash'];
  return {
    batch: parseIntList('--batch', flags.batch),
    seq: parseIntList('--seq', flags.seq),
    kvSeq: flags.kvSeq ? parseIntList('--kv-seq', flags.kvSeq) : undefined,
    heads: parseIntList('--heads', flags.heads),
    kvHeads: flags.kvHeads ? parseIntList('--kv-heads', flags.kvHeads) : undefined,
    headDim: parseIntList('--head-dim', flags.headDim),
    dtype: parseDTypeList('--dtype', flags.dtype),
    causal: parseBoolList('--causal', flags.causal),
    impl,
  };
}
