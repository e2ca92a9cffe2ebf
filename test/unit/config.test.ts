/**
 * The one reader of the environment (src/config.ts): each ATTNLAB_* variable's meaning, the cache
 * layout under ATTNLAB_CACHE_DIR, re-reading, and that docs/guide/configuration.md, config.ts and src/ agree
 * on which variables exist and who reads them.
 */
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { readdirSync, readFileSync, statSync } from 'node:fs';
import { homedir } from 'node:os';
import { join, relative } from 'node:path';
import { describe, it } from 'node:test';
import { fileURLToPath } from 'node:url';
import { config, readConfig, reloadConfig, runSettings } from '../../src/config.js';
import { InvalidArgumentError } from '../../src/errors.js';

const root = fileURLToPath(new URL('../../', import.meta.url));

function sourceFiles(dir: string, endings: readonly string[] = ['.ts']): string[] {
  return readdirSync(dir).flatMap((name) => {
    const path = join(dir, name);
    if (statSync(path).isDirectory()) return sourceFiles(path, endings);
    return endings.some((e) => path.endsWith(e)) ? [path] : [];
  });
}

const variablesIn = (text: string): Set<string> => new Set(text.match(/ATTNLAB_[A-Z0-9_]*[A-Z0-9]/g) ?? []);

describe('config', () => {
  it('defaults: the cache root ~/.cache/attnlab with kernels, cuDNN plans and the ceiling under it', () => {
    const c = readConfig({});
    const cacheRoot = join(homedir(), '.cache', 'attnlab');
    assert.equal(c.cacheRoot, cacheRoot);
    assert.equal(c.kernelCacheDir, join(cacheRoot, 'kernels'));
    assert.equal(c.cudnnPlanCacheDir, join(cacheRoot, 'cudnn-plans'));
    assert.equal(c.ceilingCacheFile, join(cacheRoot, 'matmul-ceiling.json'));
    assert.equal(c.debug, 0);
    assert.equal(c.disableCuda, false);
    assert.equal(c.assertNoCompile, false);
    assert.equal(c.experimental.cudnnGraph, null);
    assert.deepEqual(c.libraries, {
      cuda: null,
      nvrtc: null,
      cublasLt: null,
      cudnn: null,
      nccl: null,
      nvml: null,
    });
  });

  it('ATTNLAB_CACHE_DIR is the root for every disk cache; =0 switches turn one off', () => {
    const c = readConfig({ ATTNLAB_CACHE_DIR: '/tmp/x', ATTNLAB_KERNEL_CACHE: '0' });
    assert.equal(c.cacheRoot, '/tmp/x');
    assert.equal(c.kernelCacheDir, null);
    assert.equal(c.cudnnPlanCacheDir, '/tmp/x/cudnn-plans');
    assert.equal(c.ceilingCacheFile, '/tmp/x/matmul-ceiling.json');
    const plansOff = readConfig({ ATTNLAB_CACHE_DIR: '/tmp/x', ATTNLAB_CUDNN_PLAN_CACHE: '0' });
    assert.equal(plansOff.kernelCacheDir, '/tmp/x/kernels');
    assert.equal(plansOff.cudnnPlanCacheDir, null);
    assert.equal(readConfig({ ATTNLAB_CACHE_DIR: '' }).cacheRoot, join(homedir(), '.cache', 'attnlab'));
  });

  it('parses each switch and value as documented', () => {
    const c = readConfig({
      ATTNLAB_DEBUG: '2',
      ATTNLAB_DISABLE_CUDA: '1',
      ATTNLAB_ASSERT_NO_COMPILE: '1',
      ATTNLAB_KERNELS_DIR: '/k',
      ATTNLAB_FLASH_TILES: '128x64x4s2',
      ATTNLAB_FLASH_KERNEL: 'wgmma',
      ATTNLAB_CUDNN_GRAPH: 'unified',
      ATTNLAB_CUDNN_TRACE: '1',
      ATTNLAB_WEBGPU_EXPERIMENTAL: '1',
      ATTNLAB_COMMIT: 'abc1234',
      ATTNLAB_PYTHON: '/py',
      ATTNLAB_NVRTC: '/lib/nvrtc',
      ATTNLAB_NCCL: '/lib/nccl',
    });
    assert.equal(c.debug, 2);
    assert.equal(c.disableCuda, true);
    assert.equal(c.assertNoCompile, true);
    assert.equal(c.kernelsDir, '/k');
    assert.equal(c.experimental.flashTiles, '128x64x4s2');
    assert.equal(c.experimental.flashKernel, 'wgmma');
    assert.equal(c.experimental.cudnnGraph, 'unified');
    assert.equal(c.cudnnTrace, true);
    assert.equal(c.webgpuExperimental, true);
    assert.equal(readConfig({}).webgpuExperimental, false);
    assert.equal(
      c.experimental.dependentLaunch,
      'auto',
      'the measured rule unless ATTNLAB_DEPENDENT_LAUNCH says',
    );
    assert.equal(readConfig({ ATTNLAB_DEPENDENT_LAUNCH: '0' }).experimental.dependentLaunch, 'off');
    assert.equal(readConfig({ ATTNLAB_DEPENDENT_LAUNCH: '1' }).experimental.dependentLaunch, 'all');
    assert.equal(readConfig({ ATTNLAB_DEPENDENT_LAUNCH: 'combine' }).experimental.dependentLaunch, 'combine');
    assert.equal(readConfig({ ATTNLAB_DEPENDENT_LAUNCH: 'splits' }).experimental.dependentLaunch, 'splits');
    assert.equal(
      readConfig({ ATTNLAB_DEPENDENT_LAUNCH: 'auto' }).experimental.dependentLaunch,
      'auto',
      'the GPU suite sets it',
    );
    assert.equal(c.commit, 'abc1234');
    assert.equal(c.python, '/py');
    assert.equal(c.libraries.nvrtc, '/lib/nvrtc');
    assert.equal(c.libraries.nccl, '/lib/nccl');
    assert.equal(readConfig({ ATTNLAB_DISABLE_CUDA: '0', ATTNLAB_KERNEL_CACHE: '1' }).disableCuda, false);
  });

  it('refuses a value a variable does not take, naming it, what it takes and what came', () => {
    // Each of these once ran the defaults unsaid (and a results file recorded it as set).
    const bad: [string, string, RegExp][] = [
      ['ATTNLAB_DISABLE_CUDA', 'yes', /expected one of 0, 1 \(or unset\), got "yes"/],
      ['ATTNLAB_KERNEL_CACHE', 'false', /expected one of 0, 1/],
      ['ATTNLAB_CUDNN_PLAN_CACHE', 'off', /expected one of 0, 1/],
      ['ATTNLAB_ASSERT_NO_COMPILE', 'true', /expected one of 0, 1/],
      ['ATTNLAB_CUDNN_TRACE', '2', /expected one of 0, 1/],
      ['ATTNLAB_DEBUG', 'abc', /expected an integer ≥ 0 .*, got "abc"/],
      ['ATTNLAB_DEBUG', '-1', /expected an integer ≥ 0/],
      ['ATTNLAB_FLASH_KERNEL', 'hopper', /expected one of wgmma, mma \(or unset\), got "hopper"/],
      ['ATTNLAB_FLASH_BWD_KERNEL', 'bogus', /expected one of wgmma, wgmma-ws, mma/],
      ['ATTNLAB_DECODE_KERNEL', 'bogus', /expected one of heads, rows, tma/],
      ['ATTNLAB_CUDNN_GRAPH', 'fast', /expected one of composite, unified/],
      [
        'ATTNLAB_DEPENDENT_LAUNCH',
        'maybe',
        /expected one of auto, 1, splits, combine, 0 \(or unset\), got "maybe"/,
      ],
    ];
    for (const [name, value, pattern] of bad) {
      assert.throws(
        () => readConfig({ [name]: value }),
        (e: unknown) => e instanceof InvalidArgumentError && e.argument === name && pattern.test(e.message),
        `${name}=${value}`,
      );
      assert.throws(() => runSettings({ [name]: value }), InvalidArgumentError, `${name}=${value} recorded`);
    }
  });

  it('config() reads process.env once; reloadConfig() reads it again', () => {
    const saved = process.env.ATTNLAB_COMMIT;
    try {
      process.env.ATTNLAB_COMMIT = 'first';
      const first = reloadConfig();
      process.env.ATTNLAB_COMMIT = 'second';
      assert.equal(config(), first);
      assert.equal(config().commit, 'first');
      assert.equal(reloadConfig().commit, 'second');
      assert.equal(config().commit, 'second');
    } finally {
      if (saved === undefined) delete process.env.ATTNLAB_COMMIT;
      else process.env.ATTNLAB_COMMIT = saved;
      reloadConfig();
    }
  });

  it('ATTNLAB_DEBUG=1 prints one line per attention call, naming the backend and variant', () => {
    const script =
      "import { dotProductAttention, randomNormal } from './src/index.ts';" +
      'const q = randomNormal([1, 4, 2, 8], { seed: 1 });' +
      'dotProductAttention(q, q, q); dotProductAttention(q, q, q);';
    const run = spawnSync(process.execPath, ['--import', 'tsx', '--input-type=module', '-e', script], {
      cwd: root,
      env: { ...process.env, ATTNLAB_DEBUG: '1', ATTNLAB_DISABLE_CUDA: '1' },
      encoding: 'utf8',
    });
    assert.equal(run.status, 0, run.stderr);
    const lines = run.stderr.split('\n').filter((l) => l.startsWith('[attnlab]'));
    assert.equal(lines.length, 2, run.stderr);
    for (const line of lines)
      assert.match(line, /^\[attnlab\] flash \(cpu\) ran \S+ for B=1 T=4 S=4 N=2 K=2 H=8/);
  });

  it('no module but src/config.ts reads an ATTNLAB_* variable from the environment', () => {
    const readers = sourceFiles(join(root, 'src'))
      .filter((f) => !f.endsWith(join('src', 'config.ts')))
      .filter((f) => /env(\.|\[\s*['"`])ATTNLAB_/.test(readFileSync(f, 'utf8')))
      .map((f) => relative(root, f));
    assert.deepEqual(readers, []);
  });

  it('docs/guide/configuration.md documents exactly the variables config.ts reads, and src/ names no others (CUDA macros aside)', () => {
    const read = variablesIn(readFileSync(join(root, 'src/config.ts'), 'utf8'));
    const guide = readFileSync(join(root, 'docs/guide/configuration.md'), 'utf8');
    assert.deepEqual([...variablesIn(guide)].sort(), [...read].sort());
    const named = new Set(
      sourceFiles(join(root, 'src')).flatMap((f) => [...variablesIn(readFileSync(f, 'utf8'))]),
    );
    // Preprocessor macros of the kernels and of generated kernel source (#define ATTNLAB_SCORE_MOD 1) share
    // the prefix but are no environment variables: a name the sources #define or test with #if is one.
    const macros = new Set(
      sourceFiles(join(root, 'src'), ['.ts', '.cu', '.cuh']).flatMap((f) =>
        [
          ...readFileSync(f, 'utf8').matchAll(
            /#\s*(?:define|ifdef|ifndef|if|elif)\s+(?:!?\s*defined\s*\(?\s*)?(ATTNLAB_[A-Z0-9_]+)/g,
          ),
        ].map((m) => m[1]),
      ),
    );
    assert.deepEqual(
      [...named].filter((v) => !read.has(v) && !macros.has(v)),
      [],
    );
    assert.deepEqual(
      [...macros].filter((m) => read.has(m)),
      [],
      'a macro name that is also a variable',
    );
  });
});
