/**
 * Which GPUs a set of results files was measured on, from `machine.gpu.uuid` (recorded since 2026-12-02;
 * older files have none). A comparison across files is only as close as the GPUs are alike: rows are
 * measurements of one machine, and two calls to the device service may land on two H200s.
 */
import type { NamedResults } from './charts.js';

/** The distinct GPU UUIDs the files name, in order of first appearance (files without one add nothing). */
export function gpuUuids(files: readonly NamedResults[]): string[] {
  const seen: string[] = [];
  for (const f of files) {
    const uuid = f.results.machine.gpu?.uuid;
    if (uuid && !seen.includes(uuid)) seen.push(uuid);
  }
  return seen;
}

/** A note for a comparison whose files name more than one GPU, or undefined. */
export function gpuMismatchNote(files: readonly NamedResults[]): string | undefined {
  const uuids = gpuUuids(files);
  if (uuids.length < 2) return undefined;
  const where = files
    .filter((f) => f.results.machine.gpu?.uuid)
    .map((f) => `${f.name} on ${f.results.machine.gpu?.uuid}`)
    .join(', ');
  return `these files were measured on ${uuids.length} different GPUs (${where}): their rows compare as two machines' do, not as one run's`;
}
