/**
 * The HTML report in a real browser: Debian's Chromium through playwright-core, offline. Every chart
 * must render with data points, the page must log no error and fetch nothing, and strings from the
 * results must stay text. A screenshot is kept in test-artifacts/ for a person to look at.
 */
import assert from 'node:assert/strict';
import { existsSync, mkdirSync, mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { type Browser, chromium } from 'playwright-core';
import { makeResults } from '../../../src/bench/results.js';
import { runSweeps } from '../../../src/bench/run-bench.js';
import { reloadConfig } from '../../../src/config.js';
import { chartsFor, type NamedResults } from '../../../src/report/charts.js';
import { buildHtmlReport, escapeHtml, jsonForScript } from '../../../src/report/html.js';

process.env.ATTNLAB_DISABLE_CUDA = '1';
reloadConfig();
const CHROMIUM = process.env.ATTNLAB_CHROMIUM ?? '/usr/bin/chromium';
const artifacts = fileURLToPath(new URL('../../../test-artifacts/', import.meta.url));
const HOSTILE = '</script><img src=x onerror="window.__pwned=1">&amp;"\'';

async function measuredFile(name: string, seed: number): Promise<NamedResults> {
  const common = {
    heads: [2],
    headDim: [16],
    dtype: ['float32' as const],
    causal: [false],
    impl: ['reference' as const, 'flash' as const],
  };
  const run = await runSweeps(
    [
      { name: 'default', spec: { ...common, batch: [1], seq: [32] } },
      { name: 'seq', spec: { ...common, batch: [1], seq: [16, 32, 64] } },
      // Decode steps (one query token over 16…64 cached keys): charted in GB/s (src/bench/bandwidth.ts).
      { name: 'decode', spec: { ...common, batch: [1], seq: [1], kvSeq: [16, 32, 64] } },
    ],
    { measure: { budgetMs: 5, warmup: 1, minRepeats: 2, seed } },
  );
  return { name, results: makeResults('bench', run) };
}

describe('escaping', () => {
  it('escapes the five HTML metacharacters and keeps JSON from closing a script element', () => {
    assert.equal(escapeHtml(`<a href="x">'&'</a>`), '&lt;a href=&quot;x&quot;&gt;&#39;&amp;&#39;&lt;/a&gt;');
    const json = jsonForScript({ label: '</script><b>', sep: '\u2028' });
    assert.doesNotMatch(json, /<\/script/i);
    assert.deepEqual(JSON.parse(json), { label: '</script><b>', sep: '\u2028' });
  });
});

describe('HTML report in headless Chromium', {
  skip: existsSync(CHROMIUM) ? false : `${CHROMIUM} is not installed (apt-get install chromium)`,
}, () => {
  let browser: Browser;
  let files: NamedResults[];
  let path: string;

  before(async () => {
    const a = await measuredFile('cpu-a', 1);
    const b = await measuredFile('cpu-b', 2);
    // Strings a results file may carry, from a hostile or just unlucky source, in every kind of place.
    a.results.notes.push(HOSTILE);
    a.results.tables.push({ title: HOSTILE, headers: ['k', HOSTILE], rows: [[HOSTILE, '1']] });
    b.results.rows[0].label = `attnlab ${HOSTILE}`;
    files = [a, b];
    path = join(mkdtempSync(join(tmpdir(), 'attnlab-html-')), 'report.html');
    writeFileSync(path, buildHtmlReport(files));
    browser = await chromium.launch({
      executablePath: CHROMIUM,
      args: [
        '--headless',
        '--no-sandbox',
        '--disable-gpu',
        '--disable-background-networking',
        '--disable-component-update',
        '--no-first-run',
        '--disable-sync',
      ],
    });
  });

  after(async () => {
    await browser?.close();
  });

  it('renders every chart with data points, logs no error, loads nothing and keeps strings as text', async () => {
    const page = await browser.newPage({ viewport: { width: 1200, height: 900 } });
    const problems: string[] = [];
    const requests: string[] = [];
    page.on('console', (m) => {
      if (m.type() === 'error' || m.type() === 'warning') problems.push(`${m.type()}: ${m.text()}`);
    });
    page.on('pageerror', (e) => problems.push(`pageerror: ${e.message}`));
    await page.route('**/*', (route) => {
      const url = route.request().url();
      if (url !== pathToFileURL(path).href) requests.push(url);
      return url.startsWith('file:') ? route.continue() : route.abort();
    });
    await page.goto(pathToFileURL(path).href);
    await page.waitForSelector('body[data-charts-rendered]');

    const expected = chartsFor(files);
    const charts = await page.evaluate(() =>
      [...document.querySelectorAll('canvas')].map((canvas) => {
        // biome-ignore lint/suspicious/noExplicitAny: Chart is the page's global from the inlined UMD bundle.
        const chart = (window as any).Chart.getChart(canvas);
        const pixels = canvas.getContext('2d')!.getImageData(0, 0, canvas.width, canvas.height).data;
        let painted = 0;
        for (let i = 3; i < pixels.length; i += 4) if (pixels[i] > 0) painted++;
        return {
          id: canvas.id,
          type: chart?.config.type,
          xScale: chart?.scales.x?.type,
          points: chart?.data.datasets.map((d: { data: unknown[] }) => d.data.length) ?? [],
          painted,
        };
      }),
    );
    assert.deepEqual(problems, []);
    assert.deepEqual(requests, [], 'the report must not fetch anything');
    assert.equal(charts.length, expected.length);
    assert.equal(await page.getAttribute('body', 'data-charts-rendered'), String(expected.length));
    for (const chart of charts) {
      assert.ok(chart.type, `${chart.id}: no Chart instance`);
      assert.ok(
        chart.points.length > 0 && chart.points.every((n: number) => n > 0),
        `${chart.id}: empty dataset`,
      );
      assert.ok(chart.painted > 1000, `${chart.id}: the canvas is blank`);
    }
    const seq = charts.find((c) => c.id.includes('-seq-ms'));
    assert.equal(seq?.type, 'line');
    assert.equal(seq?.xScale, 'logarithmic', 'sizes that double get a log axis');
    assert.equal(charts.find((c) => c.id.includes('-default-ms'))?.type, 'bar');
    const decode = charts.find((c) => c.id.includes('-decode-bandwidth'));
    assert.equal(decode?.type, 'line', 'decode steps get a GB/s chart');
    assert.ok(!charts.some((c) => c.id.includes('-decode-tflops')), 'and no TFLOP/s one');
    // Two files on one chart: each series carries its file's name.
    assert.ok(
      expected.find((c) => c.id.includes('-seq-ms'))?.series.some((s) => s.label.startsWith('cpu-b: ')),
    );

    assert.equal(await page.evaluate(() => (window as unknown as { __pwned?: number }).__pwned), undefined);
    assert.equal(await page.locator('img').count(), 0);
    assert.ok(
      // biome-ignore lint/performance/useDomNodeTextContent: the visible text is what must show the string (script bodies excluded).
      (await page.locator('body').innerText()).includes('</script><img src=x'),
      'the hostile string shows as text',
    );

    mkdirSync(artifacts, { recursive: true });
    await page.screenshot({ path: join(artifacts, 'report.png'), fullPage: true });
    await page.close();
  });
});
