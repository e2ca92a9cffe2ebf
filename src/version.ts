import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';

/** The version in package.json, found relative to this file in src/ and in dist/src/ alike. */
export function packageVersion(): string {
  for (const up of ['../package.json', '../../package.json']) {
    try {
      const json = JSON.parse(readFileSync(fileURLToPath(new URL(up, import.meta.url)), 'utf8'));
      if (json.name === 'attnlab') return json.version;
    } catch {
      // not at this depth; try the next
    }
  }
  return 'unknown';
}
