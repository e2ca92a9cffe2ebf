/**
 * launchGroupFor picks a launch group by signature without a device: the one captured with it, else the one that
 * saw it last, else a new one up to `most`, else the least recently used without a graph, else the least
 * recently used. A cycle of signatures no longer than `most` gets one group each.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { type LaunchGraph, launchGroupFor } from '../../../../../src/backends/cuda/runtime/launch-graph.js';

const sig = (n: number) => new Uint8Array(new Uint32Array([n, 7, 9, n * 3]).buffer);

describe('launchGroupFor', () => {
  it('a cycle of four signatures keeps four groups, each found again by the signature it saw or captured', () => {
    const groups: LaunchGraph[] = [];
    const seen = new Map<number, LaunchGraph>();
    for (let round = 0; round < 3; round++)
      for (let n = 1; n <= 4; n++) {
        const group = launchGroupFor(groups, sig(n), 8, true);
        // What beginLaunchGroup records: the signature seen, then (second sighting) captured.
        if (group.last === null || round === 0) group.last = sig(n);
        else group.captured = sig(n);
        if (seen.has(n)) assert.equal(group, seen.get(n), `signature ${n}, round ${round}`);
        seen.set(n, group);
      }
    assert.equal(groups.length, 4);
    assert.ok(groups.every((g) => g.optIn));
    assert.equal(new Set(seen.values()).size, 4);
  });

  it('past `most`, a new signature takes the least recently used group without a graph, else the least recently used', () => {
    const groups: LaunchGraph[] = [];
    const a = launchGroupFor(groups, sig(1), 2, false);
    a.captured = sig(1);
    const b = launchGroupFor(groups, sig(2), 2, false);
    b.last = sig(2);
    assert.notEqual(a, b);
    assert.equal(launchGroupFor(groups, sig(3), 2, false), b, 'the one without a graph');
    b.captured = sig(3);
    assert.equal(launchGroupFor(groups, sig(1), 2, false), a, 'found by its graph');
    assert.equal(launchGroupFor(groups, sig(4), 2, false), b, 'both captured: the least recently used');
    assert.equal(groups.length, 2);
  });
});
