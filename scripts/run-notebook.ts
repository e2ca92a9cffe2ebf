/**
 * Executes a codelab notebook without Jupyter and writes the executed copy (nbformat 4, outputs
 * included). `attnlab` and `attnlab/notebook` load from this checkout's sources through tsx, so no
 * build is needed: run from the repository root as
 *
 *   node --import tsx scripts/run-notebook.ts notebooks/attention-codelab.ipynb OUT.ipynb
 *
 * Prints one line per code cell (index, output kinds, seconds) and exits 1 when a cell failed
 * (the executed copy is still written, with the error as that cell's output). The copy is rewritten
 * after every cell, so a run stopped by a time limit keeps the cells it finished.
 */
import { readFileSync, writeFileSync } from 'node:fs';
import { pathToFileURL } from 'node:url';
import { executeNotebook, type Notebook } from '../src/notebook/execute.js';

const [input, output] = process.argv.slice(2);
if (!input || !output) {
  process.stderr.write('usage: node --import tsx scripts/run-notebook.ts IN.ipynb OUT.ipynb\n');
  process.exit(2);
}
const root = new URL('../', import.meta.url);
const notebook = JSON.parse(readFileSync(input, 'utf8')) as Notebook;
const { notebook: executed, failedCell } = await executeNotebook(notebook, {
  modules: {
    attnlab: new URL('src/index.ts', root).href,
    'attnlab/notebook': new URL('src/notebook/index.ts', root).href,
  },
  onCell: (index, outputs, ms, sofar) => {
    writeFileSync(output, `${JSON.stringify(sofar, null, 1)}\n`);
    const kinds = outputs.map((o) =>
      o.output_type === 'display_data' ? Object.keys(o.data)[0] : o.output_type,
    );
    process.stdout.write(`cell ${index}: ${(ms / 1000).toFixed(1)} s, ${kinds.join(' ') || 'no output'}\n`);
    for (const o of outputs) if (o.output_type === 'error') process.stdout.write(o.traceback.join(''));
  },
});
writeFileSync(output, `${JSON.stringify(executed, null, 1)}\n`);
process.stdout.write(
  `${failedCell === null ? 'every cell ran' : `cell ${failedCell} failed`}: ${pathToFileURL(output).pathname}\n`,
);
process.exit(failedCell === null ? 0 : 1);
