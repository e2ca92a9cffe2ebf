/**
 * The include scan readKernelSources follows (kernel-source.ts, quotedIncludes): the same names as the
 * multiline pattern /^\s*#\s*include\s+"([^"]+)"/ on hand-picked lines and on every kernel source.
 */
import assert from 'node:assert/strict';
import { readdirSync, readFileSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import { kernelsDir, quotedIncludes } from '../../../../../src/backends/cuda/runtime/kernel-source.js';

const byPattern = (text: string) => [...text.matchAll(/^\s*#\s*include\s+"([^"]+)"/gm)].map((m) => m[1]);

describe('quotedIncludes', () => {
  it('takes #include "name" lines, with blanks around the #, and nothing else', () => {
    const cases: Array<[string, string[]]> = [
      ['#include "common/dtypes.cuh"\n', ['common/dtypes.cuh']],
      ['  #  include "b.cuh"\r\n#include "c.cuh"', ['b.cuh', 'c.cuh']],
      ['#\tinclude\t"d.cuh"', ['d.cuh']],
      ['x #include "e.cuh"\n', []],
      ['// #include "f.cuh"\n', []],
      ['#include <cuda_fp16.h>\n', []],
      ['#include"g.cuh"\n', []],
      ['#define include 1\ninclude "h"\n', []],
    ];
    for (const [text, names] of cases) {
      assert.deepEqual(quotedIncludes(text), names, JSON.stringify(text));
      assert.deepEqual(quotedIncludes(text), byPattern(text), `as the pattern: ${JSON.stringify(text)}`);
    }
    // A name ends on its line (the pattern's [^"]+ ran on into the next one).
    assert.deepEqual(quotedIncludes('#include "unclosed\n"'), []);
  });

  it('finds what the pattern finds in every .cu and .cuh under src/kernels', () => {
    const walk = (dir: string): string[] =>
      readdirSync(dir).flatMap((name) => {
        const path = join(dir, name);
        return statSync(path).isDirectory() ? walk(path) : [path];
      });
    const files = walk(kernelsDir()).filter((f) => /\.cuh?$/.test(f));
    assert.ok(files.length > 20, `${files.length} kernel files`);
    for (const file of files) {
      const text = readFileSync(file, 'utf8');
      assert.deepEqual(quotedIncludes(text), byPattern(text), file);
    }
  });
});
