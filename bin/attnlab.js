#!/usr/bin/env node
// The attnlab command. It runs the compiled code in dist/ (built by `npm ci` / `npm run build`).
import { existsSync } from 'node:fs';

const entry = new URL('../dist/src/cli/bin.js', import.meta.url);
if (!existsSync(entry)) {
  process.stderr.write('attnlab: dist/ is missing; run `npm run build` (npm ci does it) first\n');
  process.exit(1);
}
await import(entry.href);
