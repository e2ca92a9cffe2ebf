/**
 * What the user typed, as against commander's defaults, and the one check every option value gets
 * before any command runs: commander hands `--impl ''` to the action as '', which a truthiness test
 * then reads as "not given", so an empty value would be dropped without a word.
 */
import type { Command, Option } from 'commander';
import { InvalidArgumentError } from '../errors.js';

/** The option spelled `long` ('--batch'); a typo here is a bug, so it throws. */
function optionOf(command: Command, long: string): Option {
  const option = command.options.find((o) => o.long === long);
  if (!option) throw new Error(`${command.name()} has no option ${long}`);
  return option;
}

/** Whether `long` was given on the command line (not left at its default). */
export function givenOnCommandLine(command: Command, long: string): boolean {
  return command.getOptionValueSource(optionOf(command, long).attributeName()) === 'cli';
}

/** The value `long` holds (its default where it was not given). */
export function optionValue(command: Command, long: string): unknown {
  return command.getOptionValue(optionOf(command, long).attributeName());
}

/** Refuses an option or argument given an empty (or blank) value: `--out ''` names no folder. */
export function refuseEmptyValues(command: Command): void {
  command.registeredArguments.forEach((argument, i) => {
    const values = [command.processedArgs[i]].flat();
    if (values.some((v) => typeof v === 'string' && v.trim() === '')) {
      throw new InvalidArgumentError(`<${argument.name()}>`, 'non-empty values', JSON.stringify(values));
    }
  });
  for (const option of command.options) {
    if (!option.long || !givenOnCommandLine(command, option.long)) continue;
    const value = optionValue(command, option.long);
    if (typeof value === 'string' && value.trim() === '') {
      const what = /<([^>]+)>/.exec(option.flags)?.[1] ?? 'value';
      throw new InvalidArgumentError(option.long, `a non-empty <${what}>`, JSON.stringify(value));
    }
  }
}

/**
 * Refuses an option that takes a value given twice: commander keeps the last value without a word,
 * so `--impl flash --impl reference` timed reference alone and `--seq 16 --seq 32` one length.
 * (Flags without a value, `--json --json`, say the same thing twice and stay accepted.)
 */
export function refuseRepeatedOptions(command: Command): void {
  for (const option of command.options) {
    if (!option.long || !(option.required || option.optional)) continue;
    const long = option.long;
    let first: unknown;
    let seen = false;
    command.on(`option:${option.name()}`, (value: unknown) => {
      if (seen) {
        throw new InvalidArgumentError(
          long,
          `${long} once (a second value would replace the first)`,
          `${JSON.stringify(first)} and then ${JSON.stringify(value)}`,
        );
      }
      [first, seen] = [value, true];
    });
  }
}
