/**
 * No tracked text file keeps a merge's conflict markers: a resolved-by-hand merge once committed
 * `<<<<<<< HEAD` … `>>>>>>> main` into two guides, and nothing else would have noticed.
 */
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { test } from 'node:test';

const root = new URL('../../../', import.meta.url);

/** Tracked files, or null outside a git checkout (an unpacked package has no history to check). */
function trackedFiles(): string[] | null {
  try {
    return execFileSync('git', ['ls-files', '-z'], {
      cwd: root,
      encoding: 'utf8',
      stdio: ['ignore', 'pipe', 'ignore'],
    })
      .split('\0')
      .filter(Boolean);
  } catch {
    return null;
  }
}

const TEXT = /\.(ts|mts|js|mjs|cjs|json|md|cu|cuh|py|sh|c|h|wgsl|yml|yaml|txt|html|ipynb)$/;
const MARKER = /^(<{7} |>{7} |={7}$)/m;

test('no tracked text file holds merge conflict markers', (t) => {
  const files = trackedFiles();
  if (files === null) {
    t.skip('not a git checkout: no tracked files to read');
    return;
  }
  const marked = files.filter((f) => TEXT.test(f) && MARKER.test(readFileSync(new URL(f, root), 'utf8')));
  assert.deepEqual(marked, [], `conflict markers in ${marked.join(', ')}`);
});
