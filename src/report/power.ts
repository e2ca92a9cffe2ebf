/**
 * What results files say of their GPU's power state (rows[].timing.power, bench/gpu-power.ts): rows timed while
 * the power limit held the GPU below its clocks ran at lower SM clocks, and how much that costs depends on the
 * kernel (more work per byte, more time lost: benchmarks/results/h200/decode/2026-12-02-1m-tokens-k8-k4) and on the GPU (of four H200s
 * on one day, two never reached their limit). A reader comparing rows needs to know which were capped.
 */
import type { NamedResults } from './charts.js';

/** Rows capped for less of their time than this (%) are left out of the note. */
export const CAPPED_NOTE_PERCENT = 5;

/** A note for each file with rows capped ≥ CAPPED_NOTE_PERCENT of their time; none where no row was. */
export function powerCapNotes(files: readonly NamedResults[]): string[] {
  const notes: string[] = [];
  for (const f of files) {
    const powered = f.results.rows.filter((r) => r.timing?.power);
    const capped = powered.filter((r) => (r.timing?.power?.cappedPercent ?? 0) >= CAPPED_NOTE_PERCENT);
    if (capped.length === 0) continue;
    const shares = capped.map((r) => r.timing?.power?.cappedPercent ?? 0);
    const limit = capped[0].timing?.power?.limitWatts ?? 0;
    const range = (xs: number[]) => {
      const [lo, hi] = [Math.min(...xs), Math.max(...xs)].map((x) => x.toFixed(0));
      return lo === hi ? lo : `${lo}–${hi}`;
    };
    const watts = capped.map((r) => r.timing?.power?.meanWatts ?? 0);
    notes.push(
      `${files.length > 1 ? `${f.name}: ` : ''}the GPU's ${limit.toFixed(0)} W power limit held it below its clocks ` +
        `during ${capped.length} of ${powered.length} timed rows (${range(shares)}% of their time, ${range(watts)} W drawn): ` +
        'those rows ran at lower SM clocks, and on another GPU or after other work they may read faster',
    );
  }
  return notes;
}
