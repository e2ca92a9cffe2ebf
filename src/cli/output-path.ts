/**
 * Output paths (`--out`, `--json`, `--html`, `-o`) checked before any work starts, so that a run of
 * minutes does not end in a write error, and a bad path is one line: the option, the path and why.
 *
 * Why a probe and not `fs.access`: as root (CI, containers) `access(W_OK)` says yes to almost
 * everything, while creating a file is the question we need answered. Why /proc and /sys are named
 * first: Node's `mkdirSync(p, { recursive: true })` under /proc loops forever (mkdir answers ENOENT
 * for a parent that exists), which is how `--out /proc/x` used to hang.
 */
import { closeSync, mkdirSync, openSync, realpathSync, statSync, unlinkSync } from 'node:fs';
import { dirname, resolve } from 'node:path';
import { InvalidArgumentError } from '../errors.js';
import { BIDI_CONTROLS, neutraliseLine } from '../results/safe-text.js';

/** Kernel filesystems where results cannot be written, with what they are. */
const PSEUDO_FILESYSTEMS: readonly [string, string][] = [
  ['/proc', 'the kernel’s process filesystem'],
  ['/sys', 'the kernel’s device filesystem'],
];

/** Checks that `path` can be created or overwritten as a file; throws InvalidArgumentError if not. */
export function checkOutputFile(option: string, path: string): void {
  refuseDash(option, path);
  const absolute = resolve(path);
  refusePseudo(option, path, absolute);
  refuseLongNames(option, path, absolute);
  // resolve() drops a trailing slash, which the write does not: `--json new/` failed as EISDIR after the run.
  if (/[/\\]\.?$/.test(path)) fail(option, 'a file path', path, `${path} ends in a folder separator`);
  const existing = statOrNull(absolute, option, path);
  if (existing) {
    if (existing.isDirectory()) fail(option, 'a file path', path, `${path} is a folder`);
    // A FIFO is written only once a reader opens it: `report -o fifo` waited forever at the end.
    const pipe = existing.isFIFO() ? 'a FIFO (named pipe)' : existing.isSocket() ? 'a socket' : '';
    if (pipe) {
      fail(
        option,
        'a file path',
        path,
        `${path} is ${pipe}; attnlab writes whole files, to a file or device`,
      );
    }
    // A link to /proc: name that, rather than the EINVAL its write gives after the run.
    refusePseudo(option, path, realpathOr(absolute));
    // r+ opens for writing without truncating: the check leaves an existing file as it was.
    probe(option, path, () => closeSync(openSync(absolute, 'r+')));
    return;
  }
  checkCreatable(option, path, dirname(absolute));
}

/**
 * Refuses an output `path` that is one of `others` (other outputs, or inputs: `report a.json -o
 * a.json` would replace its input by HTML). Paths are the same when they resolve alike, or name one
 * file through a link.
 */
export function checkDistinctPaths(option: string, path: string, others: readonly Output[]): void {
  const clash = others.find((other) => samePath(path, other.path));
  if (clash) {
    fail(option, 'a path that no other option or input names', path, `${clash.option} names it too`);
  }
}

/** A path named by an option (or by an argument, where `option` says which). */
export interface Output {
  readonly option: string;
  readonly path: string;
}

/**
 * The first of `outputs` that names a file an earlier one names (alike once resolved, or one file through a
 * link), with that earlier one; null when all are distinct. One stat per path and two maps: linear in the paths.
 */
export function firstRepeated(outputs: readonly Output[]): { path: string; first: Output } | null {
  const byPath = new Map<string, Output>();
  const byFile = new Map<string, Output>();
  for (const output of outputs) {
    const absolute = resolve(output.path);
    const stat = statOrNull(output.path);
    const file = stat === null ? null : `${stat.dev}:${stat.ino}`;
    const first = byPath.get(absolute) ?? (file === null ? undefined : byFile.get(file));
    if (first) return { path: output.path, first };
    byPath.set(absolute, output);
    if (file !== null) byFile.set(file, output);
  }
  return null;
}

function samePath(a: string, b: string): boolean {
  if (resolve(a) === resolve(b)) return true;
  const [sa, sb] = [statOrNull(a), statOrNull(b)];
  return sa !== null && sb !== null && sa.dev === sb.dev && sa.ino === sb.ino;
}

/** A file name without a folder (`--name`): no separator, not `.` or `..`, so it stays in --out. */
export function checkFileName(option: string, name: string): void {
  // It also names the rows' group, printed in tables and chart titles: a control there drives the terminal.
  // biome-ignore lint/suspicious/noControlCharactersInRegex: finding control characters is the point
  if (/[\u0000-\u001f\u007f-\u009f]/.test(name)) {
    throw new InvalidArgumentError(option, 'a name without control characters', JSON.stringify(name));
  }
  // A bidirectional override shows the name reversed from it on (a\u202Enosj.exe reads aexe.json).
  if (BIDI_CONTROLS.test(name)) {
    throw new InvalidArgumentError(
      option,
      'a name without bidirectional controls (U+202A-U+202E, U+2066-U+2069, U+200E, U+200F, U+061C)',
      neutraliseLine(JSON.stringify(name)),
    );
  }
  if (name.trim() === '' || /[/\\]/.test(name) || name === '.' || name === '..') {
    throw new InvalidArgumentError(
      option,
      'a name without / or \\ that is not . or ..',
      JSON.stringify(name),
    );
  }
}

/**
 * Creates `base`, or `base-2`, `base-3`, … where the name is taken, exclusively (mkdir fails on an existing
 * folder, so two runs never get the same one), and returns the one it made.
 */
export function createFreshFolder(option: string, base: string): string {
  checkOutputDir(option, base);
  mkdirSync(dirname(resolve(base)), { recursive: true });
  for (let n = 1; n <= 1000; n++) {
    const path = n === 1 ? base : `${base}-${n}`;
    try {
      mkdirSync(path);
      return path;
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code !== 'EEXIST') {
        fail(option, 'a folder attnlab can create', path, systemReason(error));
      }
    }
  }
  return fail(option, 'a folder name not yet taken', base, `${base} and ${base}-2 … ${base}-1000 all exist`);
}

/** Checks that `path` is a folder files can be written into, or one that can be created. */
export function checkOutputDir(option: string, path: string): void {
  refuseDash(option, path);
  const absolute = resolve(path);
  refusePseudo(option, path, absolute);
  refuseLongNames(option, path, absolute);
  const existing = statOrNull(absolute, option, path);
  if (existing && !existing.isDirectory()) {
    fail(option, 'a folder attnlab can write', path, `${path} is a file, not a folder`);
  }
  checkCreatable(option, path, absolute, 'a folder attnlab can write');
}

/**
 * `folder` (or its nearest existing ancestor, where the missing folders would be made) must be a
 * folder in which a file can be created: a temporary file is created there and removed.
 */
function checkCreatable(
  option: string,
  path: string,
  folder: string,
  expected = 'a file path attnlab can write',
): void {
  let ancestor = folder;
  while (!statOrNull(ancestor, option, path)) {
    const up = dirname(ancestor);
    if (up === ancestor) break;
    ancestor = up;
  }
  const stat = statOrNull(ancestor, option, path);
  if (stat && !stat.isDirectory()) fail(option, expected, path, `${ancestor} is a file, not a folder`);
  // A symbolic link can lead into /proc: name that, rather than the error number it would give.
  refusePseudo(option, path, realpathOr(ancestor));
  const probeFile = resolve(ancestor, `.attnlab-write-check-${process.pid}-${Date.now()}`);
  probe(
    option,
    path,
    () => {
      closeSync(openSync(probeFile, 'wx'));
      unlinkSync(probeFile);
    },
    ancestor,
    expected,
  );
}

/** `-` is stdout to most commands; here it made a file named `-` in the current folder, unsaid. */
function refuseDash(option: string, path: string): void {
  if (path === '-')
    fail(option, 'a file path', path, 'attnlab writes no results to stdout; ./- names a file called -');
}

/** Linux's NAME_MAX and PATH_MAX, in bytes: a longer name is refused by every call that takes it. */
const NAME_MAX = 255;
const PATH_MAX = 4095;

/**
 * Refuses a path whose names the file system cannot hold. The probe of checkCreatable writes a short
 * name in the nearest existing folder, so a 300-byte --name passed it and failed as ENAMETOOLONG
 * only when the results were written, after the run.
 */
function refuseLongNames(option: string, path: string, absolute: string): void {
  const long = absolute.split('/').find((name) => Buffer.byteLength(name) > NAME_MAX);
  if (long !== undefined) {
    const bytes = Buffer.byteLength(long);
    fail(option, 'a path attnlab can write', path, `a name of ${bytes} bytes; at most ${NAME_MAX} fit`);
  }
  const bytes = Buffer.byteLength(absolute);
  if (bytes > PATH_MAX) {
    fail(option, 'a path attnlab can write', path, `${bytes} bytes in all; at most ${PATH_MAX} fit`);
  }
}

function refusePseudo(option: string, path: string, absolute: string): void {
  for (const [root, what] of PSEUDO_FILESYSTEMS) {
    if (absolute === root || absolute.startsWith(`${root}/`)) {
      fail(option, 'a path on a disk', path, `${root} is ${what}: results cannot be written there`);
    }
  }
}

function probe(
  option: string,
  path: string,
  attempt: () => void,
  where = path,
  expected = 'a path attnlab can write',
): void {
  try {
    attempt();
  } catch (error) {
    fail(option, expected, path, `cannot write in ${where}: ${systemReason(error)}`);
  }
}

/** 'permission denied (EACCES)' from a Node system error, without its call and path. */
export function systemReason(error: unknown): string {
  const e = error as NodeJS.ErrnoException;
  const reasons: Record<string, string> = {
    EACCES: 'permission denied',
    EPERM: 'operation not permitted',
    EROFS: 'read-only filesystem',
    ENOSPC: 'no space left on the device',
    ENOTDIR: 'a part of the path is a file, not a folder',
    EISDIR: 'it is a folder',
    ENOENT: 'no such file or folder',
    ENAMETOOLONG: 'a name too long for the file system',
    ELOOP: 'a loop of symbolic links',
  };
  if (e?.code && reasons[e.code]) return `${reasons[e.code]} (${e.code})`;
  return e?.code ?? (error instanceof Error ? error.message : String(error));
}

function fail(option: string, expected: string, path: string, why: string): never {
  throw new InvalidArgumentError(option, expected, `${JSON.stringify(path)} (${why})`);
}

/**
 * The file at `path`, or null where there is none. Given the option, a path that cannot be followed
 * (a loop of symbolic links) is refused: taken as absent, it failed as ELOOP after the run.
 */
function statOrNull(path: string, option?: string, shown = path) {
  try {
    return statSync(path);
  } catch (error) {
    if (option && (error as NodeJS.ErrnoException).code === 'ELOOP') {
      fail(option, 'a path attnlab can write', shown, `${path}: ${systemReason(error)}`);
    }
    return null;
  }
}

function realpathOr(path: string): string {
  try {
    return realpathSync(path);
  } catch {
    return path;
  }
}

/**
 * Runs `write` (which writes `path`); a system error on the way (a full disk, a folder removed
 * during the run) becomes the same one-line error as a path refused up front, not a Node stack.
 */
export function writingTo<T>(option: string, path: string, write: () => T): T {
  try {
    return write();
  } catch (error) {
    if (!(error as NodeJS.ErrnoException)?.code) throw error;
    fail(option, 'a path attnlab can write', path, `writing failed: ${systemReason(error)}`);
  }
}
