/**
 * `attnlab lab`: the codelab as a command — attention from scratch, the fused kernel, cuDNN, the
 * causal mask, timings, sweeps, MHA/GQA/MQA, the TE-style module and FP8 — with tables and line
 * charts in the terminal, and its results JSON and HTML report (with charts) written to a folder
 * named on the last lines, because the charts are what people look at.
 */
import { join } from 'node:path';
import type { Command } from 'commander';
import { InvalidArgumentError } from '../errors.js';
import { runLab } from '../lab/run-lab.js';
import { NOTEBOOK_FILE, writeCodelabNotebook } from '../notebook/files.js';
import { recordedGpuLab } from '../report/recorded.js';
import { colorEnabled } from '../report/terminal.js';
import { writeReport } from '../report/write.js';
import { saveResults } from '../results/files.js';
import { neutraliseLine } from '../results/safe-text.js';
import type { ResultsFile } from '../results/schema.js';
import { lockFolder } from './folder-lock.js';
import { labSizesHelp } from './lab-help.js';
import { parseOption } from './numbers.js';
import { checkOutputDir, checkOutputFile, createFreshFolder, writingTo } from './output-path.js';
import { listenForStop, signalExitCode } from './signals.js';

/** The lab's last section, named in the partial marks. */
const LAST_SECTION = '11';

/** Where the lab writes without --out: a new folder per run, under the current folder. */
export function defaultLabFolder(now = new Date()): string {
  const stamp = now.toISOString().replace(/[-:]/g, '').replace('T', '-').slice(0, 15);
  return join('attnlab-out', `lab-${stamp}`);
}

/** Adds `attnlab lab` to the program. */
export function registerLabCommand(program: Command): void {
  program
    .command('lab')
    .description(
      "Run the attention codelab's sections 2-10, and 11 (backward), on this machine (GPU, or CPU backends at small sizes)",
    )
    .option('--out <dir>', 'the folder for lab.json (results) and lab.html (report with charts)')
    .option('--no-report', 'write no files: tables and charts in the terminal only')
    .option('--quick', 'shorter sweeps: sequence length up to 1024 on a GPU, 128 on the CPU')
    .option('--budget-ms <ms>', 'timed-call budget per measured case', '200')
    .option(
      '--notebook [dir]',
      `write the codelab as a Jupyter notebook (${NOTEBOOK_FILE}, TypeScript kernel tslab) into dir (default: the current folder) and run nothing`,
    )
    .addHelpText('after', () => `\n${labSizesHelp()}`)
    .action(
      async (options: {
        out?: string;
        report: boolean;
        quick?: boolean;
        budgetMs: string;
        notebook?: string | true;
      }) => {
        if (options.notebook !== undefined) {
          writeNotebook(options.notebook === true ? '.' : options.notebook, options);
          return;
        }
        const budgetMs = parseOption('lab --budget-ms', options.budgetMs);
        if (!options.report && options.out !== undefined) {
          // --no-report writes no file: the folder would be dropped without a word.
          throw new InvalidArgumentError(
            '--out',
            'no --out with --no-report (which writes no files)',
            JSON.stringify(options.out),
          );
        }
        // The default folder is made here, exclusively: two labs started in the same second get two folders.
        const out = options.report
          ? (options.out ?? createFreshFolder('--out', defaultLabFolder()))
          : undefined;
        const [jsonPath, htmlPath] = out ? [join(out, 'lab.json'), join(out, 'lab.html')] : [];
        if (out && jsonPath && htmlPath) {
          // Checked before the first section: a bad folder costs one line, not a finished lab.
          checkOutputDir('--out', out);
          checkOutputFile('--out', jsonPath);
          checkOutputFile('--out', htmlPath);
        }
        // One lab per folder: a second `lab --out DIR` into a folder a live lab holds is refused here.
        const lock = out ? lockFolder('--out', out, 'attnlab lab') : null;
        if (lock?.tookOver) process.stderr.write(`attnlab: lab: ${lock.tookOver}\n`);
        try {
          await runAndSave(options, budgetMs, jsonPath, htmlPath);
        } finally {
          lock?.release();
        }
      },
    );
}

/** Runs the lab's sections, saving after each, and the whole (or the part a stop signal left) at the end. */
async function runAndSave(
  options: { quick?: boolean },
  budgetMs: number,
  jsonPath: string | undefined,
  htmlPath: string | undefined,
): Promise<void> {
  const color = colorEnabled();
  const save = (results: ResultsFile, note?: string) => {
    if (!jsonPath || !htmlPath) return;
    if (note) results = { ...results, notes: [...results.notes, note] };
    writingTo('--out', jsonPath, () => saveResults(jsonPath, results));
    writingTo('--out', htmlPath, () =>
      writeReport([{ name: 'lab', results }], {
        htmlPath,
        title: 'attnlab lab',
        beside: besideRun(results),
      }),
    );
  };
  // Saved after each section marked partial, so a lab ended by anything (SIGKILL, a machine's time limit)
  // leaves a file that says so; a stop signal ends it after the running section, saved and marked.
  const stop = listenForStop('lab', 'stopping after the current section');
  let last = 'none';
  let results: ResultsFile;
  try {
    results = await runLab({
      quick: options.quick ?? false,
      budgetMs,
      color,
      write: (text) => process.stdout.write(`${text}\n`),
      onSection: (partial, section) => {
        last = section;
        save(
          partial,
          `partial: sections up to ${section} of ${LAST_SECTION} finished; the lab was still running`,
        );
      },
      signal: stop.signal,
    });
    // A signal that came while the last section ran synchronously waits in the event loop: without this
    // turn the handlers are removed before it is heard, and the lab would exit 0 with its results unmarked.
    await new Promise((resolve) => setImmediate(resolve));
  } finally {
    stop.dispose();
  }
  const received = stop.received();
  if (received) {
    process.exitCode = signalExitCode(received);
    save(
      results,
      `interrupted: sections up to ${last} of ${LAST_SECTION} finished, the rest not run (stopped by ${received})`,
    );
    process.stderr.write(`attnlab: lab: interrupted by ${received} after section ${last}\n`);
  }
  if (!jsonPath || !htmlPath) return;
  if (!received) save(results);
  const beside = besideRun(results);
  if (beside) {
    process.stdout.write(
      `\nThe report shows a recorded run of this lab on ${neutraliseLine(beside.name)} beside these CPU numbers: what each level buys on a GPU.\n`,
    );
  }
  process.stdout.write(
    `\nresults: ${neutraliseLine(jsonPath)}\nreport:  ${neutraliseLine(htmlPath)} (open it in a browser: every sweep as a chart)\n`,
  );
}

/**
 * The recorded GPU run a lab without a GPU shows beside its own numbers (none on a GPU: its own
 * numbers are the point).
 */
function besideRun(results: ResultsFile): { name: string; results: ResultsFile } | null {
  if (results.machine.device === 'cuda') return null;
  const recorded = recordedGpuLab();
  return recorded ? { name: recorded.label, results: recorded.results } : null;
}

/** `--notebook`: copies the notebook and says how to open it; the lab's other options do not apply. */
function writeNotebook(dir: string, options: { out?: string; quick?: boolean; report: boolean }): void {
  const clash =
    options.out !== undefined ? '--out' : options.quick ? '--quick' : !options.report ? '--no-report' : null;
  if (clash) {
    throw new InvalidArgumentError('--notebook', `no ${clash} with --notebook (which runs nothing)`, clash);
  }
  checkOutputDir('--notebook', dir);
  const path = writingTo('--notebook', join(dir, NOTEBOOK_FILE), () => writeCodelabNotebook(dir));
  process.stdout.write(
    `notebook: ${neutraliseLine(path)}\n` +
      'open it with the TypeScript kernel: npm install attnlab tslab && npx tslab install && jupyter lab\n',
  );
}
