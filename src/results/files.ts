/**
 * Saving and loading results files. Saving validates first, so a file on disk always matches
 * docs/results-schema.md; loading validates too, so a report never trusts a hand-edited file.
 */
import { mkdirSync, readFileSync, type Stats, statSync, writeFileSync } from 'node:fs';
import { dirname } from 'node:path';
import { InvalidArgumentError } from '../errors.js';
import { neutraliseLine } from './safe-text.js';
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

/**
 * Reads and validates a results file; errors name the file and the field. Anything but a regular
 * file is refused before reading (a FIFO with no writer would block forever), and the file's name and
 * a parser's message (which quotes the file's bytes) are printed as one line, control bytes as \xNN.
 */
export function loadResults(path: string): ResultsFile {
  const shown = neutraliseLine(path);
  const refuse = (why: string): never => {
    throw new InvalidArgumentError('results file', 'a readable JSON file', `${shown} (${why})`);
  };
  let stat: Stats;
  try {
    stat = statSync(path);
  } catch (error) {
    return refuse(systemMessage(error));
  }
  if (!stat.isFile()) refuse(`${kindOf(stat)}, not a regular file`);
  let text = '';
  try {
    text = readFileSync(path, 'utf8');
  } catch (error) {
    refuse(systemMessage(error));
  }
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch (error) {
    throw new InvalidArgumentError(
      shown,
      'JSON',
      `unparsable text (${neutraliseLine((error as Error).message)})`,
    );
  }
  return parseResults(value, shown);
}

/** A Node system error's message without the path it repeats (that is printed once, neutralised). */
function systemMessage(error: unknown): string {
  const e = error as NodeJS.ErrnoException;
  if (!e?.code) return neutraliseLine(String(error));
  const reason = e.message.split(',')[0].replace(`${e.code}: `, '');
  return `${neutraliseLine(reason)} (${e.code})`;
}

function kindOf(stat: Stats): string {
  if (stat.isDirectory()) return 'a folder';
  if (stat.isFIFO()) return 'a FIFO (named pipe)';
  if (stat.isSocket()) return 'a socket';
  if (stat.isCharacterDevice() || stat.isBlockDevice()) return 'a device';
  return 'not a plain file';
}
