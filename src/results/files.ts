/**
 * Saving and loading results files. Saving validates first, so a file on disk always matches
 * docs/results-schema.md; loading validates too, so a report never trusts a hand-edited file.
 */
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { dirname } from 'node:path';
import { InvalidArgumentError } from '../errors.js';
import type { ResultsFile } from './schema.js';
import { parseResults } from './validate.js';

/** Validates and writes `results` as indented JSON, creating the folder. */
export function saveResults(path: string, results: ResultsFile): void {
  // Round-trip through JSON first: the validator must see what a reader will (undefined dropped).
  const json = JSON.stringify(results, null, 1);
  parseResults(JSON.parse(json), path);
  mkdirSync(dirname(path), { recursive: true });
  writeFileSync(path, `${json}\n`);
}

/** Reads and validates a results file; errors name the file and the field. */
export function loadResults(path: string): ResultsFile {
  let text: string;
  try {
    text = readFileSync(path, 'utf8');
  } catch (error) {
    throw new InvalidArgumentError(
      'results file',
      'a readable JSON file',
      `${path} (${(error as Error).message})`,
    );
  }
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch (error) {
    throw new InvalidArgumentError(path, 'JSON', `unparsable text (${(error as Error).message})`);
  }
  return parseResults(value, path);
}
