/**
 * How the `attnlab` process ends when something goes wrong: never with a Node stack trace. An
 * AttnlabError is one line (it was thrown on purpose and says what to fix); anything else is a bug,
 * also one line, with the stack behind ATTNLAB_DEBUG. A reader that closes the pipe early
 * (`attnlab check | head`) ends the run quietly instead of raising EPIPE.
 */
import { config } from '../config.js';
import { AttnlabError } from '../errors.js';
import { neutraliseControls } from '../results/safe-text.js';
import { systemReason } from './output-path.js';

/** The lines to print for an error that ended a command, without the trailing newline. */
export function describeFailure(error: unknown): string {
  // Messages quote what came (JSON.stringify leaves DEL and the C1 controls, U+0080–U+009F, which
  // include the one-byte CSI, as they are): those reach the terminal as text, not instructions.
  if (error instanceof AttnlabError)
    return `attnlab: ${error.name}: ${clipMiddle(neutraliseControls(error.message))}`;
  // Every file attnlab writes goes through writingTo (output-path.ts); a failed write that reaches here
  // is stdout's or stderr's (`attnlab info > /dev/full`), a fact about the output, not a bug.
  const system = error as NodeJS.ErrnoException;
  if (system?.syscall === 'write' && system.code) {
    return `attnlab: writing the output failed: ${systemReason(error)}`;
  }
  const text = neutraliseControls(error instanceof Error ? `${error.name}: ${error.message}` : String(error));
  const line = `attnlab: unexpected error (a bug in attnlab): ${text.split('\n')[0]}`;
  if (debugging() && error instanceof Error && error.stack) return `${line}\n${error.stack}`;
  return `${line} (ATTNLAB_DEBUG=1 for the stack)`;
}

/** The longest error line printed whole: a message quoting a 100 kB value would fill the screen. */
export const MAX_ERROR_CHARS = 1000;

/**
 * `text` whole when it is short, else its first and last parts around a note of what was left out: the start
 * names the option and what was expected, the end what came and why.
 */
export function clipMiddle(text: string, max = MAX_ERROR_CHARS): string {
  if (text.length <= max) return text;
  const head = Math.floor(max * 0.6);
  const tail = max - head;
  return `${text.slice(0, head)} … (${(text.length - max).toLocaleString('en-US')} characters left out) … ${text.slice(-tail)}`;
}

/** ATTNLAB_DEBUG > 0; false where the variables themselves are bad (that error is printed elsewhere). */
function debugging(): boolean {
  try {
    return config().debug > 0;
  } catch {
    return false;
  }
}

/**
 * For the process entry: EPIPE on stdout or stderr exits at once with the status so far, and an
 * error that escapes every handler (a callback, a stray promise) is printed as describeFailure says.
 */
export function installProcessGuards(): void {
  for (const stream of [process.stdout, process.stderr]) {
    stream.on('error', (error: NodeJS.ErrnoException) => {
      // EIO: the terminal itself has gone (SIGHUP); the run's status stands, as for a closed pipe.
      if (error.code === 'EPIPE' || error.code === 'EIO') process.exit(Number(process.exitCode ?? 0));
      fatal(error);
    });
    // The 'error' event waits for the event loop, which a run that only awaits settled promises (the
    // lab on the CPU) never reaches: `attnlab lab | head -2` ran every section to the end. The
    // failed write marks the stream at once, so the next write after it ends the run.
    const write = stream.write.bind(stream) as (...args: unknown[]) => boolean;
    stream.write = ((...args: unknown[]) => {
      const ok = write(...args);
      const code = (stream.errored as NodeJS.ErrnoException | null)?.code;
      if (code === 'EPIPE' || code === 'EIO') {
        process.exit(Number(process.exitCode ?? 0));
      }
      return ok;
    }) as typeof stream.write;
  }
  process.on('uncaughtException', fatal);
  process.on('unhandledRejection', fatal);
}

function fatal(error: unknown): never {
  try {
    process.stderr.write(`${describeFailure(error)}\n`);
  } catch {
    // stderr itself is gone: nothing left to tell
  }
  process.exit(1);
}
