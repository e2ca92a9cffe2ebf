/**
 * Saving and loading results files. Saving validates first, so a file on disk always matches
 * docs/results-schema.md; loading validates too, so a report never trusts a hand-edited file.
 */
import { randomBytes } from 'node:crypto';
import {
  mkdirSync,
  readFileSync,
  realpathSync,
  renameSync,
  rmSync,
  type Stats,
  statSync,
  writeFileSync,
} from 'node:fs';
import { basename, dirname, join } from 'node:path';
import { formatBytes, InvalidArgumentError } from '../errors.js';
import { neutraliseLine } from './safe-text.js';
import type { ResultsFile } from './schema.js';
import { parseResults } from './validate.js';

/** Validates and writes `results` as indented JSON, creating the folder. */
export function saveResults(path: string, results: ResultsFile): void {
  // Round-trip through JSON first: the validator must see what a reader will (undefined dropped).
  const json = JSON.stringify(results, null, 1);
  parseResults(JSON.parse(json), path);
  mkdirSync(dirname(path), { recursive: true });
  writeFileAtomic(path, `${json}\n`);
}

/**
 * Writes `text` to a temporary file beside `path` and renames it over `path`: a reader (another run, a report)
 * sees the old file or the new one, never half of one, and a process killed mid-write leaves the old file whole.
 * A path that exists and is not a regular file (a device such as /dev/null, a link to one) is written in place:
 * a rename would replace the device itself.
 */
export function writeFileAtomic(path: string, text: string): void {
  let existing: Stats | null = null;
  try {
    existing = statSync(path);
  } catch {
    existing = null;
  }
  if (existing !== null && !existing.isFile()) {
    writeFileSync(path, text);
    return;
  }
  // The target of a symbolic link is replaced, not the link: the link stays and reads the new file.
  const target = existing !== null ? realpathSync(path) : path;
  const temporary = join(
    dirname(target),
    `.${basename(target)}.${process.pid}-${randomBytes(4).toString('hex')}.tmp`,
  );
  try {
    writeFileSync(temporary, text, { flag: 'wx' });
    renameSync(temporary, target);
  } catch (error) {
    rmSync(temporary, { force: true });
    throw error;
  }
}

/** The largest results file read: 256 MiB is ~400,000 rows at ~600 bytes each, ~80 s of report. */
export const MAX_RESULTS_BYTES = 256 * 2 ** 20;

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
  // Refused before it is read: parsed, a file of 1 GiB is several GiB of heap, and V8 aborts the process.
  if (stat.size > MAX_RESULTS_BYTES) {
    refuse(
      `${formatBytes(stat.size)}; at most ${formatBytes(MAX_RESULTS_BYTES)} (about 400,000 rows) are read`,
    );
  }
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
