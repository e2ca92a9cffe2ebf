/**
 * scripts/forward-figure.ts draws README's figure from a results file: the shape measured over the most
 * head dims, one bar per series and head dim in a non-causal and a causal panel, attnlab's series
 * first, with the GPU, date and commit under it. Checked on a small results file written here.
 */
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, describe, it } from 'node:test';
import { fileURLToPath } from 'node:url';

const root = fileURLToPath(new URL('../../../', import.meta.url));

function row(source: 'attnlab' | 'torch', impl: string, H: number, causal: boolean, tflops: number, B = 4) {
  const [T, N] = [8192, 16];
  const flops = (4 * B * N * T * T * H) / (causal ? 2 : 1);
  const median = flops / (tflops * 1e9);
  const ms = { median, p10: median, p90: median, min: median, max: median, mean: median, count: 3 };
  return {
    sweep: 'headline',
    source,
    impl,
    label: `${source} ${impl} bf16${causal ? ' causal' : ''}`,
    B,
    T,
    S: T,
    N,
    K: N,
    H,
    dtype: 'bfloat16',
    causal,
    flops,
    status: 'ok',
    timing: { method: 'cuda-events', ms, firstCallMs: median, warmup: 1, inputCopies: 1 },
    tflops,
  };
}

describe('forward figure', () => {
  it('draws every series at the shape with the most head dims, both panels, with the GPU and date', () => {
    const work = mkdtempSync(join(tmpdir(), 'attnlab-figure-'));
    after(() => rmSync(work, { recursive: true, force: true }));
    const rows = [
      row('torch', 'cudnn', 64, false, 400),
      row('attnlab', 'flash', 64, false, 491.9),
      row('attnlab', 'flash', 128, false, 625.6),
      row('attnlab', 'flash', 128, true, 550.1),
      row('attnlab', 'cudnn', 128, false, 567.6),
      row('attnlab', 'flash', 128, false, 100, 1), // another shape, one head dim: left out
    ];
    const results = {
      schema: 'attnlab.results',
      schemaVersion: 1,
      kind: 'bench',
      createdAt: '2026-12-01T20:10:24.691Z',
      command: 'attnlab bench --suite forward --peers torch',
      attnlab: { version: '0.1.0', commit: 'abc1234' },
      machine: {
        hostname: 'h',
        platform: 'linux x64',
        cpu: 'x',
        node: 'v20.20.2',
        device: 'cuda',
        libraries: { cudnn: '9.19.0 (/lib/libcudnn.so.9)' },
        gpu: { name: 'NVIDIA H200', computeCapability: '9.0', memoryBytes: 1 },
      },
      ceiling: null,
      peers: [],
      rows,
      tables: [],
      notes: [],
    };
    const input = join(work, 'forward.json');
    const output = join(work, 'forward.svg');
    writeFileSync(input, JSON.stringify(results));
    const run = spawnSync(process.execPath, ['--import', 'tsx', 'scripts/forward-figure.ts', input, output], {
      cwd: root,
      encoding: 'utf8',
    });
    assert.equal(run.status, 0, run.stderr);
    assert.match(
      run.stdout,
      /NVIDIA H200, 2026-12-01, attnlab 0\.1\.0 at abc1234: `attnlab bench --suite forward/,
    );
    const svg = readFileSync(output, 'utf8');
    assert.match(svg, /^<svg /);
    assert.equal(
      (svg.match(/<rect [^>]*><title>/g) ?? []).length,
      5,
      'one bar per timed row of the B=4 shape',
    );
    assert.match(svg, /attnlab flash H=128: 625\.6 TFLOP\/s/);
    assert.match(svg, /PyTorch cuDNN H=64: 400\.0 TFLOP\/s/);
    assert.doesNotMatch(svg, /100\.0 TFLOP\/s/);
    assert.ok(
      svg.indexOf('>attnlab cudnn<') < svg.indexOf('>PyTorch cuDNN<'),
      'attnlab series first in the legend',
    );
    assert.match(svg, />non-causal</);
    assert.match(svg, />causal</);
    assert.match(svg, /NVIDIA H200, 2026-12-01, attnlab 0\.1\.0 \(abc1234\); cudnn 9\.19\.0/);
  });
});
