/**
 * The layer check of docs/internals/architecture.md: the table of layers is read from that page (so the page
 * and the check cannot disagree), every relative import of every module under a source folder is
 * parsed, and three things are asked of them:
 *
 * - each module belongs to exactly one layer, and imports only its own layer or lower-ranked ones
 *   (layers of equal rank are siblings and import nothing of each other);
 * - no import cycle, of any length, type-only imports included;
 * - each module loads on its own, first, in a module graph of its own (tsx's tsImport gives every
 *   call a fresh copy of everything it loads, in one process: 100 fresh processes would take
 *   ~100 s here, the namespaces ~7 s; test/unit/scripts/layers.test.ts proves the copies are fresh).
 *
 * `node --import tsx scripts/layers.ts` prints the report for src/ (test/unit/scripts/layers.test.ts runs the check).
 */
import { readdirSync, readFileSync, statSync } from 'node:fs';
import { dirname, join, relative, resolve, sep } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { tsImport } from 'tsx/esm/api';

export interface Layer {
  readonly rank: number;
  readonly name: string;
  /** `dir/` (the folder and below), or a file path in which `*` stands for any run of non-/ characters. */
  readonly patterns: readonly string[];
}

export interface ImportEdge {
  /** Paths relative to the project root, with / separators. */
  readonly from: string;
  readonly to: string;
  readonly line: number;
  readonly typeOnly: boolean;
}

/** The rows between `<!-- layers:begin -->` and `<!-- layers:end -->`: | rank | layer | modules | … |. */
export function readLayerTable(markdown: string): Layer[] {
  const begin = markdown.indexOf('<!-- layers:begin -->');
  const end = markdown.indexOf('<!-- layers:end -->');
  if (begin < 0 || end < begin) throw new Error('no <!-- layers:begin --> … <!-- layers:end --> table');
  const layers: Layer[] = [];
  for (const row of markdown.slice(begin, end).split('\n')) {
    const cells = row.split('|').map((c) => c.trim());
    if (cells.length < 4 || !/^\d+$/.test(cells[1])) continue;
    const patterns = [...cells[3].matchAll(/`([^`]+)`/g)].map((m) => m[1]);
    if (patterns.length === 0) throw new Error(`layer ${cells[2]} names no modules`);
    layers.push({ rank: Number(cells[1]), name: cells[2], patterns });
  }
  return layers;
}

function matches(pattern: string, path: string): boolean {
  if (pattern.endsWith('/')) return path.startsWith(pattern);
  const regex = pattern.replace(/[.+?^${}()|[\]\\]/g, '\\$&').replaceAll('*', '[^/]*');
  return new RegExp(`^${regex}$`).test(path);
}

export function listModules(root: string, dir: string): string[] {
  const walk = (d: string): string[] =>
    readdirSync(d).flatMap((name) => {
      const path = join(d, name);
      if (statSync(path).isDirectory()) return walk(path);
      return path.endsWith('.ts') && !path.endsWith('.d.ts') ? [path] : [];
    });
  return walk(join(root, dir)).map((p) => relative(root, p).split(sep).join('/'));
}

// `import … from '…'`, `export … from '…'` (across lines up to the first `;`), `import '…'`, `import('…')`.
const STATIC = /^[ \t]*(import|export)\b([^;'"]*?)\bfrom\s*['"]([^'"]+)['"]/gm;
const BARE = /^[ \t]*import\s*['"]([^'"]+)['"]/gm;
const DYNAMIC = /\bimport\(\s*['"]([^'"]+)['"]\s*\)/g;

/** The relative imports of each module, resolved to project paths (`.js` specifiers name `.ts` files). */
export function importEdges(root: string, modules: readonly string[]): ImportEdge[] {
  const edges: ImportEdge[] = [];
  for (const from of modules) {
    const text = readFileSync(join(root, from), 'utf8');
    const lineOf = (index: number) => text.slice(0, index).split('\n').length;
    const add = (spec: string, index: number, typeOnly: boolean) => {
      if (!spec.startsWith('.')) return;
      const target = resolve(root, dirname(from), spec.replace(/\.js$/, '.ts'));
      edges.push({ from, to: relative(root, target).split(sep).join('/'), line: lineOf(index), typeOnly });
    };
    for (const m of text.matchAll(STATIC)) {
      add(m[3], m.index ?? 0, /^\s*type\b/.test(m[2]));
    }
    for (const m of text.matchAll(BARE)) add(m[1], m.index ?? 0, false);
    for (const m of text.matchAll(DYNAMIC)) add(m[1], m.index ?? 0, false);
  }
  return edges;
}

/** Problems in words: modules in no layer or in two, and imports that point up or sideways. */
export function layerViolations(
  layers: readonly Layer[],
  modules: readonly string[],
  edges: readonly ImportEdge[],
) {
  const problems: string[] = [];
  const layerOf = new Map<string, Layer>();
  for (const module of modules) {
    const found = layers.filter((l) => l.patterns.some((p) => matches(p, module)));
    if (found.length === 1) layerOf.set(module, found[0]);
    else if (found.length === 0) problems.push(`${module} is in no layer of the table`);
    else problems.push(`${module} is in ${found.length} layers (${found.map((l) => l.name).join(', ')})`);
  }
  for (const edge of edges) {
    const a = layerOf.get(edge.from);
    const b = layerOf.get(edge.to);
    if (!a) continue;
    if (!b) {
      if (!modules.includes(edge.to))
        problems.push(`${edge.from}:${edge.line} imports ${edge.to}, which does not exist`);
      continue;
    }
    if (a === b || b.rank < a.rank) continue;
    const how = b.rank === a.rank ? 'its sibling' : 'the higher';
    problems.push(
      `${edge.from}:${edge.line} (layer ${a.rank} ${a.name}) imports ${edge.to} (${how} layer ${b.rank} ${b.name})`,
    );
  }
  return problems;
}

/** Every import cycle (strongly connected set of two or more modules, or a module importing itself). */
export function importCycles(edges: readonly ImportEdge[]): string[][] {
  const next = new Map<string, string[]>();
  for (const e of edges) next.set(e.from, [...(next.get(e.from) ?? []), e.to]);
  const index = new Map<string, number>();
  const low = new Map<string, number>();
  const stack: string[] = [];
  const onStack = new Set<string>();
  const cycles: string[][] = [];
  let counter = 0;
  // Tarjan's algorithm; the graph is ~100 nodes, so recursion depth is no concern.
  const visit = (v: string) => {
    index.set(v, counter);
    low.set(v, counter++);
    stack.push(v);
    onStack.add(v);
    for (const w of next.get(v) ?? []) {
      if (!index.has(w)) {
        visit(w);
        low.set(v, Math.min(low.get(v)!, low.get(w)!));
      } else if (onStack.has(w)) low.set(v, Math.min(low.get(v)!, index.get(w)!));
    }
    if (low.get(v) !== index.get(v)) return;
    const component: string[] = [];
    let w: string;
    do {
      w = stack.pop()!;
      onStack.delete(w);
      component.push(w);
    } while (w !== v);
    if (component.length > 1 || (next.get(v) ?? []).includes(v)) cycles.push(component.sort());
  };
  for (const v of next.keys()) if (!index.has(v)) visit(v);
  return cycles;
}

/** Imports each module first in a module graph of its own; the modules that threw, with the error. */
export async function loadEachAlone(root: string, modules: readonly string[]): Promise<string[]> {
  const failures: string[] = [];
  for (const module of modules) {
    try {
      // Each tsImport call loads under a namespace of its own: a fresh copy of every module it reaches.
      await tsImport(pathToFileURL(join(root, module)).href, import.meta.url);
    } catch (error) {
      failures.push(`${module}: ${error instanceof Error ? error.message.split('\n')[0] : error}`);
    }
  }
  return failures;
}

/** Modules that do something when imported (run the CLI): the load check leaves them out. */
export const ENTRY_POINTS: readonly string[] = ['src/cli/bin.ts'];

/** The whole check of `dir` under `root` against `docsPath`'s table, as lines of problems. */
export async function checkLayers(
  root: string,
  docsPath: string,
  dir = 'src',
  load = true,
): Promise<string[]> {
  const layers = readLayerTable(readFileSync(join(root, docsPath), 'utf8'));
  const modules = listModules(root, dir);
  const edges = importEdges(root, modules);
  const problems = layerViolations(layers, modules, edges);
  for (const cycle of importCycles(edges)) problems.push(`import cycle: ${cycle.join(' ↔ ')}`);
  if (load)
    problems.push(
      ...(await loadEachAlone(
        root,
        modules.filter((m) => !ENTRY_POINTS.includes(m)),
      )),
    );
  return problems;
}

if (process.argv[1] && resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  const root = fileURLToPath(new URL('../', import.meta.url));
  const problems = await checkLayers(root, 'docs/internals/architecture.md');
  console.log(
    problems.length
      ? problems.join('\n')
      : 'layers: every import points down, no cycles, every module loads alone',
  );
  process.exitCode = problems.length ? 1 : 0;
}
