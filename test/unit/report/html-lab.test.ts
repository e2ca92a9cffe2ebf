/**
 * The lab's HTML report: laid out by the lab's sections (numbered titles, explanations, tables,
 * charts with what they show), a recorded GPU run beside a CPU run, and a page that fits 800 px in
 * Chromium. The "recorded" run here is made from a CPU run's file (the schema of a GPU run, never
 * shipped data).
 */
import assert from 'node:assert/strict';
import { existsSync, mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { before, describe, it } from 'node:test';
import { chromium } from 'playwright-core';
import { makeResults } from '../../../src/bench/results.js';
import { runSweeps } from '../../../src/bench/run-bench.js';
import { reloadConfig } from '../../../src/config.js';
import type { NamedResults } from '../../../src/report/charts.js';
import { buildHtmlReport } from '../../../src/report/html.js';
import { parseResults } from '../../../src/results/validate.js';

process.env.ATTNLAB_DISABLE_CUDA = '1';
reloadConfig();
const CHROMIUM = process.env.ATTNLAB_CHROMIUM ?? '/usr/bin/chromium';

async function labFile(): Promise<NamedResults> {
  const common = { heads: [2], headDim: [16], dtype: ['float32' as const], causal: [false] };
  const { rows } = await runSweeps(
    [
      { name: 'seq', spec: { ...common, batch: [1], seq: [16, 32, 64], impl: ['reference', 'flash'] } },
      { name: 'fwd-bwd T=16', spec: { ...common, batch: [1], seq: [16], impl: ['flash'] } },
    ],
    { measure: { budgetMs: 5, warmup: 1, minRepeats: 2 } },
  );
  const wide = ['a very long cell value that a narrow page must wrap or scroll '.repeat(4), '1.0e-3'];
  const results = makeResults('lab', {
    rows,
    tables: [{ title: 'Wide table', headers: ['what', 'value'], rows: [wide] }],
    notes: ['a note of section 2'],
    sections: [
      { title: '2. GPU check', text: ['Note: a note of section 2'], tables: ['Wide table'], sweeps: [] },
      {
        title: '8b. Sweep the sequence length',
        text: ['Why fused is not faster here: …'],
        tables: [],
        sweeps: ['seq'],
      },
      {
        title: '11. Beyond the codelab: forward and backward',
        text: [],
        tables: [],
        sweeps: ['fwd-bwd T=16'],
      },
    ],
  });
  const parsed = parseResults(JSON.parse(JSON.stringify(results)), 'lab.json');
  // Times 1.00…1.12 µs apart by 2%: a linear axis whose ticks differ in the third digit.
  const tiny = parsed.rows
    .filter((r) => r.sweep === 'seq' && r.timing)
    .map((r, i) => ({
      ...r,
      sweep: 'tiny',
      timing: { ...r.timing!, ms: { ...r.timing!.ms, median: 0.001 + 0.00002 * i } },
    }));
  parsed.rows.push(...tiny);
  parsed.sections?.push({ title: '12. Close values', text: [], tables: [], sweeps: ['tiny'] });
  return { name: 'lab', results: parsed };
}

function recordedFrom(cpu: NamedResults): NamedResults {
  const results = structuredClone(cpu.results);
  results.machine = {
    ...results.machine,
    device: 'cuda',
    gpu: { name: 'NVIDIA Test GPU', computeCapability: '9.0', memoryBytes: 2 ** 34 },
  };
  results.createdAt = '2026-12-06T05:00:00.000Z';
  results.sections = results.sections?.map((s) =>
    s.title.startsWith('8b') ? { ...s, text: ['On the GPU, fused wins.'] } : s,
  );
  return { name: 'recorded', results };
}

describe('the lab report', () => {
  let cpu: NamedResults;
  let html: string;

  before(async () => {
    cpu = await labFile();
    html = buildHtmlReport([cpu], { title: 'attnlab lab', beside: recordedFrom(cpu) });
  });

  it('has one numbered section per lab section, with its explanations, tables and charts', () => {
    assert.match(html, /<h2>2\. GPU check<\/h2><p class="explain">Note: a note of section 2<\/p>/);
    assert.match(html, /<h2>8b\. Sweep the sequence length<\/h2>/);
    assert.match(html, /<h3>Sequence length sweep: median time per call vs query length T/);
    assert.match(html, /<h3>Forward and backward pass at T=16/);
    assert.doesNotMatch(html, /<h3>(seq|fwd-bwd T=16):/);
    assert.match(html, /What this shows:<\/strong> Attention does/);
    // A note kept in its section is not listed again under Notes.
    assert.doesNotMatch(html, /<li>a note of section 2<\/li>/);
  });

  it('shows the recorded GPU run beside: its explanations under the section, its rows in the same charts', () => {
    assert.match(html, /Beside this run: a recorded run of the same lab on NVIDIA Test GPU, 2026-12-06/);
    assert.match(
      html,
      /<div class="recorded"><p class="note"><strong>recorded Test GPU<\/strong><\/p><p class="explain">On the GPU, fused wins\.<\/p>/,
    );
    const specs = JSON.parse(
      /<script type="application\/json" id="attnlab-charts">(.*?)<\/script>/s
        .exec(html)![1]
        .replace(/\\u003c/g, '<'),
    );
    const labels = specs.flatMap((s: { series: { label: string }[] }) => s.series.map((x) => x.label));
    assert.ok(
      labels.some((l: string) => l.startsWith('recorded Test GPU: attnlab flash')),
      labels.join(', '),
    );
    assert.ok(
      labels.some((l: string) => l.startsWith('this run: attnlab flash')),
      labels.join(', '),
    );
    assert.equal(new Set(specs.map((s: { id: string }) => s.id)).size, specs.length, 'chart ids are unique');
  });

  it('without a recorded run, shows the lab alone', () => {
    const alone = buildHtmlReport([cpu], { title: 'attnlab lab' });
    assert.doesNotMatch(alone, /Beside this run|class="recorded"/);
  });

  it('fits an 800 px page in Chromium, every chart drawn', {
    skip: existsSync(CHROMIUM) ? false : `${CHROMIUM} is not installed (apt-get install chromium)`,
  }, async () => {
    const path = join(mkdtempSync(join(tmpdir(), 'attnlab-lab-html-')), 'lab.html');
    writeFileSync(path, html);
    const browser = await chromium.launch({
      executablePath: CHROMIUM,
      args: ['--headless', '--no-sandbox', '--disable-gpu'],
    });
    try {
      const page = await browser.newPage({ viewport: { width: 800, height: 900 } });
      const errors: string[] = [];
      page.on('console', (m) => {
        if (m.type() === 'error') errors.push(m.text());
      });
      await page.goto(`file://${path}`);
      await page.waitForFunction(() => document.body.getAttribute('data-charts-rendered') !== null);
      const rendered = Number(await page.evaluate(() => document.body.getAttribute('data-charts-rendered')));
      const canvases = await page.evaluate(() => document.querySelectorAll('canvas').length);
      assert.equal(rendered, canvases);
      assert.deepEqual(errors, []);
      // Readable axes: no value axis repeats a tick label (a one-digit exponent printed 1.0e-3 six times).
      const repeated = await page.evaluate(() => {
        const found: string[] = [];
        const lib = (
          window as unknown as {
            Chart: {
              getChart(c: HTMLCanvasElement): { scales: Record<string, { ticks: { label: unknown }[] }> };
            };
          }
        ).Chart;
        for (const canvas of document.querySelectorAll('canvas')) {
          const chart = lib.getChart(canvas as HTMLCanvasElement);
          for (const [axis, scale] of Object.entries(chart.scales)) {
            const labels = scale.ticks.map((t) => String(t.label)).filter((l) => l !== '');
            if (new Set(labels).size !== labels.length)
              found.push(`${canvas.id} ${axis}: ${labels.join(' ')}`);
          }
        }
        return found;
      });
      assert.deepEqual(repeated, []);
      const overflow = await page.evaluate(
        () => document.documentElement.scrollWidth - document.documentElement.clientWidth,
      );
      assert.equal(overflow, 0, `the page is ${overflow} px wider than 800 px`);
    } finally {
      await browser.close();
    }
  });
});
