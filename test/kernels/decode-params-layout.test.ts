/**
 * DecodeParams as decode.ts marshals it against the C struct of decode_common.cuh as the compiler lays
 * it out: types, offsets and size. Skips, saying why, without nvcc or a C++ compiler.
 */
import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, describe, it } from 'node:test';
import { DECODE_PARAM_TYPES, DECODE_PARAMS_BYTES } from '../../src/backends/cuda/flash/decode/decode.js';
import { kernelsDir } from '../../src/backends/cuda/runtime/compile.js';
import { compileStructLayout, layoutMismatches, structCompiler, structMembers } from '../support/c-layout.js';

const compiler = structCompiler();
const skip = 'reason' in compiler ? compiler.reason : false;
const scratch = mkdtempSync(join(tmpdir(), 'attnlab-decode-params-'));
after(() => rmSync(scratch, { recursive: true, force: true }));

describe('DecodeParams: compiler vs TypeScript', { skip }, () => {
  it('the struct of decode_common.cuh has the types, offsets and size decode.ts writes', () => {
    const header = readFileSync(join(kernelsDir(), 'decode/decode_common.cuh'), 'utf8');
    const text = /struct DecodeParams \{[\s\S]*?\n\};/.exec(header)?.[0];
    assert.ok(text, 'struct DecodeParams in decode_common.cuh');
    const layout = compileStructLayout({
      prelude: `typedef unsigned short u16;\ntypedef long long i64;\n${text}`,
      name: 'DecodeParams',
      members: structMembers(header, 'DecodeParams'),
      includeDir: kernelsDir(),
      scratch,
    });
    assert.deepEqual(
      layoutMismatches(
        layout,
        DECODE_PARAM_TYPES.map((type) => ({ type })),
      ),
      [],
    );
    assert.equal(layout.size, DECODE_PARAMS_BYTES);
  });
});
