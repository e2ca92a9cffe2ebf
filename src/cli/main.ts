/**
 * The `attnlab` command line: one file per command, each adding itself to the program here.
 * Errors attnlab throws on purpose are printed as one clear line and exit 1 (2 for bad usage);
 * anything else is a bug: one line too, with the stack behind ATTNLAB_DEBUG (failure.ts).
 */
import { Command, CommanderError } from 'commander';
import { attnlabCommit } from '../bench/machine.js';
import { config } from '../config.js';
import { packageVersion } from '../version.js';
import { registerBenchCommand } from './bench.js';
import { registerCheckCommand } from './check.js';
import { describeFailure } from './failure.js';
import { registerInfoCommand } from './info.js';
import { registerLabCommand } from './lab.js';
import { refuseEmptyValues, refuseRepeatedOptions } from './options.js';
import { registerReportCommand } from './report.js';
import { registerTuneCommand } from './tune.js';

export function buildProgram(): Command {
  const program = new Command('attnlab')
    .description(
      'Scaled dot-product attention on NVIDIA GPUs from TypeScript: run, check, benchmark, report.',
    )
    .option('-V, --version', 'output the version number (and the commit, in a git checkout)')
    .showHelpAfterError()
    .exitOverride()
    .hook('preAction', (_program, command) => {
      // A bad ATTNLAB_* value is one line before any work, not an error half-way through a sweep.
      if (command.name() !== 'help') config();
      refuseEmptyValues(command);
    });
  // commander's .version() takes its text when the program is built; the commit is looked up (git) only when asked.
  program.on('option:version', () => {
    process.stdout.write(`${versionLine()}\n`);
    throw new CommanderError(0, 'commander.version', versionLine());
  });
  registerInfoCommand(program);
  registerCheckCommand(program);
  registerLabCommand(program);
  registerBenchCommand(program);
  registerReportCommand(program);
  registerTuneCommand(program);
  registerHelpCommand(program);
  for (const command of program.commands) refuseRepeatedOptions(command);
  return program;
}

/** '0.1.0', with the commit where it is known (ATTNLAB_COMMIT, or a git checkout of attnlab itself). */
function versionLine(): string {
  const commit = attnlabCommit();
  return commit === 'unknown' ? packageVersion() : `${packageVersion()} (${commit})`;
}

/** `help [command]`: commander's own answers `help foo` with the general help and no word about foo. */
function registerHelpCommand(program: Command): void {
  program.helpCommand(false);
  program
    .command('help [command]')
    .description('display help for command')
    .action((name: string | undefined) => {
      if (name === undefined) program.help();
      const command = program.commands.find((c) => c.name() === name);
      if (!command) {
        program.error(`error: unknown command '${name}'`, { exitCode: 2, code: 'commander.unknownCommand' });
      }
      command.help();
    });
}

export async function main(argv: string[]): Promise<number> {
  const program = buildProgram();
  try {
    await program.parseAsync(argv, { from: 'user' });
    return process.exitCode === undefined ? 0 : Number(process.exitCode);
  } catch (error) {
    if (error instanceof CommanderError) return error.exitCode === 0 ? 0 : 2;
    process.stderr.write(`${describeFailure(error)}\n`);
    return 1;
  }
}
