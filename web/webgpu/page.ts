/**
 * The page of web/webgpu/index.html: runs attnlab's correctness suite on the webgpu backend in
 * the browser, then times one forward, and leaves the outcome in `window.attnlabPage` (the
 * headless-Chromium test reads it). Bundled by web/webgpu/serve.ts from the browser entry.
 */

import { PRECISIONS, suiteCases } from '../../src/check/suite.js';
import {
  attentionFlops,
  type CheckRow,
  describeRow,
  initWebgpu,
  randomNormal,
  runWebgpuCheck,
  webgpuAttention,
  webgpuFinish,
} from '../../src/webgpu.js';

interface PageOutcome {
  adapter: string;
  rows: { case: string; precision: string; status: string; detail: string }[];
  timing: { shape: string; ms: number; gflops: number; variant: string } | null;
  error: string | null;
}

const outcome: PageOutcome = { adapter: '', rows: [], timing: null, error: null };
const params = new URLSearchParams(location.search);
const element = (id: string) => document.getElementById(id) as HTMLElement;

function show(row: CheckRow): void {
  const detail = describeRow(row);
  outcome.rows.push({ case: row.case, precision: row.precision, status: row.status, detail });
  const tr = document.createElement('tr');
  for (const text of [row.case, row.precision, row.status, detail]) {
    const td = document.createElement('td');
    td.textContent = text;
    tr.append(td);
  }
  tr.className = row.status;
  element('rows').append(tr);
}

async function time(B: number, T: number, N: number, H: number): Promise<PageOutcome['timing']> {
  const [q, k, v] = [1, 2, 3].map((seed) =>
    randomNormal([B, T, N, H], { seed, dtype: 'float16' }).to('webgpu'),
  );
  const run = () => webgpuAttention(q, k, v, { isCausal: true });
  const first = run();
  first.output.dispose();
  await webgpuFinish();
  const times: number[] = [];
  for (let i = 0; i < 5; i++) {
    const start = performance.now();
    const { output } = run();
    await webgpuFinish();
    times.push(performance.now() - start);
    output.dispose();
  }
  for (const t of [q, k, v]) t.dispose();
  const ms = times.sort((a, b) => a - b)[2];
  const flops = attentionFlops({ B, T, S: T, N, H, causal: true });
  return {
    shape: `B=${B} T=S=${T} N=${N} H=${H} float16 causal`,
    ms,
    gflops: flops / ms / 1e6,
    variant: first.variant,
  };
}

async function main(): Promise<void> {
  const info = await initWebgpu();
  outcome.adapter = `${[info.vendor, info.architecture, info.description].filter(Boolean).join(' ')}; ${info.features.join(' ')}`;
  element('adapter').textContent = `adapter: ${outcome.adapter}`;
  const count = Number(params.get('cases') ?? Number.POSITIVE_INFINITY);
  const names = (params.get('precisions') ?? 'float32,float16').split(',') as (keyof typeof PRECISIONS)[];
  const rows = await runWebgpuCheck({
    cases: suiteCases('webgpu').slice(0, count),
    precisions: names.map((name) => PRECISIONS[name]),
    onRow: show,
  });
  const passed = rows.filter((r) => r.status === 'pass').length;
  const failed = rows.filter((r) => r.status === 'fail').length;
  element('summary').textContent =
    `${passed} passed, ${failed} failed, ${rows.length - passed - failed} skipped`;
  const shape = params.get('timing') ?? '1,1024,8,64';
  if (shape !== 'none') {
    const [B, T, N, H] = shape.split(',').map(Number);
    outcome.timing = await time(B, T, N, H);
    const t = outcome.timing;
    element('timing').textContent =
      `${t?.shape}: ${t?.ms.toFixed(2)} ms, ${t?.gflops.toFixed(2)} GFLOP/s (${t?.variant})`;
  }
}

main()
  .catch((error: unknown) => {
    outcome.error = error instanceof Error ? `${error.name}: ${error.message}` : String(error);
    element('summary').textContent = outcome.error;
  })
  .finally(() => {
    (window as unknown as { attnlabPage: PageOutcome }).attnlabPage = outcome;
  });
