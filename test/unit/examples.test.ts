/**
 * examples/ are whole programs, so they cannot rot: each one runs here on the CPU (ATTNLAB_DISABLE_CUDA=1,
 * as on a machine without a GPU) and must exit 0 having printed its result; each checks its own numbers
 * (against the float64 reference, or a falling loss) and throws when they are wrong. tsc checks them
 * against the public API's types (checkJs, strict), so a renamed export, option or result field fails
 * here too. README's ```js blocks are example files, character for character.
 */
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, describe, it } from 'node:test';
import { exampleFiles, examplesDir, root, runExample } from '../examples/run-examples.js';

const EXPECTED = [
  'commonjs.cjs',
  'context-parallel.mjs',
  'decode-loop.mjs',
  'gqa-causal.mjs',
  'quickstart.mjs',
  'te-fp8.mjs',
  'training-loop.mjs',
  'variants-documents.mjs',
];

describe('examples', { concurrency: 2 }, () => {
  it('examples/ holds the documented programs', () => {
    assert.deepEqual(
      EXPECTED.filter((name) => !exampleFiles().includes(name)),
      [],
    );
  });

  for (const name of exampleFiles()) {
    it(`${name} runs on the CPU`, async () => {
      const run = await runExample(name, { ATTNLAB_DISABLE_CUDA: '1', NO_COLOR: '1' }, 120_000);
      assert.equal(run.code, 0, `${name} exited ${run.code}\n${run.stdout}\n${run.stderr}`);
      assert.match(run.stdout, /on cpu/, `${name} did not say it ran on the CPU:\n${run.stdout}`);
    });
  }

  it('type-check against src/index.ts (tsc, checkJs, strict)', () => {
    const work = mkdtempSync(join(tmpdir(), 'attnlab-examples-'));
    after(() => rmSync(work, { recursive: true, force: true }));
    const compilerOptions = {
      target: 'ES2022',
      module: 'NodeNext',
      moduleResolution: 'NodeNext',
      customConditions: ['attnlab-source'],
      strict: true,
      allowJs: true,
      checkJs: true,
      noEmit: true,
      skipLibCheck: true,
      allowImportingTsExtensions: true,
      types: ['node'],
      typeRoots: [join(root, 'node_modules/@types')],
    };
    const files = exampleFiles().map((name) => join(examplesDir, name));
    writeFileSync(join(work, 'tsconfig.json'), JSON.stringify({ compilerOptions, files }));
    // TypeScript's own tsc by path: tslab's TypeScript 5.0 also installs a `tsc` in node_modules/.bin.
    const tsc = spawnSync(
      process.execPath,
      [join(root, 'node_modules/typescript/bin/tsc'), '-p', join(work, 'tsconfig.json')],
      { encoding: 'utf8' },
    );
    assert.equal(tsc.status, 0, `${tsc.stdout}${tsc.stderr}`);
  });

  it("README's code blocks are example files, and the quick start is one of them", () => {
    const readme = readFileSync(join(root, 'README.md'), 'utf8');
    const blocks = [...readme.matchAll(/```js\n([\s\S]*?)```/g)].map(([, code]) => code);
    assert.ok(blocks.length >= 1, 'README has no ```js block');
    const sources = new Map(
      exampleFiles().map((name) => [readFileSync(join(examplesDir, name), 'utf8'), name]),
    );
    const shown = blocks.map((code, i) => {
      const name = sources.get(code);
      assert.ok(name, `README's js block ${i + 1} is not the text of any file in examples/:\n${code}`);
      return name;
    });
    assert.ok(shown.includes('quickstart.mjs'), `README shows ${shown.join(', ')}, not quickstart.mjs`);
    assert.equal(
      /```(ts|typescript|javascript)\n/.test(readme),
      false,
      'README code must be ```js example files',
    );
  });
});
