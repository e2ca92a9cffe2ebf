/**
 * README's TypeScript examples compile against the public API as written (tsc, strict), so that a
 * renamed export, option or result field breaks this test instead of a reader's first program.
 *
 * Each ```ts block that imports from 'attnlab' starts a file; a block without an import continues
 * the file above it (README's snippets build on the example before them). 'attnlab' resolves to
 * src/index.ts. Inputs a snippet uses without making them (q, k, v, dO, t, bits, total) are declared,
 * and the exports a file does not import are imported for it, so a snippet type-checks as it reads.
 */
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, describe, it } from 'node:test';
import { fileURLToPath } from 'node:url';
import * as attnlab from '../../src/index.js';

const root = fileURLToPath(new URL('../../', import.meta.url));

/** Inputs snippets take from the example above them, with their types. */
const INPUTS: Record<string, string> = {
  q: 'Tensor',
  k: 'Tensor',
  v: 'Tensor',
  dO: 'Tensor',
  t: 'Tensor',
  bits: 'number[]',
};

function exampleFiles(readme: string): string[] {
  const files: string[] = [];
  for (const [, code] of readme.matchAll(/```ts\n([\s\S]*?)```/g)) {
    if (/^import /m.test(code) || files.length === 0) files.push(code);
    else files[files.length - 1] += code;
  }
  return files;
}

/** Names a file declares (const/let, destructured or not) or imports. */
function declaredNames(code: string): Set<string> {
  const names = new Set<string>();
  for (const [, one, many] of code.matchAll(
    /\b(?:const|let|var)\s+(?:([A-Za-z_$][\w$]*)|[[{]([^\]}]*)[\]}])/g,
  ))
    for (const name of one ? [one] : many.split(',')) names.add(name.trim().split(/[:\s]/)[0]);
  for (const [, list] of code.matchAll(/^import\s*(?:type\s*)?\{([^}]*)\}/gm))
    for (const name of list.split(',')) names.add(name.trim().replace(/^type\s+/, ''));
  return names;
}

function withPrelude(code: string): string {
  const declared = declaredNames(code);
  const exports = Object.keys(attnlab).filter((name) => !declared.has(name));
  const inputs = Object.entries(INPUTS).filter(([name]) => !declared.has(name));
  return [
    `import type { Tensor as ExampleTensor } from 'attnlab';`,
    exports.length > 0 ? `import { ${exports.join(', ')} } from 'attnlab';` : '',
    ...inputs.map(([name, type]) => `declare const ${name}: ${type.replace('Tensor', 'ExampleTensor')};`),
    declared.has('total') ? '' : 'declare let total: number;',
    code,
    'export {};',
  ].join('\n');
}

const work = mkdtempSync(join(tmpdir(), 'attnlab-readme-'));
after(() => rmSync(work, { recursive: true, force: true }));

describe('README examples', () => {
  it('every ```ts example type-checks against src/index.ts (tsc, strict)', () => {
    const files = exampleFiles(readFileSync(join(root, 'README.md'), 'utf8'));
    assert.ok(files.length >= 5, `found ${files.length} example files`);
    const names = files.map((code, i) => {
      const name = `example${i}.ts`;
      writeFileSync(join(work, name), withPrelude(code));
      return name;
    });
    const compilerOptions = {
      target: 'ES2022',
      module: 'NodeNext',
      moduleResolution: 'NodeNext',
      strict: true,
      noEmit: true,
      skipLibCheck: true,
      allowImportingTsExtensions: true,
      types: ['node'],
      typeRoots: [join(root, 'node_modules/@types')],
      paths: { attnlab: [join(root, 'src/index.ts')] },
    };
    writeFileSync(join(work, 'tsconfig.json'), JSON.stringify({ compilerOptions, files: names }));
    const tsc = spawnSync(join(root, 'node_modules/.bin/tsc'), ['-p', join(work, 'tsconfig.json')], {
      encoding: 'utf8',
    });
    const shown = names.map((n) => `--- ${n}\n${readFileSync(join(work, n), 'utf8')}`).join('\n');
    assert.equal(tsc.status, 0, `${tsc.stdout}${tsc.stderr}\n${shown}`);
  });
});
