#!/usr/bin/env node
// The attnlab command. It runs the compiled code in dist/ (built by `npm ci` / `npm run build`). In a
// clone where no build ran (`npm ci --ignore-scripts` skips the `prepare` script that builds dist/),
// it runs the TypeScript sources through tsx, a devDependency that every clone installs.
import { existsSync } from 'node:fs';

const entry = new URL('../dist/src/cli/bin.js', import.meta.url);
if (existsSync(entry)) {
  await import(entry.href);
} else {
  let tsx;
  try {
    tsx = await import('tsx/esm/api');
  } catch {
    process.stderr.write('attnlab: dist/ is missing; run `npm run build` (npm ci does it) first\n');
    process.exit(1);
  }
  tsx.register();
  await import(new URL('../src/cli/bin.ts', import.meta.url).href);
}
