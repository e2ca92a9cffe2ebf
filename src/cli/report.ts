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
import { checkDistinctPaths, checkOutputFile, firstRepeated, writingTo } from './output-path.js';

/**
 * Short, distinct names for the files: the base name without .json, or the whole path where two
 * base names clash (results/h200/lab.json vs results/cpu/lab.json), with its .json where
 * even that clashes (`a` and `a.json`: one name merged both files' rows into one series per chart).
 * The paths themselves are distinct (the command refuses a file named twice).
 */
export function displayNames(paths: readonly string[]): string[] {
  // Counted once per name (indexOf/lastIndexOf per name was quadratic in the number of files).
  const distinct = (names: string[], fallback: (i: number) => string) => {
    const counts = new Map<string, number>();
    for (const n of names) counts.set(n, (counts.get(n) ?? 0) + 1);
    return names.map((n, i) => (counts.get(n) === 1 ? n : fallback(i)));
  };
  const withoutJson = (p: string) => p.replace(/\.json$/i, '');
  const names = distinct(
    distinct(
      paths.map((p) => withoutJson(basename(p))),
      (i) => withoutJson(paths[i]),
    ),
    (i) => paths[i],
  );
  // A fallback can meet another file's short name (`a.json` beside the base of `d/a.json.json`).
  return new Set(names).size === names.length ? names : [...paths];
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
  attnlab report results/h200/codelab.json results/cpu/codelab.json -o compare.html`,
    )
    .action((paths: string[], options: { output: string; title?: string; terminal: boolean }) => {
      checkOutputFile('--output', options.output);
      const inputs = paths.map((path) => ({ option: `the results file ${JSON.stringify(path)}`, path }));
      checkDistinctPaths('--output', options.output, inputs);
      // One file twice would be compared with itself, its rows drawn twice under one name. One pass over
      // the paths (a map of each one's file), not every pair: 1,500 files took 4.6× as long as 500.
      const twice = firstRepeated(inputs);
      if (twice) checkDistinctPaths('<results>', twice.path, [twice.first]);
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
          // The title is the user's text, but it lands in the HTML and the terminal as the files' strings do.
          title: options.title === undefined ? undefined : neutraliseLine(options.title),
          terminal: options.terminal,
        }),
      );
      if (options.terminal) process.stdout.write(`${text}\n`);
      process.stdout.write(`report: ${neutraliseLine(options.output)}\n`);
    });
}
