/**
 * The codelab notebook as the package ships it (notebooks/attention-codelab.ipynb, listed in
 * package.json's files), and its copy into a folder for `attnlab lab --notebook`.
 */
import { copyFileSync, existsSync, mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { InvalidArgumentError } from '../errors.js';

export const NOTEBOOK_FILE = 'attention-codelab.ipynb';

/** The shipped notebook: two folders up from the sources (src/notebook/), three from dist/src/notebook/. */
export function codelabNotebookPath(): string {
  for (const candidate of [`../../notebooks/${NOTEBOOK_FILE}`, `../../../notebooks/${NOTEBOOK_FILE}`]) {
    const path = fileURLToPath(new URL(candidate, import.meta.url));
    if (existsSync(path)) return path;
  }
  throw new InvalidArgumentError(
    'notebook',
    `notebooks/${NOTEBOOK_FILE} in the attnlab package`,
    'no such file',
  );
}

/**
 * Copies the notebook into `dir` (made if missing) and returns its path. An existing notebook there
 * is left alone and refused: it may hold a learner's edits.
 */
export function writeCodelabNotebook(dir: string, option = '--notebook'): string {
  const target = join(dir, NOTEBOOK_FILE);
  if (existsSync(target)) {
    throw new InvalidArgumentError(
      option,
      `a folder without ${NOTEBOOK_FILE} (it is never overwritten)`,
      target,
    );
  }
  mkdirSync(dir, { recursive: true });
  copyFileSync(codelabNotebookPath(), target);
  return target;
}
