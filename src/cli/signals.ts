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

/** Listens for the stop signals; `what` says on stderr what the command does on the first one. */
export function listenForStop(command: string, what: string): StopRequest {
  const controller = new AbortController();
  let received: StopSignal | null = null;
  const handlers = STOP_SIGNALS.map((name) => {
    const handler = () => {
      if (received !== null) process.exit(signalExitCode(name));
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
