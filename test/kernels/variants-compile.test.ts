/**
 * The modifier generator against nvcc, without a GPU: the generated functions of modifier sets that
 * between them use every operator, function and type rule of the expression language (and the ready-made
 * modifiers, learned captures included), put before src/kernels/variants/modifier_values.cu, compile for
 * sm_90a and sm_80 with no error and no warning. A generator that emits an empty adjoint or a stray
 * cast fails here rather than on the GPU. Skips without nvcc.
 */

import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, describe, it } from 'node:test';
import { kernelsDir } from '../../src/backends/cuda/runtime/compile.js';
import { reloadConfig } from '../../src/config.js';
import { Tensor } from '../../src/tensor/tensor.js';
import { compileModifiers } from '../../src/variants/compile.js';
import {
  alibi,
  and,
  causal,
  documentMask,
  not,
  or,
  prefixLm,
  relativeBias,
  sinks,
  slidingWindow,
  softcap,
} from '../../src/variants/library.js';
import { type MaskMod, maskMod, type ScoreMod, scoreMod } from '../../src/variants/modifiers.js';
import { modifierPrelude } from '../../src/variants/prelude.js';

const docIds = Tensor.zeros([2, 64], 'int32');
const weights = Tensor.zeros([4, 64], 'float32');
const SETS: [string, ScoreMod | undefined, MaskMod | undefined][] = [
  [
    'every operator and function',
    scoreMod(
      'q % 3 == 0 ? exp(score / 4.0) * sqrt(abs(score) + 1.0) : max(min(score, 2.0), -2.0) + log(float(kv + 1)) - floor(score) + ceil(score / 2.0) + float(int(score * 4.0)) + float((q - kv) / 7) - inf * 0.0 + tanh(-score)',
    ),
    maskMod('!(q < kv) || (kv / 5) % 2 == 1 && h != 2 && abs(q - kv) >= min(q, 3) && max(b, h) > -1 == true'),
  ],
  [
    'learned float captures read twice, integer captures in indices',
    scoreMod(
      'score * w[h, kv] + w[h, docIds[b, q]] / (1.0 + w[h, q])',
      { w: weights, docIds },
      { learn: ['w'] },
    ),
    maskMod('docIds[b, q] != docIds[b, kv] ? false : kv <= q', { docIds }),
  ],
  ['alibi, documents and causal', alibi(4), and(documentMask(docIds), causal())],
  ['softcap, prefixLm', softcap(30), prefixLm(Tensor.zeros([2], 'int32'))],
  [
    'relativeBias, window or sinks, not',
    relativeBias(Tensor.zeros([4, 17], 'float32')),
    or(slidingWindow(8, 0), not(sinks(2))),
  ],
  ['a score only', scoreMod('score'), undefined],
  ['a mask only', undefined, maskMod('kv <= q')],
];

describe('generated modifier functions compile with nvcc', () => {
  const nvcc = spawnSync('nvcc', ['--version']).status === 0;
  const scratch = mkdtempSync(join(tmpdir(), 'attnlab-variants-'));
  after(() => rmSync(scratch, { recursive: true, force: true }));
  const kernel = readFileSync(join(kernelsDir(), 'variants/modifier_values.cu'), 'utf8');
  // Each set as written, and with ATTNLAB_FOLD_SCORE_FACTORS=1 (softcap's folded function and factors).
  const runs = SETS.flatMap((set, index) => [
    [set, index, false],
    [set, SETS.length + index, true],
  ]) as Array<[(typeof SETS)[number], number, boolean]>;
  runs.forEach(([[name, score, mask], index, fold]) => {
    it(`${name}${fold ? ' (factors folded)' : ''}`, { skip: nvcc ? false : 'nvcc not on PATH' }, () => {
      const saved = process.env.ATTNLAB_FOLD_SCORE_FACTORS;
      process.env.ATTNLAB_FOLD_SCORE_FACTORS = fold ? '1' : '0';
      reloadConfig();
      let compiled: ReturnType<typeof compileModifiers>;
      try {
        compiled = compileModifiers(score, mask, { B: 2, N: 4, T: 64, S: 64 }, 'cpu');
      } finally {
        if (saved === undefined) delete process.env.ATTNLAB_FOLD_SCORE_FACTORS;
        else process.env.ATTNLAB_FOLD_SCORE_FACTORS = saved;
        reloadConfig();
      }
      const prelude = modifierPrelude(compiled, undefined);
      assert.ok(prelude);
      const file = join(scratch, `set${index}.cu`);
      writeFileSync(file, `${prelude.source}${kernel}`);
      for (const arch of ['sm_90a', 'sm_80']) {
        const result = spawnSync(
          'nvcc',
          ['-cubin', `-arch=${arch}`, '-std=c++17', '-o', join(scratch, `set${index}.${arch}.cubin`), file],
          {
            encoding: 'utf8',
          },
        );
        const log = `${result.stdout}${result.stderr}`;
        assert.equal(result.status, 0, `${name} ${arch}:\n${log}\n${prelude.source}`);
        assert.doesNotMatch(log, /warning|error/i, `${name} ${arch}:\n${log}`);
      }
    });
  });
});
