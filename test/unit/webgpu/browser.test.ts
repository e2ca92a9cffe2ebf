/**
 * The browser entry in a browser: web/webgpu's page, bundled from src/webgpu.ts for the browser
 * platform (a Node built-in or koffi reaching it fails the bundle), runs the correctness suite's
 * first cases and a timing in headless Chromium on its SwiftShader WebGPU adapter. Skips, saying
 * why, where Chromium is not installed.
 */
import assert from 'node:assert/strict';
import { existsSync } from 'node:fs';
import type { Server } from 'node:http';
import { after, before, describe, it } from 'node:test';
import { type Browser, chromium } from 'playwright-core';
import { bundlePage, externalImports, servePage } from '../../../web/webgpu/serve.js';

const CHROMIUM = process.env.ATTNLAB_CHROMIUM ?? '/usr/bin/chromium';
/** Hand-picked cases the page runs here: SwiftShader on two shared cores takes ~1 s a case. */
const CASES = 8;

interface PageOutcome {
  adapter: string;
  rows: { case: string; precision: string; status: string; detail: string }[];
  timing: { shape: string; ms: number; gflops: number; variant: string } | null;
  error: string | null;
}

describe('attnlab/webgpu in headless Chromium', {
  skip: existsSync(CHROMIUM) ? false : `${CHROMIUM} is not installed (apt-get install chromium)`,
}, () => {
  let browser: Browser;
  let server: Server;
  let url: string;
  before(async () => {
    ({ url, server } = await servePage());
    browser = await chromium.launch({
      executablePath: CHROMIUM,
      args: [
        '--headless',
        '--no-sandbox',
        '--enable-unsafe-webgpu',
        '--use-webgpu-adapter=swiftshader',
        '--no-first-run',
      ],
    });
  });
  after(async () => {
    await browser?.close();
    server?.close();
  });

  it('bundles for the browser without koffi or a Node built-in', async () => {
    const script = await bundlePage();
    assert.doesNotMatch(script, /koffi|from ["']node:/);
    // Unused imports are shaken out of the bundle, not out of the modules a browser would load.
    assert.deepEqual(await externalImports(), []);
    assert.match(script, /webgpu-flash-/);
  });

  it('runs the suite and a timing on the page', { timeout: 240_000 }, async () => {
    const page = await browser.newPage();
    const errors: string[] = [];
    page.on('pageerror', (error) => errors.push(error.message));
    await page.goto(`${url}?cases=${CASES}&precisions=float32,float16&timing=1,128,2,32`);
    await page.waitForFunction(() => 'attnlabPage' in window, null, { timeout: 230_000 });
    const outcome = (await page.evaluate(
      () => (window as unknown as { attnlabPage: unknown }).attnlabPage,
    )) as PageOutcome;
    assert.deepEqual(errors, []);
    assert.equal(outcome.error, null);
    assert.match(outcome.adapter, /\S/);
    assert.equal(outcome.rows.length, 2 * CASES);
    for (const row of outcome.rows) assert.notEqual(row.status, 'fail', row.detail);
    assert.ok(outcome.rows.filter((r) => r.status === 'pass').length >= CASES, JSON.stringify(outcome.rows));
    assert.ok(outcome.timing && outcome.timing.ms > 0 && /^webgpu-flash-/.test(outcome.timing.variant));
    await page.close();
  });
});
