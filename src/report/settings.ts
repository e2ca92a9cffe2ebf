/**
 * The ATTNLAB_* settings a results file was measured under (machine.settings: the variables that change what
 * runs or its timing, config.ts RUN_SETTING_VARIABLES). A row measured under one is not a row of the defaults,
 * and two files under different settings compare as two configurations do.
 */
import type { ResultsFile } from '../results/schema.js';
import type { NamedResults } from './charts.js';
import { gpuMismatchNote } from './gpus.js';
import { powerCapNotes } from './power.js';

/** `NAME=value, …` of the settings a file records, or undefined where none was set (the defaults). */
export function settingsLine(machine: ResultsFile['machine']): string | undefined {
  const entries = Object.entries(machine.settings ?? {});
  return entries.length ? entries.map(([name, value]) => `${name}=${value}`).join(', ') : undefined;
}

/** A note for a comparison whose files ran under different settings, or undefined. */
export function settingsMismatchNote(files: readonly NamedResults[]): string | undefined {
  const lines = files.map((f) => settingsLine(f.results.machine) ?? 'the defaults');
  if (new Set(lines).size < 2) return undefined;
  const where = files.map((f, i) => `${f.name}: ${lines[i]}`).join('; ');
  return `these files ran under different ATTNLAB_* settings (${where}): their rows compare as two configurations do`;
}

/**
 * The notes `files` need before their rows are read side by side: other GPUs, other settings, rows timed at the
 * GPU's power limit.
 */
export function comparisonNotes(files: readonly NamedResults[]): string[] {
  const notes = [gpuMismatchNote(files), settingsMismatchNote(files)].filter((n) => n !== undefined);
  return [...notes, ...powerCapNotes(files)];
}
