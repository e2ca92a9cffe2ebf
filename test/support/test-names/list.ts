/**
 * Prints, as JSON, the name path of every test the given test files define, without running any:
 * `node --import tsx test/support/test-names/list.ts <files…>` (node:test replaced by recorder.ts).
 * test/unit/scripts/gpu-shards.test.ts matches them against the shards of scripts/gpu-verify.sh.
 */
import { register } from 'node:module';
import { resolve } from 'node:path';
import { pathToFileURL } from 'node:url';

register(new URL('./hooks.mjs', import.meta.url));
const { recorded, startFile } = await import('./recorder.js');
for (const file of process.argv.slice(2)) {
  startFile(file);
  await import(pathToFileURL(resolve(file)).href);
}
process.stdout.write(`${JSON.stringify(recorded)}\n`);
