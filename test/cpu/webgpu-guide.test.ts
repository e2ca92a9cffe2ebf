/**
 * docs/guide/webgpu.md's complete Node program runs as written ('attnlab' resolved to src/index.ts)
 * on this machine's WebGPU adapter, and prints what the guide says it prints. Skips, saying why,
 * where no WebGPU device opens.
 */
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import { fileURLToPath } from 'node:url';
import { webgpuSkipReason } from '../support/webgpu.js';

const root = fileURLToPath(new URL('../../', import.meta.url));
const skip = await webgpuSkipReason();

describe('docs/guide/webgpu.md', { skip: skip ?? false }, () => {
  it('runs the complete Node example', { timeout: 120_000 }, () => {
    const guide = readFileSync(join(root, 'docs/guide/webgpu.md'), 'utf8');
    const block = [...guide.matchAll(/```ts\n([\s\S]*?)```/g)]
      .map((m) => m[1])
      .find((code) => /from 'attnlab';/.test(code));
    assert.ok(block, 'a ts block importing from attnlab');
    const dir = mkdtempSync(join(tmpdir(), 'attnlab-webgpu-guide-'));
    try {
      const file = join(dir, 'example.mts'); // ESM outside the package: top-level await
      writeFileSync(file, block.replace("from 'attnlab';", `from '${join(root, 'src/index.ts')}';`));
      const run = spawnSync(process.execPath, ['--import', 'tsx', file], {
        cwd: root,
        encoding: 'utf8',
        env: process.env,
      });
      assert.equal(run.status, 0, run.stderr);
      assert.match(
        run.stdout,
        /^webgpu webgpu-flash-(plain|subgroups)-float16-h64-hv64-\S*-causal-lse(-v4)?$/m,
      );
      const worst = Number(/max \|webgpu − reference\| = (\S+)/.exec(run.stdout)?.[1]);
      assert.ok(worst < 4e-3, run.stdout);
      assert.match(run.stdout, /WebGPU bytes still held: 0$/m);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
