/**
 * Building a results file for this machine and command line (saving and loading: results/files.ts).
 */

import {
  type CeilingInfo,
  type LabSection,
  type PeerInfo,
  RESULTS_SCHEMA,
  RESULTS_SCHEMA_VERSION,
  type ResultRow,
  type ResultsFile,
  type ResultTable,
  type SuiteInfo,
} from '../results/schema.js';
import { attnlabCommit, commandLine, describeMachine, packageVersion } from './machine.js';

export interface ResultsContent {
  rows: ResultRow[];
  tables?: ResultTable[];
  notes?: string[];
  peers?: PeerInfo[];
  ceiling?: CeilingInfo | null;
  suite?: SuiteInfo;
  sections?: LabSection[];
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
    ...(content.suite ? { suite: content.suite } : {}),
    ceiling: content.ceiling ?? null,
    peers: content.peers ?? [],
    rows: content.rows,
    tables: content.tables ?? [],
    notes: content.notes ?? [],
    ...(content.sections ? { sections: content.sections } : {}),
  };
}
