/**
 * How the `attnlab` process ends when something goes wrong: never with a Node stack trace. An
 * AttnlabError is one line (it was thrown on purpose and says what to fix); anything else is a bug,
 * also one line, with the stack behind ATTNLAB_DEBUG. A reader that closes the pipe early
 * (`attnlab check | head`) ends the run quietly instead of raising EPIPE.
 */
import { config } from '../config.js';
import { AttnlabError } from '../errors.js';

/** The lines to print for an error that ended a command, without the trailing newline. */
export function describeFailure(error: unknown): string {
  if (error instanceof AttnlabError) return `attnlab: ${error.name}: ${error.message}`;
  const text = error instanceof Error ? `${error.name}: ${error.message}` : String(error);
  const line = `attnlab: unexpected error (a bug in attnlab): ${text.split('\n')[0]}`;
  if (debugging() && error instanceof Error && error.stack) return `${line}\n${error.stack}`;
  return `${line} (ATTNLAB_DEBUG=1 for the stack)`;
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
      if (error.code === 'EPIPE') process.exit(Number(process.exitCode ?? 0));
      fatal(error);
    });
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
