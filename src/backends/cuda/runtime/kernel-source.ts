/**
 * Kernel sources: where src/kernels is, the headers a .cu includes (by the name it includes them
 * with, relative to src/kernels, as NVRTC wants them), and the numbered excerpt a CompileError shows.
 */
import { existsSync, readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { config } from '../../../config.js';
import { InvalidArgumentError } from '../../../errors.js';

/** src/kernels, found from this module whether it runs from src/ (tsx) or dist/src/ (built). */
export function kernelsDir(): string {
  const override = config().kernelsDir;
  if (override) return override;
  if (defaultKernelsDir) return defaultKernelsDir;
  const here = dirname(fileURLToPath(import.meta.url));
  const candidates = [join(here, '../../../kernels'), join(here, '../../../../../src/kernels')];
  defaultKernelsDir = candidates.find((c) => existsSync(c)) ?? candidates[0];
  return defaultKernelsDir;
}
let defaultKernelsDir: string | undefined;

/** The source of `file` and of every header it includes (recursively), as NVRTC wants them. */
export function readKernelSources(
  file: string,
  root = kernelsDir(),
): { source: string; headers: Array<[name: string, text: string]> } {
  const path = join(root, file);
  if (!existsSync(path)) throw new InvalidArgumentError('kernel file', `a file under ${root}`, file);
  const source = readFileSync(path, 'utf8');
  const headers = new Map<string, string>();
  const visit = (text: string) => {
    for (const name of quotedIncludes(text)) {
      if (headers.has(name)) continue;
      const headerPath = join(root, name);
      if (!existsSync(headerPath)) continue; // left to the compiler, which names it in its error
      const headerText = readFileSync(headerPath, 'utf8');
      headers.set(name, headerText);
      visit(headerText);
    }
  };
  visit(source);
  return { source, headers: [...headers].sort(([a], [b]) => byCodeUnits(a, b)) };
}

/**
 * Strings in code-unit order: the key's order of headers and defines. Not localeCompare: its first call
 * builds ICU's collator, 6–9 ms of a process's first kernel load (a shipped kernel's included).
 */
export function byCodeUnits(a: string, b: string): number {
  return a < b ? -1 : a > b ? 1 : 0;
}

const isBlank = (c: string) => c === ' ' || c === '\t';

/**
 * The names of `text`'s `#include "name"` lines, in order (`# include "x"` too). A scan with indexOf,
 * not a regular expression: the multiline /^\s*#\s*include…/ runs interpreted on a process's first
 * kernel load, several ms over hopper_fwd.cu's 157 KB of source and headers (the shipped binary's key
 * hashes the same sources, so a shipped kernel's first call pays it too).
 */
export function quotedIncludes(text: string): string[] {
  const names: string[] = [];
  for (let at = text.indexOf('include'); at >= 0; at = text.indexOf('include', at + 7)) {
    // Backwards: blanks, '#', blanks, then the line's start.
    let i = at - 1;
    while (i >= 0 && isBlank(text[i])) i--;
    if (i < 0 || text[i] !== '#') continue;
    i--;
    while (i >= 0 && isBlank(text[i])) i--;
    if (i >= 0 && text[i] !== '\n' && text[i] !== '\r') continue;
    // Forwards: at least one blank, then "name".
    let j = at + 7;
    if (!isBlank(text[j] ?? '')) continue;
    while (isBlank(text[j] ?? '')) j++;
    if (text[j] !== '"') continue;
    const end = text.indexOf('"', j + 1);
    const newline = text.indexOf('\n', j + 1);
    if (end > j + 1 && (newline < 0 || end < newline)) names.push(text.slice(j + 1, end));
  }
  return names;
}

/**
 * The numbered lines around each error the log names (`file(line): error: …`), three either side,
 * the failing line marked with `>`, as CuPy prints them.
 */
export function sourceExcerpt(
  log: string,
  file: string,
  source: string,
  headers: ReadonlyArray<readonly [string, string]> = [],
): string {
  const texts = new Map<string, string>([
    [file, source],
    ...headers.map(([n, t]) => [n, t] as [string, string]),
  ]);
  const parts: string[] = [];
  const seen = new Set<string>();
  for (const match of log.matchAll(/^(.+?)\((\d+)\): (?:catastrophic )?error/gm)) {
    const name = [...texts.keys()].find((k) => match[1].endsWith(k)) ?? file;
    const line = Number(match[2]);
    if (seen.has(`${name}:${line}`)) continue;
    seen.add(`${name}:${line}`);
    const lines = (texts.get(name) ?? '').split('\n');
    const from = Math.max(1, line - 3);
    const to = Math.min(lines.length, line + 3);
    const width = String(to).length;
    parts.push(`${name}:`);
    for (let l = from; l <= to; l++) {
      parts.push(`${l === line ? '>' : ' '} ${String(l).padStart(width)} | ${lines[l - 1]}`);
    }
  }
  return parts.join('\n');
}
