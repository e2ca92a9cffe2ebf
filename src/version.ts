import { readFileSync } from 'node:fs';
import { dirname } from 'node:path';
import { fileURLToPath } from 'node:url';

/** package.json's path and contents, found relative to this file in src/ and in dist/src/ alike. */
function packageJson(): { path: string; json: { name?: string; version?: string } } | null {
  for (const up of ['../package.json', '../../package.json']) {
    try {
      const path = fileURLToPath(new URL(up, import.meta.url));
      const json = JSON.parse(readFileSync(path, 'utf8'));
      if (json.name === 'attnlab') return { path, json };
    } catch {
      // not at this depth; try the next
    }
  }
  return null;
}

/** The version in package.json. */
export function packageVersion(): string {
  return packageJson()?.json.version ?? 'unknown';
}

/** The folder that holds attnlab's package.json (a clone's root, or node_modules/attnlab). */
export function packageRoot(): string | null {
  const found = packageJson();
  return found ? dirname(found.path) : null;
}
