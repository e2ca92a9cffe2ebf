/**
 * Building, saving and loading results files. Saving validates first, so a file on disk always
 * matches docs/results-schema.md; loading validates too, so a report never trusts a hand-edited file.
 */
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { dirname } from 'node:path';
import { InvalidArgumentError } from '../api/errors.js';
import { attnlabCommit, commandLine, describeMachine, packageVersion } from './machine.js';
import {
  type CeilingInfo,
  type PeerInfo,
  RESULTS_SCHEMA,
  RESULTS_SCHEMA_VERSION,
  type ResultRow,
  type ResultsFile,
  type ResultTable,
} from './schema.js';
import { parseResults } from './validate-results.js';

export interface ResultsContent {
  rows: ResultRow[];
  tables?: ResultTable[];
  notes?: string[];
  peers?: PeerInfo[];
  ceiling?: CeilingInfo | null;
}

/** A results file for this machine and command line, with the given content. */
export function makeResults(kind: ResultsFile['kind'], content: ResultsContent): ResultsFile {
  return {
    schema: RESULTS_SCHEMA,
    schemaVersion: RESULTS_SCHEMA_VERSION,
    kind,
    createdAt: new Date().toISOString(),
    command: commandLine(),
    attnlab: { version: packageVersion(), commit: attnlabCommit() },
    machine: describeMachine(),
    ceiling: content.ceiling ?? null,
    peers: content.peers ?? [],
    rows: content.rows,
    tables: content.tables ?? [],
    notes: content.notes ?? [],
  };
}

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
