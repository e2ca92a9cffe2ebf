/** src/backends/recent-decisions.ts: the last few auto decisions, found by a plain problem's fields. */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { type DecisionCase, RecentDecisions } from '../../../src/backends/recent-decisions.js';
import type { AutoDecision } from '../../../src/backends/registry.js';

const base: DecisionCase = {
  dtype: 'bfloat16',
  B: 4,
  T: 128,
  S: 128,
  N: 8,
  K: 8,
  H: 64,
  Hv: 64,
  causal: false,
  alignment: 'top_left',
  window: null,
  bias: null,
  mask: null,
};
const decision = (why: string): AutoDecision => ({ order: ['cudnn', 'flash'], source: 'model', why });

describe('RecentDecisions', () => {
  it('finds a remembered case by its fields, on its device and with its own field', () => {
    const recent = new RecentDecisions<AutoDecision>();
    recent.refresh();
    const d = decision('first');
    recent.remember(base, 0, d, true);
    assert.equal(recent.find({ ...base }, 0, true), d);
    assert.equal(recent.find(base, 1, true), undefined, 'another device');
    assert.equal(recent.find(base, 0, false), undefined, 'another determinism');
    assert.equal(recent.find({ ...base, T: 256 }, 0, true), undefined, 'another T');
    assert.equal(recent.find({ ...base, causal: true }, 0, true), undefined, 'causal');
    // A mask, bias or window is compared by presence: the decision reads only whether there is one.
    recent.remember({ ...base, mask: new Uint8Array(4) }, 0, d);
    assert.equal(recent.find({ ...base, mask: new Uint8Array(8) }, 0), d);
    assert.equal(recent.find(base, 0), undefined, 'no mask');
  });

  it('keeps the last four', () => {
    const recent = new RecentDecisions<AutoDecision>();
    for (let T = 1; T <= 5; T++) recent.remember({ ...base, T }, 0, decision(`T=${T}`));
    assert.equal(recent.find({ ...base, T: 1 }, 0), undefined);
    for (let T = 2; T <= 5; T++) assert.equal(recent.find({ ...base, T }, 0)?.why, `T=${T}`);
  });

  it('forgets everything once at the first refresh and keeps entries while nothing changed', () => {
    const recent = new RecentDecisions<AutoDecision>();
    recent.remember(base, 0, decision('before'));
    assert.equal(recent.refresh(), true);
    assert.equal(recent.find(base, 0), undefined);
    recent.remember(base, 0, decision('after'));
    assert.equal(recent.refresh(), false);
    assert.equal(recent.find(base, 0)?.why, 'after');
  });
});
