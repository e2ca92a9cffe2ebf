/**
 * `attnlab check`: the correctness suite of the tests (src/check/suite.ts: every backend on every
 * available device, each case it supports, against the float64 reference) as a table. Exits 1 when
 * any row fails; a failing row prints the suite's one description (both errors, case, variant).
 */
import type { Command } from 'commander';
import { cudaAvailable } from '../backends/cuda/context.js';
import { IMPLEMENTATIONS, type Implementation } from '../backends/problem.js';
import { splitList } from '../bench/sweep.js';
import type { AttentionCase } from '../check/cases.js';
import { RANDOM_CASES_SEED } from '../check/random-cases.js';
import { runCheck } from '../check/run-check.js';
import { type CheckRow, describeRow, PRECISIONS, suiteCases } from '../check/suite.js';
import { InvalidArgumentError } from '../errors.js';
import type { Device } from '../tensor/storage.js';
import { MAX_SEED, parseInteger } from './numbers.js';
import { renderTable } from './table.js';

type PrecisionName = keyof typeof PRECISIONS;

function list<T extends string>(argument: string, value: string, allowed: (v: string) => boolean): T[] {
  const items = splitList(argument, value);
  for (const item of items) {
    if (!allowed(item))
      throw new InvalidArgumentError(argument, 'a comma-separated list of known names', item);
  }
  return items as T[];
}

export function registerCheckCommand(program: Command): void {
  program
    .command('check')
    .description('Run the correctness suite: every backend against the float64 CPU reference')
    .option('--device <list>', 'devices to check: cpu,cuda (default: all available)')
    .option('--impl <list>', `backends to check (${IMPLEMENTATIONS.join(', ')})`)
    .option(
      '--dtype <list>',
      `precisions (${Object.keys(PRECISIONS).join(', ')}; default: float32 on cpu; bfloat16,float16,float32,tf32 on cuda)`,
    )
    .option('--case <text>', 'only cases whose name contains this text')
    .option('--seed <n>', 'seed for the random inputs (default: time-based, printed)')
    .option('--cases-seed <n>', `seed of the random cases (default ${RANDOM_CASES_SEED}, as the tests)`)
    .option('--json', 'print the rows as JSON')
    .action(
      (o: {
        device?: string;
        impl?: string;
        dtype?: string;
        case?: string;
        seed?: string;
        casesSeed?: string;
        json?: boolean;
      }) => {
        const seed =
          o.seed === undefined ? Date.now() % 1_000_000 : parseInteger('--seed', o.seed, 0, MAX_SEED);
        const casesSeed =
          o.casesSeed === undefined
            ? RANDOM_CASES_SEED
            : parseInteger('--cases-seed', o.casesSeed, 0, MAX_SEED);
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
        const onDevices = devices ?? (cuda.ok ? ['cpu', 'cuda'] : ['cpu']);
        const filter = o.case === undefined ? undefined : matchingCases(o.case, onDevices, casesSeed);
        const rows = runCheck({
          devices,
          backends: o.impl
            ? list<Implementation>('--impl', o.impl, (b) => IMPLEMENTATIONS.includes(b as Implementation))
            : undefined,
          precisions: o.dtype ? list<PrecisionName>('--dtype', o.dtype, (d) => d in PRECISIONS) : undefined,
          filter,
          seed,
          casesSeed,
        });
        if (rows.length === 0) {
          // Only the reference was asked for: it is the oracle, checked against itself it says nothing.
          throw new InvalidArgumentError(
            '--impl',
            'a backend other than the float64 reference',
            String(o.impl),
          );
        }
        const failed = rows.filter((r) => r.status === 'fail');
        if (o.json) {
          process.stdout.write(`${JSON.stringify({ seed, casesSeed, rows }, null, 2)}\n`);
        } else {
          process.stdout.write(`${renderRows(rows)}\n`);
          for (const row of failed) process.stdout.write(`${describeRow(row)}\n`);
          const passed = rows.filter((r) => r.status === 'pass').length;
          const skipped = rows.length - passed - failed.length;
          process.stdout.write(
            `seed ${seed}: ${passed} passed, ${failed.length} failed, ${skipped} skipped (not supported); random cases of --cases-seed ${casesSeed}\n`,
          );
        }
        if (failed.length > 0) process.exitCode = 1;
      },
    );
}

/**
 * A filter keeping the cases whose name contains `text`; matching none of the cases the devices
 * run is an error that lists a few names to choose from.
 */
function matchingCases(text: string, devices: Device[], casesSeed: number): (c: AttentionCase) => boolean {
  const all = [...new Set(devices.flatMap((d) => suiteCases(d, casesSeed)).map((c) => c.name))].map(
    (name) => ({
      name,
    }),
  );
  if (!all.some((c) => c.name.includes(text))) {
    const some = all.slice(0, 4).map((c) => JSON.stringify(c.name));
    throw new InvalidArgumentError(
      '--case',
      `text found in a case name (${all.length} cases, e.g. ${some.join(', ')})`,
      `${JSON.stringify(text)}, which matches none`,
    );
  }
  return (c) => c.name.includes(text);
}

function renderRows(rows: CheckRow[]): string {
  return renderTable(
    ['case', 'backend', 'precision', 'result', 'max |err|', 'bound', 'lse rel err'],
    rows.map((r) => {
      const [output, lse] = r.comparisons;
      return [
        r.case,
        `${r.backend} (${r.device})`,
        r.precision,
        r.status === 'skipped' ? `skipped: ${(r.reason ?? '').slice(0, 40)}` : r.status,
        output ? output.error.toExponential(2) : '',
        output ? output.bound.toExponential(2) : '',
        lse ? lse.error.toExponential(2) : '',
      ];
    }),
  );
}
