/**
 * `attnlab report a.json [b.json …] -o report.html`: saved results as terminal tables and one
 * self-contained HTML report; several files are compared on the same charts, each series prefixed
 * with its file's name.
 */
import { basename } from 'node:path';
import type { Command } from 'commander';
import type { NamedResults } from '../report/charts.js';
import { colorEnabled } from '../report/terminal.js';
import { writeReport } from '../report/write.js';
import { loadResults } from '../results/files.js';
import { neutraliseLine, neutraliseStrings } from '../results/safe-text.js';
import { checkDistinctPaths, checkOutputFile, writingTo } from './output-path.js';

/**
 * Short, distinct names for the files: the base name without .json, or the whole path where two
 * base names clash (bench/results/h200/lab.json vs bench/results/cpu/lab.json).
 */
export function displayNames(paths: readonly string[]): string[] {
  const bases = paths.map((p) => basename(p).replace(/\.json$/i, ''));
  return bases.map((b, i) =>
    bases.indexOf(b) === bases.lastIndexOf(b) ? b : paths[i].replace(/\.json$/i, ''),
  );
}

/** Adds `attnlab report` to the program. */
export function registerReportCommand(program: Command): void {
  program
    .command('report')
    .description('Turn saved results JSON (one file or several, compared) into tables and an HTML report')
    .argument('<results...>', 'results files written by `attnlab bench` or `attnlab lab --out`')
    .option('-o, --output <file>', 'the HTML report to write', 'report.html')
    .option('--title <text>', 'the report title')
    .option('--no-terminal', 'write only the HTML, print nothing but its path')
    .addHelpText(
      'after',
      `
Rows are grouped into charts by their sweep name; a group whose sizes vary gets line charts of time
and TFLOP/s over the varying size (log2 axis where sizes double), a single-shape group a bar chart.

Example:
  attnlab report bench/results/h200/codelab.json bench/results/cpu/codelab.json -o compare.html`,
    )
    .action((paths: string[], options: { output: string; title?: string; terminal: boolean }) => {
      checkOutputFile('--output', options.output);
      const inputs = paths.map((path) => ({ option: `the results file ${JSON.stringify(path)}`, path }));
      checkDistinctPaths('--output', options.output, inputs);
      // Strings from the files (and their names) reach the terminal: their control characters do not.
      const names = displayNames(paths).map(neutraliseLine);
      const files: NamedResults[] = paths.map((path, i) => ({
        name: names[i],
        results: neutraliseStrings(loadResults(path)),
      }));
      const text = writingTo('--output', options.output, () =>
        writeReport(files, {
          htmlPath: options.output,
          color: colorEnabled(),
          title: options.title,
        }),
      );
      if (options.terminal) process.stdout.write(`${text}\n`);
      process.stdout.write(`report: ${neutraliseLine(options.output)}\n`);
    });
}
