/**
 * src/bench/hidden-host.ts without a GPU, against the stand-in driver (test/fake-device/cudnn-fake.c), whose
 * events always read 0.001 ms: every sample's host outlasts its spin, so none may count.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { timeHostHidden } from '../../src/bench/hidden-host.js';
import { AttnlabError, InvalidArgumentError } from '../../src/errors.js';
import { useFakeCudaStack } from './fake-cuda.js';

const { skip } = useFakeCudaStack('attnlab-fake-hidden-');
const none = { dispose() {} };

describe('timeHostHidden', { skip }, () => {
  it('names a bad sample or batch count', () => {
    assert.throws(
      () => timeHostHidden(() => none, { samples: 0, batch: 1 }),
      (e: unknown) => e instanceof InvalidArgumentError && e.message.includes('samples'),
    );
    assert.throws(
      () => timeHostHidden(() => none, { samples: 3, batch: 1.5 }),
      (e: unknown) => e instanceof InvalidArgumentError && e.message.includes('batch'),
    );
  });

  it('counts no sample whose host outlasted its spin, and says so', () => {
    let calls = 0;
    const call = () => {
      calls++;
      return none;
    };
    assert.throws(
      () => timeHostHidden(call, { samples: 3, batch: 2, warmup: 0 }),
      (e: unknown) => e instanceof AttnlabError && /0 of 3 samples.*longest 64000 µs/.test(e.message),
    );
    // The spin doubles from 1 ms while it stays within 0.1 s: 1, 2, … 64 ms, 7 samples of 2 calls.
    assert.equal(calls, 14);
  });
});
