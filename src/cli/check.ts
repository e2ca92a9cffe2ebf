/**
 * `attnlab check`: the correctness matrix (every backend on every available device against the float64
 * reference) as a table. Exits 1 when any row fails.
 */
import type { Command } from 'commander';
import { cudaAvailable } from '../backends/cuda/context.js';
import { IMPLEMENTATIONS, type Implementation } from '../backends/problem.js';
import { type AttentionCase, CASES } from '../check/cases.js';
import { type CheckRow, runCheck } from '../check/run-check.js';
import { InvalidArgumentError } from '../errors.js';
import { type FloatDType, isFloatDType } from '../tensor/dtype.js';
import type { Device } from '../tensor/storage.js';
import { MAX_SEED, parseInteger } from './numbers.js';
import { renderTable } from './table.js';

function list<T extends string>(argument: string, value: string, allowed: (v: string) => boolean): T[] {
  const items = value.split(',').map((s) => s.trim());
  for (const item of items) {
    if (!allowed(item))
      throw new InvalidArgumentError(argument, 'a comma-separated list of known names', item);
  }
  return items as T[];
}

export function registerCheckCommand(program: Command): void {
  program
    .command('check')
    .description('Run every backend against the float64 CPU reference over the correctness matrix')
    .option('--device <list>', 'devices to check: cpu,cuda (default: all available)')
    .option('--impl <list>', `backends to check (${IMPLEMENTATIONS.join(', ')})`)
    .option('--dtype <list>', 'dtypes (default: float32 on cpu; bfloat16,float16,float32 on cuda)')
    .option('--case <text>', 'only cases whose name contains this text')
    .option('--seed <n>', 'seed for the random inputs (default: time-based, printed)')
    .option('--json', 'print the rows as JSON')
    .action(
      (o: {
        device?: string;
        impl?: string;
        dtype?: string;
        case?: string;
        seed?: string;
        json?: boolean;
      }) => {
        const seed =
          o.seed === undefined ? Date.now() % 1_000_000 : parseInteger('--seed', o.seed, 0, MAX_SEED);
        const devices = o.device
          ? list<Device>('--device', o.device, (d) => d === 'cpu' || d === 'cuda')
          : undefined;
        const cuda = cudaAvailable();
        if (devices?.includes('cuda') && !cuda.ok) {
          throw new InvalidArgumentError(
            '--device',
            'devices this machine has (cpu)',
            `cuda (not available: ${cuda.reason.split(';')[0]})`,
          );
        }
        const cases = o.case === undefined ? undefined : matchingCases(o.case);
        const rows = runCheck({
          devices,
          backends: o.impl
            ? list<Implementation>('--impl', o.impl, (b) => IMPLEMENTATIONS.includes(b as Implementation))
            : undefined,
          dtypes: o.dtype
            ? list<FloatDType>('--dtype', o.dtype, (d) => isFloatDType(d as FloatDType))
            : undefined,
          cases,
          seed,
        });
        if (rows.length === 0) {
          // Only the reference was asked for: it is the oracle, checked against itself it says nothing.
          throw new InvalidArgumentError(
            '--impl',
            'a backend other than the float64 reference',
            String(o.impl),
          );
        }
        const failed = rows.filter((r) => r.status === 'fail').length;
        if (o.json) {
          process.stdout.write(`${JSON.stringify({ seed, rows }, null, 2)}\n`);
        } else {
          process.stdout.write(`${renderRows(rows)}\n`);
          const passed = rows.filter((r) => r.status === 'pass').length;
          const unsupported = rows.length - passed - failed;
          process.stdout.write(
            `seed ${seed}: ${passed} passed, ${failed} failed, ${unsupported} not supported\n`,
          );
        }
        if (failed > 0) process.exitCode = 1;
      },
    );
}

/** The cases whose name contains `text`; none is an error that lists a few names to choose from. */
function matchingCases(text: string): AttentionCase[] {
  const found = CASES.filter((c) => c.name.includes(text));
  if (found.length === 0) {
    const some = CASES.slice(0, 4).map((c) => JSON.stringify(c.name));
    throw new InvalidArgumentError(
      '--case',
      `text found in a case name (${CASES.length} cases, e.g. ${some.join(', ')})`,
      `${JSON.stringify(text)}, which matches none`,
    );
  }
  return found;
}

function renderRows(rows: CheckRow[]): string {
  return renderTable(
    ['case', 'backend', 'dtype', 'result', 'max |err|', 'bound'],
    rows.map((r) => [
      r.case,
      `${r.backend} (${r.device})`,
      r.dtype,
      r.status === 'unsupported' ? `n/a: ${r.detail.slice(0, 40)}` : r.status,
      r.error === undefined ? '' : r.error.toExponential(2),
      r.bound === undefined ? '' : r.bound.toExponential(2),
    ]),
  );
}
