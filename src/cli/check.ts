/**
 * `attnlab check`: the correctness suite of the tests (src/check/suite.ts: every backend on every
 * available device, each case it supports, against the float64 reference) as a table. Exits 1 when
 * any row fails; a failing row prints the suite's one description (both errors, case, variant).
 */
import type { Command } from 'commander';
import { cudaAvailable } from '../backends/cuda/runtime/context.js';
import { IMPLEMENTATIONS, type Implementation } from '../backends/problem.js';
import { BACKENDS } from '../backends/registry.js';
import { initWebgpu } from '../backends/webgpu/runtime.js';
import { DTYPE_ALIASES, splitList } from '../bench/sweep.js';
import type { AttentionCase } from '../check/cases.js';
import { RANDOM_CASES_SEED } from '../check/random-cases.js';
import { runCheckAsync } from '../check/run-check.js';
import { type CheckRow, describeRow, PRECISIONS, suiteCases } from '../check/suite.js';
import { config } from '../config.js';
import { InvalidArgumentError } from '../errors.js';
import { colorEnabled, renderTable } from '../report/terminal.js';
import type { Device } from '../tensor/storage.js';
import { parseOption } from './numbers.js';

type PrecisionName = keyof typeof PRECISIONS;
const DEVICES: readonly Device[] = ['cpu', 'cuda', 'webgpu'];

/**
 * A list option's items as names from `names` (`aliases` maps a short spelling to one), each once;
 * an unknown item is refused with every accepted name.
 */
function list<T extends string>(
  argument: string,
  value: string,
  names: readonly T[],
  aliases: Readonly<Record<string, string>> = {},
): T[] {
  const given = splitList(argument, value);
  const items = given.map((item) => aliases[item.toLowerCase()] ?? item);
  for (const [i, item] of items.entries()) {
    if (!(names as readonly string[]).includes(item)) {
      const short = Object.keys(aliases).filter((a) => (names as readonly string[]).includes(aliases[a]));
      const also = short.length > 0 ? ` (or ${short.join(', ')})` : '';
      throw new InvalidArgumentError(
        argument,
        `a comma-separated list of ${names.join(', ')}${also}`,
        JSON.stringify(given[i]),
      );
    }
  }
  return [...new Set(items)] as T[];
}

/**
 * The backends --impl names, each one that runs on a device being checked: the reference is the
 * oracle (checked against itself it says nothing), and a backend of a device not checked here would
 * give no row at all, so both are refused, saying why, rather than left out of the table.
 */
function checkedBackends(text: string, devices: readonly Device[]): Implementation[] {
  const backends = list<Implementation>('--impl', text, IMPLEMENTATIONS);
  const runnable = BACKENDS.filter((b) => devices.includes(b.device) && b.name !== 'reference');
  const expected = `backends to check on ${devices.join(', ')} (${[...new Set(runnable.map((b) => b.name))].join(', ')})`;
  for (const name of backends) {
    if (runnable.some((b) => b.name === name)) continue;
    const on = [...new Set(BACKENDS.filter((b) => b.name === name).map((b) => b.device))];
    const cuda = cudaAvailable();
    const why =
      name === 'reference'
        ? 'the float64 reference is the oracle every backend is checked against'
        : on.includes('cuda') && !cuda.ok
          ? `${name} needs CUDA, which is not usable here: ${cuda.reason.split(';')[0]}`
          : `${name} runs on ${on.join(', ')}, not checked by --device ${devices.join(',')}`;
    throw new InvalidArgumentError('--impl', expected, `${JSON.stringify(name)} (${why})`);
  }
  return backends;
}

export function registerCheckCommand(program: Command): void {
  program
    .command('check')
    .description('Run the correctness suite: every backend against the float64 CPU reference')
    .option('--device <list>', 'devices to check: cpu,cuda,webgpu (default: cpu, and cuda where available)')
    .option(
      '--impl <list>',
      `backends to check (${IMPLEMENTATIONS.filter((i) => i !== 'reference').join(', ')}; the reference is the oracle)`,
    )
    .option(
      '--dtype <list>',
      `precisions (${Object.keys(PRECISIONS).join(', ')}, or bf16, fp16, f32, f64; default: float32 on cpu; bfloat16,float16,float32,tf32 on cuda)`,
    )
    .option('--case <text>', 'only cases whose name contains this text')
    .option('--seed <n>', 'seed for the random inputs (default: time-based, printed)')
    .option('--cases-seed <n>', `seed of the random cases (default ${RANDOM_CASES_SEED}, as the tests)`)
    .option('--json', 'print the rows as JSON')
    .addHelpText(
      'after',
      '\nLists are comma-separated, each item run once (a repeat is dropped, the first order kept), no empty item.',
    )
    .action(
      async (o: {
        device?: string;
        impl?: string;
        dtype?: string;
        case?: string;
        seed?: string;
        casesSeed?: string;
        json?: boolean;
      }) => {
        const seed = o.seed === undefined ? Date.now() % 1_000_000 : parseOption('check --seed', o.seed);
        const casesSeed =
          o.casesSeed === undefined ? RANDOM_CASES_SEED : parseOption('check --cases-seed', o.casesSeed);
        const devices = o.device !== undefined ? list<Device>('--device', o.device, DEVICES) : undefined;
        const cuda = cudaAvailable();
        if (devices?.includes('cuda') && !cuda.ok) {
          throw new InvalidArgumentError(
            '--device',
            'devices this machine has (cpu)',
            `cuda (not available: ${cuda.reason.split(';')[0]})`,
          );
        }
        if (devices?.includes('webgpu')) {
          // WebGPU is asked for by name only: opening a device prints Dawn's adapter warnings.
          try {
            await initWebgpu({ experimental: config().webgpuExperimental });
          } catch (error) {
            const reason = error instanceof Error ? error.message : String(error);
            throw new InvalidArgumentError(
              '--device',
              'devices this machine has',
              `webgpu (not available: ${reason})`,
            );
          }
        }
        const onDevices: Device[] = devices ?? (cuda.ok ? ['cpu', 'cuda'] : ['cpu']);
        const filter = o.case === undefined ? undefined : matchingCases(o.case, onDevices, casesSeed);
        const rows = await runCheckAsync({
          devices,
          backends: o.impl !== undefined ? checkedBackends(o.impl, onDevices) : undefined,
          precisions:
            o.dtype !== undefined
              ? list('--dtype', o.dtype, Object.keys(PRECISIONS) as PrecisionName[], DTYPE_ALIASES)
              : undefined,
          filter,
          seed,
          casesSeed,
        });
        if (rows.length === 0) {
          // Every selection was checked above; an empty table would still read as a pass.
          throw new InvalidArgumentError(
            '--impl, --device, --dtype and --case',
            'a selection with a row to check',
            'none',
          );
        }
        const failed = rows.filter((r) => r.status === 'fail');
        // The status before the output: a reader that has gone ends the process at the next write.
        if (failed.length > 0) process.exitCode = 1;
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
    // The one colour rule (colorEnabled), not cli-table3's own, which also reads TERM.
    { color: colorEnabled(), align: ['left', 'left', 'left', 'left', 'right', 'right', 'right'] },
  );
}
