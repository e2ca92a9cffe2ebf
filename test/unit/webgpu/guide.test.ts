/**
 * docs/guide/webgpu.md's Node programs run as written ('attnlab' resolved to src/index.ts) on this
 * machine's WebGPU adapter and print what the guide says they print. Skips, saying why, where no
 * WebGPU device opens.
 */
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import { fileURLToPath } from 'node:url';
import { webgpuSkipReason } from '../../support/webgpu.js';

const root = fileURLToPath(new URL('../../../', import.meta.url));
const skip = await webgpuSkipReason();

/** Runs a guide block as an ES module file (.mts: ESM outside the package, for its top-level await). */
function runExample(block: string) {
  const dir = mkdtempSync(join(tmpdir(), 'attnlab-webgpu-guide-'));
  try {
    const file = join(dir, 'example.mts');
    writeFileSync(file, block.replace("from 'attnlab';", `from '${join(root, 'src/index.ts')}';`));
    return spawnSync(process.execPath, ['--import', 'tsx', file], {
      cwd: root,
      encoding: 'utf8',
      env: process.env,
    });
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

describe('docs/guide/webgpu.md', { skip: skip ?? false }, () => {
  const guide = readFileSync(join(root, 'docs/guide/webgpu.md'), 'utf8');
  const blocks = [...guide.matchAll(/```ts\n([\s\S]*?)```/g)]
    .map((m) => m[1])
    .filter((code) => /from 'attnlab';/.test(code));

  it('runs the complete Node example', { timeout: 120_000 }, () => {
    assert.equal(blocks.length, 3, 'the complete program, the backward and the KVCache loop');
    const run = runExample(blocks[0]);
    assert.equal(run.status, 0, run.stderr);
    assert.match(
      run.stdout,
      /^webgpu webgpu-flash-(tiled-subgroups|tiled|plain|subgroups)-float16-h64-hv64-\S*-causal-lse(-v4)?$/m,
    );
    const worst = Number(/max \|webgpu − reference\| = (\S+)/.exec(run.stdout)?.[1]);
    assert.ok(worst < 4e-3, run.stdout);
    assert.match(run.stdout, /WebGPU bytes still held: 0$/m);
  });

  it('runs the backward', { timeout: 120_000 }, () => {
    const run = runExample(blocks[1]);
    assert.equal(run.status, 0, run.stderr);
    assert.match(run.stdout, /^webgpu-backward-rows-float32-h32-hv32$/m);
    assert.match(run.stdout, /^1×96×2×32 /m);
  });

  it('runs the KVCache decode loop', { timeout: 120_000 }, () => {
    const run = runExample(blocks[2]);
    assert.equal(run.status, 0, run.stderr);
    assert.equal(run.stdout.trim().split('\n').length, 4, run.stdout);
  });
});
