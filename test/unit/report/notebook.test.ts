/**
 * The codelab notebook and `attnlab/notebook`: the shipped notebook is a clean source; the display
 * display functions draw tables and PNG charts with the report's renderers; recorded GPU runs load from results
 * files; the notebook runs cell by cell on the CPU through the Node executor and, where Jupyter and
 * the tslab kernel are installed (.ci/run installs them), through `jupyter nbconvert --execute`, and
 * both runs leave every cell without an error and with the same kinds of output.
 */
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import { fileURLToPath } from 'node:url';
import { makeResults } from '../../../src/bench/results.js';
import { runSweeps } from '../../../src/bench/run-bench.js';
import { reloadConfig } from '../../../src/config.js';
import { cellSource, cellToScript, executeNotebook, type Notebook } from '../../../src/notebook/execute.js';
import { codelabNotebookPath } from '../../../src/notebook/files.js';
import { chartPng, chartSpecs, htmlTable, pngChartsUnavailable, show } from '../../../src/notebook/index.js';
import { recordedGpuRuns } from '../../../src/report/recorded.js';
import { saveResults } from '../../../src/results/files.js';

process.env.ATTNLAB_DISABLE_CUDA = '1';
reloadConfig();
const root = fileURLToPath(new URL('../../..', import.meta.url));
const PNG_SIGNATURE = [0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a];
const notebook = JSON.parse(readFileSync(codelabNotebookPath(), 'utf8')) as Notebook;
const modules = {
  attnlab: new URL('src/index.ts', `file://${root}/`).href,
  'attnlab/notebook': new URL('src/notebook/index.ts', `file://${root}/`).href,
};

/** Per code cell: the kinds of its outputs (mime type or output type), in order, duplicates merged. */
function outputKinds(nb: Notebook): string[][] {
  return nb.cells
    .filter((c) => c.cell_type === 'code')
    .map((c) => [
      ...new Set(
        (c.outputs ?? []).map((o) =>
          o.output_type === 'display_data' ? Object.keys(o.data).join('+') : o.output_type,
        ),
      ),
    ]);
}

function checkExecuted(nb: Notebook, how: string): void {
  const code = nb.cells.filter((c) => c.cell_type === 'code');
  for (const [i, cell] of code.entries()) {
    // tslab reports a cell's TypeScript errors on stderr and runs nothing of it; the executor's stderr is
    // the cell's own console.warn/error (a library warning), kept but not a failure.
    const errors = (cell.outputs ?? []).filter(
      (o) =>
        o.output_type === 'error' ||
        (how === 'nbconvert' && o.output_type === 'stream' && o.name === 'stderr'),
    );
    assert.deepEqual(errors, [], `${how}: code cell ${i} has an error output`);
    // tslab reports no execution count (nbconvert leaves it null); the executor numbers the cells it ran.
    if (how === 'executor')
      assert.ok(typeof cell.execution_count === 'number', `${how}: code cell ${i} did not run`);
  }
  const html = code
    .flatMap((c) => c.outputs ?? [])
    .filter((o) => o.output_type === 'display_data' && 'text/html' in o.data);
  const png = code
    .flatMap((c) => c.outputs ?? [])
    .filter((o) => o.output_type === 'display_data' && 'image/png' in o.data);
  const tables = html.filter(
    (o) => o.output_type === 'display_data' && [o.data['text/html']].flat().join('').includes('<table'),
  );
  assert.ok(tables.length >= 10, `${how}: ${tables.length} tables, expected one per section at least`);
  // A NaN in a table is a broken computation (a from-scratch check that read past its K heads showed one).
  const nan = tables.filter(
    (o) => o.output_type === 'display_data' && /<td[^>]*>NaN</.test([o.data['text/html']].flat().join('')),
  );
  assert.deepEqual(nan, [], `${how}: a table shows NaN`);
  assert.ok(png.length >= 3, `${how}: ${png.length} PNG charts, expected the T, B and decode sweeps' charts`);
  for (const o of png) {
    const bytes = Buffer.from(
      [o.output_type === 'display_data' ? o.data['image/png'] : ''].flat().join(''),
      'base64',
    );
    assert.deepEqual([...bytes.subarray(0, 8)], PNG_SIGNATURE, `${how}: a chart is not a PNG`);
    assert.ok(
      bytes.length > 10_000,
      `${how}: a ${bytes.length}-byte chart is too small to hold a drawn chart`,
    );
  }
}

describe('the shipped notebook', () => {
  it('is a clean TypeScript notebook: tslab kernel, no outputs, a text cell before each section', () => {
    assert.equal(notebook.nbformat, 4);
    assert.equal((notebook.metadata.kernelspec as { name: string }).name, 'tslab');
    for (const cell of notebook.cells) {
      if (cell.cell_type !== 'code') continue;
      assert.deepEqual(cell.outputs, [], 'the source notebook keeps no outputs');
      assert.equal(cell.execution_count, null);
    }
    const headings = notebook.cells
      .filter((c) => c.cell_type === 'markdown')
      .map((c) => cellSource(c).split('\n')[0]);
    for (const words of [
      'device',
      'from scratch',
      'fused',
      'cuDNN',
      'Causal',
      'sequence length',
      'batch',
      'GQA',
      'FP8',
      'backward',
      'KVCache',
    ]) {
      assert.ok(
        headings.some((h) => h.includes(words)),
        `no section heading names ${words}: ${headings.join(' | ')}`,
      );
    }
  });

  it('turns a cell into a script the REPL takes: types gone, every import kept and made dynamic', async () => {
    const script = await cellToScript(
      "import * as tslab from 'tslab';\nimport { a, b as c, type T } from 'x';\nconst n: number = 1;",
      { x: 'file:///x.js' },
    );
    assert.match(script, /const tslab = globalThis\.__notebookTslab;/);
    assert.match(script, /const \{ a, b: c \} = await import\("file:\/\/\/x\.js"\);/);
    assert.doesNotMatch(script, /: number|type T/);
  });
});

describe('the executed GPU copy', () => {
  const path = join(root, 'notebooks/attention-codelab.gpu.ipynb');
  it('ran every cell of the same notebook on a CUDA GPU, with tables and charts', {
    skip: existsSync(path) ? false : 'notebooks/attention-codelab.gpu.ipynb is not in this checkout',
  }, () => {
    const gpu = JSON.parse(readFileSync(path, 'utf8')) as Notebook;
    checkExecuted(gpu, 'executor');
    const sources = (nb: Notebook) => nb.cells.map(cellSource);
    assert.deepEqual(
      sources(gpu),
      sources(notebook),
      'the executed copy is of another version of the notebook',
    );
    const device = [
      gpu.cells.find((c) => c.cell_type === 'code' && cellSource(c).includes('notebookDevice()'))?.outputs,
    ]
      .flat()
      .map((o) => JSON.stringify(o))
      .join('');
    assert.match(device, /runs on<\/td><td>cuda/);
  });
});

describe('attnlab/notebook display functions', () => {
  it('escapes what a table shows', () => {
    const html = htmlTable('<b>t</b>', ['h'], [['<script>x</script>']], 'a & b');
    assert.doesNotMatch(html, /<script>|<b>t/);
    assert.match(html, /&lt;script&gt;/);
  });

  it('draws a sweep as a PNG and shows rows with their charts and the CPU note', {
    skip: pngChartsUnavailable() ?? false,
  }, async () => {
    const common = {
      heads: [2],
      headDim: [16],
      dtype: ['float32' as const],
      causal: [false],
      impl: ['reference' as const, 'flash' as const],
    };
    const { rows } = await runSweeps([{ name: 'seq', spec: { ...common, batch: [1], seq: [16, 32] } }], {
      measure: { budgetMs: 5, warmup: 1, minRepeats: 2 },
    });
    const [spec] = chartSpecs(rows);
    assert.match(spec.title, /^Sequence length sweep/);
    const png = await chartPng(spec);
    assert.deepEqual([...png.subarray(0, 8)], PNG_SIGNATURE);
    const shown: string[] = [];
    await show({ html: (h) => shown.push(h), png: () => shown.push('PNG') }, rows, { recorded: false });
    assert.match(shown[0], /<table/);
    assert.ok(shown.includes('PNG'));
    assert.ok(shown.some((h) => h.includes('What this shows')));
    assert.ok(shown.some((h) => h.includes('Why fused is not faster here')));
  });
});

describe('recorded GPU runs', () => {
  it('loads a lab run made on a GPU and leaves out other files with the reason', async () => {
    const folder = mkdtempSync(join(tmpdir(), 'attnlab-recorded-'));
    const cpu = makeResults('lab', { rows: [], tables: [], notes: [] });
    saveResults(join(folder, 'cpu.json'), cpu);
    // The schema of a GPU run, made from this CPU run's file: the loader's test, never shipped data.
    const gpu = {
      ...cpu,
      createdAt: '2026-12-06T05:00:00.000Z',
      machine: {
        ...cpu.machine,
        device: 'cuda' as const,
        gpu: {
          name: 'Test GPU',
          computeCapability: '9.0',
          memoryBytes: 2 ** 30,
          l2Bytes: null,
          driver: null,
        },
      },
    };
    writeFileSync(join(folder, 'gpu.json'), JSON.stringify(gpu));
    writeFileSync(join(folder, 'broken.json'), '{');
    const { runs, problems } = recordedGpuRuns(folder);
    assert.deepEqual(
      runs.map((r) => r.label),
      ['Test GPU, 2026-12-06'],
    );
    assert.equal(problems.length, 2, problems.join('\n'));
    assert.ok(problems.some((p) => p.startsWith('cpu.json: not a lab run on a GPU')));
  });
});

describe('executing the notebook on the CPU', () => {
  let executed: Notebook | null = null;

  it('runs every cell through the Node executor, with tables and PNG charts', {
    skip: pngChartsUnavailable() ?? false,
  }, async () => {
    const { notebook: out, failedCell } = await executeNotebook(notebook, { modules });
    assert.equal(failedCell, null, JSON.stringify(out.cells[failedCell ?? 0].outputs));
    checkExecuted(out, 'executor');
    executed = out;
  });

  const python = '/usr/bin/python3';
  const nbconvert = spawnSync(python, ['-m', 'nbconvert', '--version'], { encoding: 'utf8' });
  const kernels = spawnSync(python, ['-m', 'jupyter_client.kernelspecapp', 'list'], { encoding: 'utf8' });
  const linked =
    existsSync(join(root, 'node_modules/attnlab/package.json')) &&
    existsSync(join(root, 'dist/src/notebook/index.js'));
  const skip =
    nbconvert.status !== 0
      ? 'Jupyter is not installed (apt-get install python3-nbconvert python3-ipykernel jupyter-client python3-nbclient)'
      : !/\btslab\b/.test(kernels.stdout ?? '')
        ? 'the tslab kernel is not registered (npx tslab install --python=/usr/bin/python3)'
        : !linked
          ? "the notebook imports 'attnlab' from node_modules/attnlab and dist/ (npm run build; ln -sfn .. node_modules/attnlab)"
          : false;

  it('runs every cell under jupyter nbconvert with the tslab kernel, with the same kinds of output', {
    skip,
  }, () => {
    const dir = mkdtempSync(join(tmpdir(), 'attnlab-nbconvert-'));
    mkdirSync(dir, { recursive: true });
    const out = join(dir, 'executed.ipynb');
    const result = spawnSync(
      python,
      [
        '-m',
        'nbconvert',
        '--to',
        'notebook',
        '--execute',
        '--ExecutePreprocessor.timeout=300',
        codelabNotebookPath(),
        '--output',
        out,
      ],
      {
        encoding: 'utf8',
        cwd: join(root, 'notebooks'),
        env: {
          ...process.env,
          PATH: `${join(root, 'node_modules/.bin')}:${process.env.PATH}`,
          ATTNLAB_DISABLE_CUDA: '1',
        },
        timeout: 400_000,
      },
    );
    assert.equal(result.status, 0, `nbconvert failed:\n${(result.stderr ?? '').slice(-3000)}`);
    const nb = JSON.parse(readFileSync(out, 'utf8')) as Notebook;
    checkExecuted(nb, 'nbconvert');
    if (executed)
      assert.deepEqual(
        outputKinds(nb),
        outputKinds(executed),
        'the executor and nbconvert show different kinds of output',
      );
  });
});
