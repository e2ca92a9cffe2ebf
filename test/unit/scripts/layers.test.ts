/**
 * The layer check (docs/internals/architecture.md's table, scripts/layers.ts) over src/, and proof on small
 * projects written here that it fails where it should: an import that points up or sideways, a
 * module in no layer, an import cycle, and a module that only loads when another was loaded first.
 */
import assert from 'node:assert/strict';
import { mkdirSync, mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { describe, it } from 'node:test';
import { fileURLToPath } from 'node:url';
import { checkLayers } from '../../../scripts/layers.js';

const root = fileURLToPath(new URL('../../../', import.meta.url));

/** A project folder with these files (paths relative to it). */
function project(files: Record<string, string>): string {
  const dir = mkdtempSync(join(tmpdir(), 'attnlab-layers-'));
  writeFileSync(join(dir, 'package.json'), '{ "type": "module" }\n');
  for (const [path, text] of Object.entries(files)) {
    mkdirSync(dirname(join(dir, path)), { recursive: true });
    writeFileSync(join(dir, path), text);
  }
  return dir;
}

const TABLE = `# layers
<!-- layers:begin -->
| rank | layer | modules | what |
|------|-------|---------|------|
| 0 | floor | \`src/floor/\` \`src/one.ts\` | the bottom |
| 1 | left | \`src/left/\` | a sibling |
| 1 | right | \`src/right/*.ts\` | the other sibling |
| 2 | top | \`src/top/\` | the top |
<!-- layers:end -->
`;

describe('layers', () => {
  it('src/ follows docs/internals/architecture.md: imports point down, no cycles, every module loads alone', async () => {
    assert.deepEqual(await checkLayers(root, 'docs/internals/architecture.md'), []);
  });

  it('names the offending edge of an import that points up or sideways, and a module in no layer', async () => {
    const dir = project({
      'docs.md': TABLE,
      'src/one.ts': 'export const one = 1;\n',
      'src/floor/base.ts':
        "import { one } from '../one.js';\nimport { top } from '../top/top.js';\nexport const base = one + top;\n",
      'src/left/l.ts':
        "import { base } from '../floor/base.js';\nimport type { R } from '../right/r.js';\nexport const l: R = base;\n",
      'src/right/r.ts': 'export type R = number;\n',
      'src/right/deeper/x.ts': 'export const x = 1;\n',
      'src/top/top.ts': "import { one } from '../one.js';\nexport const top = one;\n",
    });
    const problems = await checkLayers(dir, 'docs.md', 'src', false);
    assert.deepEqual(problems.sort(), [
      'src/floor/base.ts:2 (layer 0 floor) imports src/top/top.ts (the higher layer 2 top)',
      'src/left/l.ts:2 (layer 1 left) imports src/right/r.ts (its sibling layer 1 right)',
      'src/right/deeper/x.ts is in no layer of the table',
    ]);
  });

  it('finds an import cycle, and loads each module first in a graph of its own', async () => {
    // The registry/backend knot of issue 13: loading the backend first reaches the registry, whose
    // table reads the backend's binding before it is initialised. Loading the registry first works,
    // and it loads first here (a-…), so the backend fails only if it gets a fresh graph of its own.
    const dir = project({
      'docs.md': TABLE,
      'src/top/a-registry.ts':
        "import { backend } from './b-backend.js';\nexport const TABLE = [backend];\nexport const one = () => 1;\n",
      'src/top/b-backend.ts':
        "import { one } from './a-registry.js';\nexport const backend = { run: () => one() };\n",
    });
    const problems = await checkLayers(dir, 'docs.md');
    assert.equal(problems.length, 2, problems.join('\n'));
    assert.equal(problems[0], 'import cycle: src/top/a-registry.ts ↔ src/top/b-backend.ts');
    assert.match(problems[1], /^src\/top\/b-backend\.ts: Cannot access 'backend' before initialization/);
  });
});
