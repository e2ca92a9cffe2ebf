/**
 * `attnlab tune`: calibrates `auto` on this GPU. Each shape class of the list (bench/tune.ts) is run
 * on every backend that supports it, timed with CUDA events, and the order is written to this GPU's
 * calibrated table in the cache folder (keyed by GPU, driver and library versions), which `auto`
 * follows first from then on (docs/guide/tune.md).
 */
import type { Command } from 'commander';
import { cudaAvailable } from '../backends/cuda/runtime/context.js';
import { QUICK_CASES, runTune, TUNE_CASES, type TunedCase } from '../bench/tune.js';
import { config } from '../config.js';
import { UnsupportedError } from '../errors.js';
import { colorEnabled, renderTable } from '../report/terminal.js';
import { parseOption } from './numbers.js';

interface TuneCliOptions {
  quick?: boolean;
  budgetMs?: string;
  reset?: boolean;
  json?: boolean;
}

/** A case in the letter legend, e.g. 'forward B=4 T=8192 S=8192 N=16 K=16 H=128 causal'. */
function describe(t: TunedCase): string {
  const c = t.case;
  return `${c.operation} B=${c.B} T=${c.T} S=${c.S} N=${c.N} K=${c.K} H=${c.H}${c.causal ? ' causal' : ''}`;
}

function timings(t: TunedCase): string {
  if (!t.entry) return t.note ?? '';
  const e = t.entry;
  const times = e.order.map((name) => `${name} ${e.ms[name].toFixed(3)} ms`).join(' < ');
  // The reason's first clause: a missing library's message lists every path searched.
  const skipped = Object.entries(e.skipped).map(([name, why]) => `${name} skipped: ${why.split(/[\n;]/)[0]}`);
  return [times, ...skipped].join('; ');
}

export function registerTuneCommand(program: Command): void {
  program
    .command('tune')
    .description('Time the backends on this GPU per shape class and save the order `auto` follows')
    .option(
      '--quick',
      `only ${QUICK_CASES.length} classes: the headline shapes at H=128 and two decode steps`,
    )
    .option('--budget-ms <ms>', 'wall time per shape class (default: ATTNLAB_TUNE_BUDGET_MS, 2000)')
    .option('--reset', 'start from an empty table instead of adding to the saved one')
    .option('--json', 'print JSON instead of a table')
    .action((options: TuneCliOptions) => {
      const budgetMs =
        options.budgetMs === undefined
          ? config().tuneBudgetMs
          : parseOption('tune --budget-ms', options.budgetMs);
      const cuda = cudaAvailable();
      if (!cuda.ok)
        throw new UnsupportedError('attnlab tune', `it times backends on a CUDA GPU: ${cuda.reason}`);
      const cases = options.quick ? QUICK_CASES : TUNE_CASES;
      const progress = !options.json && process.stderr.isTTY;
      const { file, cases: done } = runTune({
        cases,
        budgetMs,
        reset: options.reset,
        onCase: (t, i, total) => {
          if (progress) process.stderr.write(`\r[${i + 1}/${total}] ${describe(t)}\u001b[K`);
        },
      });
      if (progress) process.stderr.write('\r\u001b[K');
      if (options.json) {
        process.stdout.write(`${JSON.stringify({ file, cases: done }, null, 2)}\n`);
        return;
      }
      const rows = done.map((t) => [describe(t), t.entry?.order[0] ?? '—', timings(t)]);
      process.stdout.write(
        `${renderTable(['case', 'auto runs', 'median device time'], rows, { color: colorEnabled() })}\n`,
      );
      process.stdout.write(`calibrated table: ${file}\n`);
    });
}
