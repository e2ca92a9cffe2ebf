/**
 * The signals that ask a command to stop: Ctrl-C (SIGINT), a scheduler, a container stop or a CI time limit
 * (SIGTERM), a closed terminal (SIGHUP). Each is handled alike: the command stops at its next safe point, saves
 * what finished, marked partial with how far it got, and exits 128 + the signal's number, as a shell reports a
 * command a signal ended. A second signal quits at once.
 */
import { constants } from 'node:os';

export const STOP_SIGNALS = ['SIGINT', 'SIGTERM', 'SIGHUP'] as const;
export type StopSignal = (typeof STOP_SIGNALS)[number];

/** 128 + the signal's number: 130 for SIGINT, 143 for SIGTERM, 129 for SIGHUP. */
export function signalExitCode(signal: StopSignal): number {
  return 128 + constants.signals[signal];
}

export interface StopRequest {
  /** Aborted at the first stop signal, its reason the signal's name. */
  readonly signal: AbortSignal;
  /** The signal that arrived, or null. */
  readonly received: () => StopSignal | null;
  /** Removes the handlers (the command has finished its work). */
  readonly dispose: () => void;
}

/** What must happen however the command ends, a second signal's immediate end included (a lab's folder lock). */
const quitCleanups = new Set<() => void>();

/** Adds `cleanup` to what a second signal runs before it ends the process; returns its removal. */
export function onQuit(cleanup: () => void): () => void {
  quitCleanups.add(cleanup);
  return () => {
    quitCleanups.delete(cleanup);
  };
}

/**
 * Ends the process now, as `name` would have without a handler: the cleanups first, then the signal itself
 * with its default action restored, which a shell reports as 128 + its number. process.exit would also run
 * every native library's exit handlers (the CUDA driver's teardown of its contexts among them: 3.4 s after a
 * second SIGTERM on an H100 under load), which a second signal, meant to end the run now, does not wait for.
 */
function quitAtOnce(name: StopSignal): never {
  for (const cleanup of quitCleanups) {
    try {
      cleanup();
    } catch {
      // A cleanup that fails must not keep the process alive.
    }
  }
  process.removeAllListeners(name);
  process.kill(process.pid, name);
  // Still here (the signal ignored by whoever started this process): the ordinary exit.
  process.exit(signalExitCode(name));
}

/** Listens for the stop signals; `what` says on stderr what the command does on the first one. */
export function listenForStop(command: string, what: string): StopRequest {
  const controller = new AbortController();
  let received: StopSignal | null = null;
  const handlers = STOP_SIGNALS.map((name) => {
    const handler = () => {
      if (received !== null) quitAtOnce(name);
      received = name;
      controller.abort(name);
      // SIGHUP says the terminal has gone: a line written to it now would fail, and the results file says it all.
      if (name !== 'SIGHUP')
        process.stderr.write(`\nattnlab: ${command}: ${name}: ${what} (a second signal quits at once)\n`);
    };
    process.on(name, handler);
    return [name, handler] as const;
  });
  return {
    signal: controller.signal,
    received: () => received,
    dispose: () => {
      for (const [name, handler] of handlers) process.off(name, handler);
    },
  };
}
