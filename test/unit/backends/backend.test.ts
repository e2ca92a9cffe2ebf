/**
 * The backend contract (src/backends/backend.ts) and the dispatch rule every registry shares
 * (chooseFrom): the plan a backend makes is the one that runs, a refusal carries its reason, a named
 * backend never falls back, and the post-ops an entry declares run after it, in order, only where they apply.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { validateAttention } from '../../../src/api/validate.js';
import {
  type AttentionBackend,
  type PostOp,
  planAndRun,
  planned,
  runPlanned,
  supports,
  unsupported,
  withPostOps,
} from '../../../src/backends/backend.js';
import type { AttentionProblem, BackendOutput } from '../../../src/backends/problem.js';
import { chooseFrom } from '../../../src/backends/registry.js';
import { UnsupportedError } from '../../../src/errors.js';
import { randomNormal } from '../../../src/tensor/random.js';

const q = randomNormal([1, 4, 2, 8], { seed: 1 });
const problem = (options = {}) => validateAttention(q, q, q, options);

/** A CPU stand-in whose plan is a fresh object naming it, refusing causal problems when `causal` is false. */
function standIn(
  name: 'flash' | 'reference',
  causal: boolean,
  log: string[],
): AttentionBackend<{ by: string }> {
  return {
    name,
    device: 'cpu',
    plan: (p) => {
      log.push(`plan ${name}`);
      return p.causal && !causal ? unsupported(`${name} takes no causal mask`) : planned({ by: name });
    },
    run: (plan, p) => {
      log.push(`run ${name} with ${plan.by}`);
      return { output: p.query, variant: plan.by };
    },
  };
}

describe('the backend contract', () => {
  it('auto takes the first backend whose plan succeeds, and that plan runs', () => {
    const log: string[] = [];
    const table = [standIn('flash', false, log), standIn('reference', true, log)];
    const p = problem({ isCausal: true });
    const chosen = chooseFrom(table, p, '');
    assert.equal(chosen.backend.name, 'reference');
    assert.deepEqual(chosen.plan, { by: 'reference' });
    const out = runPlanned(chosen.backend, chosen.plan, p);
    assert.equal(out.variant, 'reference');
    assert.deepEqual(
      log,
      ['plan flash', 'plan reference', 'run reference with reference'],
      'planned once each',
    );
  });

  it('a named backend that cannot plan throws its reason and never falls back; none at all lists every reason', () => {
    const log: string[] = [];
    const table = [standIn('flash', false, log), standIn('reference', false, log)];
    assert.throws(
      () => chooseFrom(table, problem({ isCausal: true, implementation: 'flash' }), ''),
      (e: unknown) => e instanceof UnsupportedError && /flash takes no causal mask/.test(e.message),
    );
    assert.throws(
      () => chooseFrom(table, problem({ isCausal: true }), ' backward'),
      (e: unknown) =>
        e instanceof UnsupportedError &&
        /every cpu backend backward/.test(e.message) &&
        /flash: flash takes no causal mask; reference: reference takes no causal mask/.test(e.message),
    );
    assert.ok(!log.some((line) => line.startsWith('run')), 'nothing ran');
    const refused = supports(table[0], problem({ isCausal: true }));
    assert.ok(!refused.ok && refused.reason === 'flash takes no causal mask');
    assert.throws(
      () =>
        planAndRun(table[0], problem({ isCausal: true }), (reason) => new UnsupportedError('flash', reason)),
      UnsupportedError,
    );
  });

  it('runs the post-ops an entry declares after its run, in order, where they apply', () => {
    const log: string[] = [];
    const op = (
      name: string,
      applies: (p: AttentionProblem) => boolean,
    ): PostOp<AttentionProblem, BackendOutput> => ({
      name,
      applies,
      run: (_p, out) => {
        log.push(`${name} on ${out.variant}`);
      },
    });
    const bare = standIn('reference', true, log);
    const entry = withPostOps(withPostOps(bare, [op('first', () => true)]), [
      op('causal only', (p) => p.causal),
    ]);
    assert.equal(bare.postOps, undefined, 'the backend itself is left as it was');
    assert.deepEqual(
      entry.postOps?.map((o) => o.name),
      ['first', 'causal only'],
    );
    runPlanned(entry, { by: 'test' }, problem());
    assert.deepEqual(log, ['run reference with test', 'first on test']);
    log.length = 0;
    planAndRun(entry, problem({ isCausal: true }), (reason) => new Error(reason));
    assert.deepEqual(log, [
      'plan reference',
      'run reference with reference',
      'first on reference',
      'causal only on reference',
    ]);
  });

  it('refuses a layout a backend does not declare before asking its plan', () => {
    const log: string[] = [];
    const pool = randomNormal([2, 4, 2, 8], { seed: 2 });
    const paged = validateAttention(q, pool, pool, { blockTable: [[0, 1]], keyValueSeqLengths: [6] });
    const refused = supports(standIn('reference', true, log), paged);
    assert.ok(!refused.ok && /paged KV cache/.test(refused.reason));
    assert.deepEqual(log, [], 'plan() never saw a layout it did not declare');
  });
});
