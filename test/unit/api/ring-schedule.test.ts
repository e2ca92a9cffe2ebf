/**
 * The ring schedule (src/api/ring-schedule.ts) as a pure function: the load-balanced layout, which
 * chunk pairs meet at which step and what kind each is, and — over a grid of sizes, masks, offsets
 * and windows — that the calls of every rank cover exactly the visible (query, key) pairs, each once.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { chunksOf, type RingScheduleInput, ringSchedule } from '../../../src/api/ring-schedule.js';

/** The visible (t, s) pairs of attention's rule in global positions (no padding). */
function visible(input: RingScheduleInput, t: number, s: number): boolean {
  const d = t + input.offset;
  if (input.causal && s > d) return false;
  if (input.window && (s < d - input.window.left || s > d + input.window.right)) return false;
  return true;
}

/** Global positions of a rank's shard rows: chunk r, then chunk 2P−1−r. */
function globalRow(rank: number, P: number, chunk: number, row: number): number {
  const [a, b] = chunksOf(rank, P);
  return row < chunk ? a * chunk + row : b * chunk + (row - chunk);
}

/** (t, s) pairs a call computes: its rows and keys under its local causal flag and window. */
function callPairs(
  input: RingScheduleInput,
  rank: number,
  source: number,
  call: ReturnType<typeof ringSchedule>[number][number]['calls'][number],
): string[] {
  const tc = input.T / (2 * input.P);
  const sc = input.S / (2 * input.P);
  const out: string[] = [];
  for (let i = 0; i < call.queryRows.length; i++)
    for (let j = 0; j < call.keyRows.length; j++) {
      if (call.causal && j > i) continue;
      if (call.window && (j < i - call.window.left || j > i + call.window.right)) continue;
      const t = globalRow(rank, input.P, tc, call.queryRows.start + i);
      const s = globalRow(source, input.P, sc, call.keyRows.start + j);
      out.push(`${t},${s}`);
    }
  return out;
}

describe('ringSchedule', () => {
  it('gives rank r chunks r and 2P−1−r, and the key/value shard of rank (r − s) mod P at step s', () => {
    assert.deepEqual(chunksOf(0, 4), [0, 7]);
    assert.deepEqual(chunksOf(3, 4), [3, 4]);
    const steps = ringSchedule({ P: 4, T: 64, S: 64, causal: false, offset: 0, window: null });
    assert.equal(steps.length, 4);
    for (const [s, row] of steps.entries())
      for (const [r, step] of row.entries()) {
        assert.equal(step.source, (r - s + 4) % 4);
        assert.deepEqual(
          step.pairs.map((p) => [p.queryChunk, p.keyChunk]),
          chunksOf(r, 4).flatMap((a) => chunksOf(step.source, 4).map((c) => [a, c])),
        );
      }
  });

  for (const P of [2, 3, 4, 8]) {
    it(`P=${P} causal T=S: full below the diagonal, masked on it, skipped above; one call a step; equal work per rank`, () => {
      const steps = ringSchedule({ P, T: 2 * P * 8, S: 2 * P * 8, causal: true, offset: 0, window: null });
      const work = new Array(P).fill(0);
      for (const row of steps)
        for (const step of row) {
          for (const p of step.pairs) {
            const want = p.keyChunk < p.queryChunk ? 'full' : p.keyChunk === p.queryChunk ? 'masked' : 'skip';
            assert.equal(
              p.kind,
              want,
              `step ${step.step} rank ${step.rank} pair ${p.queryChunk},${p.keyChunk}`,
            );
            work[step.rank] += p.kind === 'full' ? 2 : p.kind === 'masked' ? 1 : 0;
          }
          // TransformerEngine's three cases: the diagonal step is one causal call on the whole shard;
          // an earlier source is all queries × its first chunk; a later one the second query chunk × all.
          assert.equal(step.calls.length, 1);
          const [call] = step.calls;
          if (step.source === step.rank) assert.ok(call.causal && call.window === null);
          else if (step.source < step.rank)
            assert.deepEqual(
              [call.queryRows, call.keyRows],
              [
                { start: 0, length: 16 },
                { start: 0, length: 8 },
              ],
            );
          else
            assert.deepEqual(
              [call.queryRows, call.keyRows],
              [
                { start: 8, length: 8 },
                { start: 0, length: 16 },
              ],
            );
        }
      // In half-block units: each rank has 2 diagonal blocks (1 each) and 2P − 1 full ones (2 each),
      // 4P in all — the (2P)² grid's 4P² visible halves split evenly.
      assert.deepEqual(work, new Array(P).fill(4 * P));
    });
  }

  it('non-causal without a window: one full call on the whole shards every step', () => {
    for (const row of ringSchedule({ P: 3, T: 12, S: 18, causal: false, offset: 0, window: null }))
      for (const step of row) {
        assert.ok(step.pairs.every((p) => p.kind === 'full'));
        assert.deepEqual(
          step.calls.map((c) => [c.queryRows, c.keyRows, c.causal, c.window]),
          [[{ start: 0, length: 4 }, { start: 0, length: 6 }, false, null]],
        );
      }
  });

  it('covers exactly the visible pairs, each once, over sizes, offsets and windows', () => {
    const windows = [
      null,
      { left: 0, right: 0 },
      { left: 3, right: 1 },
      { left: 5, right: Infinity },
      { left: Infinity, right: 2 },
    ];
    let cases = 0;
    for (const P of [1, 2, 3, 4])
      for (const [tc, sc] of [
        [2, 2],
        [3, 3],
        [2, 4],
        [4, 1],
      ])
        for (const causal of [false, true])
          for (const window of windows)
            for (const alignment of ['top_left', 'bottom_right'] as const) {
              const T = 2 * P * tc;
              const S = 2 * P * sc;
              const input = { P, T, S, causal, offset: alignment === 'bottom_right' ? S - T : 0, window };
              const steps = ringSchedule(input);
              const seen = new Map<string, number>();
              for (const row of steps)
                for (const step of row)
                  for (const call of step.calls) {
                    assert.ok(call.queryRows.length > 0 && call.keyRows.length > 0);
                    assert.ok(!call.window || (call.window.left >= 0 && call.window.right >= 0));
                    for (const key of callPairs(input, step.rank, step.source, call))
                      seen.set(key, (seen.get(key) ?? 0) + 1);
                  }
              const label = JSON.stringify(input);
              for (let t = 0; t < T; t++)
                for (let s = 0; s < S; s++) {
                  const count = seen.get(`${t},${s}`) ?? 0;
                  assert.equal(
                    count,
                    visible(input, t, s) ? 1 : 0,
                    `${label}: pair (${t}, ${s}) computed ${count}×`,
                  );
                }
              // A pair's kind agrees with the pairs it holds.
              for (const row of steps)
                for (const step of row)
                  for (const p of step.pairs) {
                    let n = 0;
                    for (let i = 0; i < tc; i++)
                      for (let j = 0; j < sc; j++)
                        n += visible(input, p.queryChunk * tc + i, p.keyChunk * sc + j) ? 1 : 0;
                    assert.equal(p.kind, n === 0 ? 'skip' : n === tc * sc ? 'full' : 'masked', label);
                  }
              cases++;
            }
    assert.equal(cases, 4 * 4 * 2 * 5 * 2);
  });

  it('refuses lengths the layout cannot split', () => {
    assert.throws(
      () => ringSchedule({ P: 2, T: 6, S: 8, causal: true, offset: 0, window: null }),
      RangeError,
    );
    assert.throws(
      () => ringSchedule({ P: 0, T: 8, S: 8, causal: true, offset: 0, window: null }),
      RangeError,
    );
  });
});
