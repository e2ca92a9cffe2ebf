/** Sweep specs: list parsing, doubling ranges, cartesian expansion and the cases left out. */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { codelabSweeps, doubling } from '../../../src/bench/presets.js';
import {
  expandSweep,
  parseBoolList,
  parseDTypeList,
  parseImplList,
  parseIntList,
  type SweepSpec,
} from '../../../src/bench/sweep.js';
import { InvalidArgumentError } from '../../../src/errors.js';
import { shapeLabel } from '../../../src/results/shape-label.js';

const base: SweepSpec = {
  batch: [1, 2],
  seq: [64, 128, 256],
  heads: [8],
  headDim: [64],
  dtype: ['bfloat16'],
  causal: [false, true],
  impl: ['flash', 'cudnn'],
};

describe('parseIntList', () => {
  it('reads plain lists, doubling ranges and mixes of both', () => {
    assert.deepEqual(parseIntList('--seq', '64,128'), [64, 128]);
    assert.deepEqual(parseIntList('--seq', '64..1024'), [64, 128, 256, 512, 1024]);
    assert.deepEqual(parseIntList('--batch', '1,3..12'), [1, 3, 6, 12]);
    assert.deepEqual(parseIntList('--seq', ' 32 , 32,64 '), [32, 64], 'duplicates and spaces are dropped');
    assert.deepEqual(parseIntList('--batch', '1..2,2'), [1, 2], 'a value a range made too is measured once');
    assert.deepEqual(parseIntList('--seq', '3..10'), [3, 6], 'the end only where the doubling reaches it');
  });

  it('names the option and the bad item', () => {
    assert.throws(
      () => parseIntList('--seq', '64,abc'),
      (e: unknown) => {
        assert.ok(e instanceof InvalidArgumentError);
        assert.equal(e.argument, '--seq');
        assert.match(e.message, /got "abc"/);
        return true;
      },
    );
    assert.throws(() => parseIntList('--seq', '0'), /--seq: expected integers in \[1, 16777216\]/);
    assert.throws(() => parseIntList('--seq', '128..64'), /a range a\.\.b with 1 ≤ a ≤ b/);
    assert.throws(() => parseIntList('--seq', ','), /a comma-separated list/);
    assert.throws(() => parseIntList('--batch', '1,,2'), /--batch: .*without empty items, got "1,,2"/);
  });
});

describe('parseBoolList, parseDTypeList, parseImplList', () => {
  it('accept the documented spellings', () => {
    assert.deepEqual(parseBoolList('--causal', 'true,false'), [true, false]);
    // Exactly the documented spellings: yes, 1, True are refused rather than guessed.
    for (const other of ['yes', '0', 'True', 'on'])
      assert.throws(
        () => parseBoolList('--causal', other),
        /--causal: expected 'true', 'false' or 'true,false'/,
      );
    assert.deepEqual(parseDTypeList('--dtype', 'bf16,fp16,f32,float32'), ['bfloat16', 'float16', 'float32']);
    assert.deepEqual(parseImplList('--impl', 'naive,cudnn'), ['naive', 'cudnn']);
  });

  it('reject anything else with the option name', () => {
    assert.throws(
      () => parseBoolList('--causal', 'maybe'),
      /--causal: expected 'true', 'false' or 'true,false', got "maybe"/,
    );
    assert.throws(() => parseDTypeList('--dtype', 'float128'), /--dtype: expected one of/);
    assert.throws(
      () => parseImplList('--impl', 'xla'),
      /--impl: expected one of reference, naive, flash, cudnn/,
    );
  });
});

describe('expandSweep', () => {
  it('is the cartesian product, sizes outermost and the implementation innermost', () => {
    const { cases, skipped } = expandSweep(base);
    assert.equal(cases.length, 2 * 3 * 2 * 2);
    assert.equal(skipped.length, 0);
    // Implementations of one shape are measured back to back.
    assert.deepEqual(
      cases.slice(0, 2).map((c) => c.impl),
      ['flash', 'cudnn'],
    );
    assert.equal(cases[0].T, cases[1].T);
    assert.ok(
      cases.every((c) => c.S === c.T && c.K === c.N),
      'S = T and K = N by default',
    );
  });

  it('takes S and K from kvSeq and kvHeads, and leaves out N not divisible by K with the reason', () => {
    const { cases, skipped } = expandSweep({
      ...base,
      batch: [1],
      seq: [128],
      kvSeq: [256],
      kvHeads: [8, 3, 1],
      causal: [false],
    });
    assert.deepEqual(
      [...new Set(cases.map((c) => `${c.T}/${c.S} K=${c.K}`))],
      ['128/256 K=8', '128/256 K=1'],
    );
    assert.equal(skipped.length, 1);
    assert.match(skipped[0].reason, /N=8 is not a multiple of K=3/);
  });

  it('labels shapes B×T×N×H, with S and K only when they differ', () => {
    assert.equal(shapeLabel({ B: 4, T: 128, S: 128, N: 8, K: 8, H: 64 }), '4×128×8×64');
    assert.equal(shapeLabel({ B: 4, T: 128, S: 512, N: 8, K: 2, H: 64 }), '4×128/512×8/2×64');
  });
});

describe('codelab presets', () => {
  it('on a GPU: the default shape, T from 64 to 16384 (1024 as in the codelab) and B from 1 to 16 at T=256', () => {
    const groups = codelabSweeps('cuda', true);
    const seq = groups.filter((g) => g.name === 'seq').flatMap((g) => expandSweep(g.spec).cases);
    assert.deepEqual([...new Set(seq.map((c) => c.T))], doubling(64, 16384));
    const short = codelabSweeps('cuda', false)
      .filter((g) => g.name === 'seq')
      .flatMap((g) => expandSweep(g.spec).cases);
    assert.deepEqual([...new Set(short.map((c) => c.T))], [64, 128, 256, 512, 1024]);
    const batch = groups.filter((g) => g.name === 'batch').flatMap((g) => expandSweep(g.spec).cases);
    assert.deepEqual([...new Set(batch.map((c) => c.B))], [1, 2, 4, 8, 16]);
    assert.ok(batch.every((c) => c.T === 256));
    const series = new Set(seq.map((c) => `${c.impl} ${c.dtype}`));
    assert.deepEqual([...series].sort(), [
      'cudnn bfloat16',
      'flash bfloat16',
      'flash float32',
      'naive bfloat16',
      'naive float32',
    ]);
  });

  it('on the CPU: reference and flash at small sizes; the short form trims the sequence sweep', () => {
    const cases = codelabSweeps('cpu', true).flatMap((g) => expandSweep(g.spec).cases);
    assert.deepEqual([...new Set(cases.map((c) => c.impl))].sort(), ['flash', 'reference']);
    assert.ok(Math.max(...cases.map((c) => c.T)) <= 256);
    const quick = codelabSweeps('cpu', false).flatMap((g) => expandSweep(g.spec).cases);
    assert.ok(Math.max(...quick.map((c) => c.T)) < Math.max(...cases.map((c) => c.T)));
  });
});
