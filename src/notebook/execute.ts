/**
 * Executes a TypeScript notebook's code cells in order in one Node context and returns the notebook
 * with their outputs in nbformat 4, as Jupyter with the tslab kernel would: where Jupyter is absent
 * (the GPU machine has Node and CUDA, no Jupyter), and in CI beside nbconvert's run, to compare.
 *
 * Each cell is TypeScript: esbuild strips the types (keeping every import, as tslab does: a name
 * imported in one cell is used in the next), its imports become dynamic ones, and Node's REPL
 * evaluates it — the REPL keeps top-level declarations across inputs and takes top-level await, as
 * a notebook kernel does. `import * as tslab from 'tslab'` gets a `display` that records
 * display_data outputs; console output becomes stream outputs. The first cell that throws gets an
 * error output and stops the run, as nbconvert does without --allow-errors.
 */
import repl, { type REPLServer } from 'node:repl';
import { PassThrough } from 'node:stream';
import { inspect } from 'node:util';

export interface NotebookCell {
  cell_type: 'code' | 'markdown' | 'raw';
  id?: string;
  metadata: Record<string, unknown>;
  source: string | string[];
  execution_count?: number | null;
  outputs?: NotebookOutput[];
}

export type NotebookOutput =
  | { output_type: 'stream'; name: 'stdout' | 'stderr'; text: string[] }
  | {
      output_type: 'display_data';
      data: Record<string, string | string[]>;
      metadata: Record<string, unknown>;
    }
  | {
      output_type: 'execute_result';
      data: Record<string, string | string[]>;
      metadata: Record<string, unknown>;
      execution_count: number;
    }
  | { output_type: 'error'; ename: string; evalue: string; traceback: string[] };

export interface Notebook {
  cells: NotebookCell[];
  metadata: Record<string, unknown>;
  nbformat: number;
  nbformat_minor: number;
}

export interface ExecuteOptions {
  /** Module specifiers to load from another place, e.g. { attnlab: 'file:///…/src/index.ts' }. */
  readonly modules?: Readonly<Record<string, string>>;
  /**
   * Called after each code cell with its index, its outputs and the notebook so far (a run cut by a
   * time limit can still leave the cells it finished).
   */
  readonly onCell?: (index: number, outputs: readonly NotebookOutput[], ms: number, sofar: Notebook) => void;
}

export interface ExecuteResult {
  readonly notebook: Notebook;
  /** Index of the cell that failed, or null when every code cell ran. */
  readonly failedCell: number | null;
}

/** A cell's source as one string (nbformat stores it as a string or a list of lines). */
export function cellSource(cell: NotebookCell): string {
  return Array.isArray(cell.source) ? cell.source.join('') : cell.source;
}

/** Text as nbformat's list of lines, each but the last ending in '\n'. */
function lines(text: string): string[] {
  const parts = text.split('\n');
  return parts.map((p, i) => (i < parts.length - 1 ? `${p}\n` : p)).filter((p) => p !== '');
}

const IMPORT_ALL = /^import\s+\*\s+as\s+([\w$]+)\s+from\s+"([^"]+)";?$/gm;
const IMPORT_NAMED = /^import\s*\{([^}]*)\}\s*from\s+"([^"]+)";?$/gm;
const IMPORT_DEFAULT = /^import\s+([\w$]+)\s+from\s+"([^"]+)";?$/gm;

/** JavaScript the REPL takes: types stripped, static imports as `const … = await import(…)`. */
export async function cellToScript(
  source: string,
  modules: Readonly<Record<string, string>> = {},
): Promise<string> {
  const esbuild = await import('esbuild');
  const { code } = await esbuild.transform(source, {
    loader: 'ts',
    target: 'esnext',
    // Keep imports whose names this cell does not use: later cells do.
    tsconfigRaw: { compilerOptions: { verbatimModuleSyntax: true } },
  });
  const from = (specifier: string) =>
    specifier === 'tslab'
      ? 'globalThis.__notebookTslab'
      : `await import(${JSON.stringify(modules[specifier] ?? specifier)})`;
  return code
    .replace(IMPORT_ALL, (_, name: string, spec: string) => `const ${name} = ${from(spec)};`)
    .replace(IMPORT_NAMED, (_, names: string, spec: string) => {
      const fields = names
        .split(',')
        .map((n) => n.trim())
        .filter((n) => n && !n.startsWith('type '))
        .map((n) => n.replace(/\s+as\s+/, ': '));
      return `const { ${fields.join(', ')} } = ${from(spec)};`;
    })
    .replace(IMPORT_DEFAULT, (_, name: string, spec: string) => `const ${name} = (${from(spec)}).default;`);
}

interface Pending {
  reject: (error: unknown) => void;
}

/** One REPL in this process's global context; its errors come back to the cell that raised them. */
function startRepl(): { server: REPLServer; run: (code: string, name: string) => Promise<unknown> } {
  const server = repl.start({
    input: new PassThrough(),
    output: new PassThrough(),
    useGlobal: true,
    terminal: false,
    prompt: '',
    ignoreUndefined: true,
  });
  let pending: Pending | null = null;
  // The REPL reports a thrown error to its domain (and prints it) instead of to the eval callback.
  const domain = (server as unknown as { _domain: NodeJS.EventEmitter })._domain;
  domain.prependListener('error', (error: unknown) => {
    const p = pending;
    pending = null;
    p?.reject(error);
  });
  const run = (code: string, name: string) =>
    new Promise<unknown>((resolve, reject) => {
      pending = { reject };
      server.eval(code, server.context, name, (error, value) => {
        pending = null;
        if (error) reject(error);
        else resolve(value);
      });
    });
  return { server, run };
}

/** Runs every code cell of `notebook` in order; returns a copy with outputs and execution counts. */
export async function executeNotebook(
  notebook: Notebook,
  options: ExecuteOptions = {},
): Promise<ExecuteResult> {
  const out: Notebook = structuredClone(notebook);
  const { server, run } = startRepl();
  const original = { log: console.log, info: console.info, warn: console.warn, error: console.error };
  const global = globalThis as Record<string, unknown>;
  let outputs: NotebookOutput[] = [];
  const stream =
    (name: 'stdout' | 'stderr') =>
    (...args: unknown[]) => {
      const text = `${args.map((a) => (typeof a === 'string' ? a : inspect(a))).join(' ')}\n`;
      const last = outputs[outputs.length - 1];
      if (last?.output_type === 'stream' && last.name === name) last.text.push(...lines(text));
      else outputs.push({ output_type: 'stream', name, text: lines(text) });
    };
  const data = (mime: string, value: string): void => {
    const encoded = mime.startsWith('image/') ? value : lines(value);
    outputs.push({ output_type: 'display_data', data: { [mime]: encoded }, metadata: {} });
  };
  global.__notebookTslab = {
    display: {
      html: (s: string) => data('text/html', s),
      markdown: (s: string) => data('text/markdown', s),
      text: (s: string) => data('text/plain', s),
      png: (b: Uint8Array) => data('image/png', Buffer.from(b).toString('base64')),
      jpeg: (b: Uint8Array) => data('image/jpeg', Buffer.from(b).toString('base64')),
    },
  };
  let count = 0;
  let failedCell: number | null = null;
  try {
    for (const [index, cell] of out.cells.entries()) {
      if (cell.cell_type !== 'code') continue;
      outputs = [];
      count++;
      const started = performance.now();
      Object.assign(console, {
        log: stream('stdout'),
        info: stream('stdout'),
        warn: stream('stderr'),
        error: stream('stderr'),
      });
      try {
        const script = await cellToScript(cellSource(cell), options.modules);
        const value = await run(script, `cell-${index}.js`);
        if (value !== undefined) {
          outputs.push({
            output_type: 'execute_result',
            data: { 'text/plain': lines(inspect(value)) },
            metadata: {},
            execution_count: count,
          });
        }
      } catch (error) {
        const e = error instanceof Error ? error : new Error(String(error));
        outputs.push({
          output_type: 'error',
          ename: e.name,
          evalue: e.message,
          traceback: lines(e.stack ?? `${e.name}: ${e.message}`),
        });
        failedCell = index;
      } finally {
        Object.assign(console, original);
      }
      cell.outputs = outputs;
      cell.execution_count = count;
      options.onCell?.(index, outputs, performance.now() - started, out);
      if (failedCell !== null) break;
    }
  } finally {
    server.close();
    delete global.__notebookTslab;
  }
  return { notebook: out, failedCell };
}
