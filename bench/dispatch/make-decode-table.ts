/**
 * Reads the numbers of the measured decode table (src/backends/decode-dispatch-table.ts) from
 * the files its cases cite, so test/cpu/dispatch-table.test.ts can check every transcribed number:
 * - a decode-bench.ts results file (JSON): the row labelled `attnlab <impl> <layout>` (dense, paged16, …) at the
 *   case's B, S, K — its bandwidthGBs;
 * - a harness log (bench/decode/harness bench, text): the line of B S K <layout> for the
 *   case's kernel variant at the model's split count (marked *) — its GB/s column.
 * Rounded to whole GB/s, as the table holds them.
 *
 * Run: node --import tsx bench/dispatch/make-decode-table.ts   (prints each case's recorded numbers)
 */
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import {
  DECODE_DISPATCH_TABLES,
  type DecodeTiming,
  type MeasuredDecodeCase,
} from '../../src/backends/decode-dispatch-table.js';

/** The GB/s `timing` points at for case `c` of backend `impl`; throws when the file has no such row. */
export function recordedGbs(c: MeasuredDecodeCase, impl: string, timing: DecodeTiming): number {
  const text = readFileSync(timing.source, 'utf8');
  const layout = c.layout;
  if (timing.source.endsWith('.json')) {
    const rows = JSON.parse(text).rows as Array<Record<string, unknown>>;
    const row = rows.find(
      (r) => r.label === `attnlab ${impl} ${layout}` && r.B === c.B && r.S === c.S && r.K === c.K,
    );
    if (!row || typeof row.bandwidthGBs !== 'number')
      throw new Error(`${timing.source}: no ${impl} ${layout} row at B=${c.B} S=${c.S} K=${c.K}`);
    return Math.round(row.bandwidthGBs);
  }
  // B S K layout kernel rt splits ms GB/s [*]
  for (const line of text.split('\n')) {
    const f = line.trim().split(/\s+/);
    if (f.length < 10 || f[9] !== '*') continue;
    if (
      Number(f[0]) === c.B &&
      Number(f[1]) === c.S &&
      Number(f[2]) === c.K &&
      f[3] === layout &&
      f[4] === timing.kernel
    )
      return Math.round(Number(f[8]));
  }
  throw new Error(`${timing.source}: no ${timing.kernel} ${layout} line at B=${c.B} S=${c.S} K=${c.K}`);
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  for (const table of DECODE_DISPATCH_TABLES)
    for (const c of table.cases) {
      const numbers = Object.entries(c.timing).map(
        ([impl, timing]) => `${impl} ${recordedGbs(c, impl, timing!)} (${timing!.kind})`,
      );
      console.log(`${table.gpu} B=${c.B} S=${c.S} K=${c.K} ${c.layout}: ${numbers.join(', ')}`);
    }
}
