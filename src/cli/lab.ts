/**
 * `attnlab lab`: the codelab as a command — attention from scratch, the fused kernel, cuDNN, the
 * causal mask, timings, sweeps, MHA/GQA/MQA, the TE-style module and FP8 — with tables and charts in
 * the terminal, and JSON + HTML with --out.
 */
import { join } from 'node:path';
import type { Command } from 'commander';
import { InvalidArgumentError } from '../errors.js';
import { runLab } from '../lab/run-lab.js';
import { writeReport } from '../report/write.js';
import { saveResults } from '../results/files.js';
import type { ResultsFile } from '../results/schema.js';

/** Adds `attnlab lab` to the program. */
export function registerLabCommand(program: Command): void {
  program
    .command('lab')
    .description(
      "Run the attention codelab's sections 2-10 on this machine (GPU, or CPU backends at small sizes)",
    )
    .option('--out <dir>', 'write <dir>/lab.json (results) and <dir>/lab.html (report with charts)')
    .option('--quick', 'shorter sweeps: sequence length up to 1024 on a GPU, 128 on the CPU')
    .option('--budget-ms <ms>', 'timed-call budget per measured case', '200')
    .addHelpText(
      'after',
      `
Sections: 2 GPU check · 3 Q/K/V · 4 naive · 5 fused vs naive · 6 forced cuDNN · 7 causal mask ·
8 timing at B=4,T=128,N=8,H=64, sequence sweep 64..16384 (where memory allows), batch sweep 1..16 ·
9 MHA/GQA/MQA and KV-cache bytes · 10 TE-style module and FP8 (when src/te/ and an sm_90 GPU exist).
Without a GPU: 'reference' plays the naive implementation and 'flash' the fused one, at small sizes.

Example:
  attnlab lab --out bench/results/h200`,
    )
    .action(async (options: { out?: string; quick?: boolean; budgetMs: string }) => {
      const budgetMs = Number(options.budgetMs);
      if (!(budgetMs > 0))
        throw new InvalidArgumentError('--budget-ms', 'a positive number of ms', options.budgetMs);
      const color = Boolean(process.stdout.isTTY) && !process.env.NO_COLOR;
      const out = options.out;
      const save = (results: ResultsFile) => {
        if (!out) return;
        saveResults(join(out, 'lab.json'), results);
        writeReport([{ name: 'lab', results }], { htmlPath: join(out, 'lab.html'), title: 'attnlab lab' });
      };
      const results = await runLab({
        quick: options.quick ?? false,
        budgetMs,
        color,
        write: (text) => process.stdout.write(`${text}\n`),
        onSection: save,
      });
      if (!out) return;
      save(results);
      process.stdout.write(`\nresults: ${join(out, 'lab.json')}\nreport:  ${join(out, 'lab.html')}\n`);
    });
}
