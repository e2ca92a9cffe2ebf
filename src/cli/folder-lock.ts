/**
 * One writer per output folder: `attnlab lab --out DIR` holds `DIR/.attnlab.lock` while it runs, so a second
 * lab into the same folder is refused at once instead of both writing lab.json and lab.html over each other.
 *
 * The lock is a file created with O_EXCL (`wx`: the create fails when it exists, atomically, on one machine),
 * holding the owner's pid, the command and the time. It is removed when the run ends, by any path: the
 * command's own end, an error, a stop signal's exit, a second signal's `process.exit`. A run killed by SIGKILL
 * leaves it behind: a lock whose pid is no longer a live process (or that holds no pid) is stale, and the next
 * run takes it over, saying so.
 */
import { closeSync, mkdirSync, openSync, readFileSync, unlinkSync, writeSync } from 'node:fs';
import { join } from 'node:path';
import { InvalidArgumentError } from '../errors.js';
import { neutraliseLine } from '../results/safe-text.js';
import { systemReason } from './output-path.js';

export const LOCK_FILE = '.attnlab.lock';

export interface FolderLock {
  /** Removes the lock file (idempotent; only the file this run made). */
  readonly release: () => void;
  /** A line saying a stale lock was taken over, or null. */
  readonly tookOver: string | null;
}

/** Whether `pid` is a live process: signal 0 tests without sending (EPERM: alive, another user's). */
function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (error) {
    return (error as NodeJS.ErrnoException).code === 'EPERM';
  }
}

/** The owner a lock file names: its pid (NaN when unreadable) and its text, for the error. */
function owner(path: string): { pid: number; text: string } {
  try {
    const text = readFileSync(path, 'utf8').slice(0, 200);
    const pid = Number(/^pid (\d+)$/m.exec(text)?.[1]);
    return { pid, text };
  } catch {
    return { pid: Number.NaN, text: '' };
  }
}

/**
 * Takes `folder`'s lock for `command`, making the folder first; refuses, naming `option`, while another live
 * process holds it. Two tries: the second after removing a stale lock (its owner dead).
 */
export function lockFolder(option: string, folder: string, command: string): FolderLock {
  const path = join(folder, LOCK_FILE);
  // The folder passed checkOutputDir first (which refuses /proc and /sys, where a recursive mkdir loops).
  try {
    mkdirSync(folder, { recursive: true });
  } catch (error) {
    throw new InvalidArgumentError(
      option,
      'a folder attnlab can lock',
      `${neutraliseLine(folder)}: ${systemReason(error)}`,
    );
  }
  let tookOver: string | null = null;
  for (let attempt = 0; ; attempt++) {
    let fd: number;
    try {
      fd = openSync(path, 'wx');
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code !== 'EEXIST' || attempt > 0) {
        throw new InvalidArgumentError(
          option,
          'a folder attnlab can lock',
          `${neutraliseLine(path)}: ${systemReason(error)}`,
        );
      }
      const held = owner(path);
      if (Number.isSafeInteger(held.pid) && held.pid > 0 && alive(held.pid) && held.pid !== process.pid) {
        throw new InvalidArgumentError(
          option,
          'a folder no other attnlab run is writing',
          `${neutraliseLine(folder)}, in use by process ${held.pid} (${neutraliseLine(held.text.split('\n')[1] ?? '')}; its lock: ${neutraliseLine(path)})`,
        );
      }
      tookOver = `took over a stale lock ${neutraliseLine(path)} (${Number.isNaN(held.pid) ? 'no pid in it' : `process ${held.pid} has ended`})`;
      try {
        unlinkSync(path);
      } catch {
        // Another run removed it first: the next create decides.
      }
      continue;
    }
    writeSync(fd, `pid ${process.pid}\n${command} since ${new Date().toISOString()}\n`);
    closeSync(fd);
    break;
  }
  let held = true;
  const release = () => {
    if (!held) return;
    held = false;
    process.off('exit', release);
    // Only our own lock: a stale-lock takeover by another run after ours was removed is theirs.
    if (owner(path).pid === process.pid) {
      try {
        unlinkSync(path);
      } catch {
        // Gone already (the folder removed by hand): nothing to release.
      }
    }
  };
  // process.exit (a second stop signal, an uncaught error) runs 'exit' listeners: the lock goes with the run.
  process.on('exit', release);
  return { release, tookOver };
}
