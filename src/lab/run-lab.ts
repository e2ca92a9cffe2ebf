/**
 * `attnlab lab`: the codelab's sections 2–10 in order, then 11 (forward and backward) beyond it, on
 * this machine's GPU or, without one, on the CPU backends at small sizes. Returns a results file (tables and timed rows) for JSON and HTML.
 */

import { cudaAvailable } from '../backends/cuda/runtime/context.js';
import { resolveCeiling } from '../bench/ceiling.js';
import { makeResults } from '../bench/results.js';
import { config } from '../config.js';
import type { ResultRow, ResultsFile } from '../results/schema.js';
import { backwardSection } from './backward.js';
import { causalSection, createInputs, cudnnSection, fusedSection, gpuCheck, naiveSection } from './basics.js';
import { LabContext, type LabOptions } from './context.js';
import { decodeSection } from './decode.js';
import { fp8Section, teSweep } from './te.js';
import { defaultTiming, headsSection, sweeps } from './timing.js';

/**
 * Runs one section; a failure is printed and kept as a note, and the lab goes on to the next, so
 * one broken backend costs its own section and not the tables and charts of all the others.
 */
async function section(lab: LabContext, name: string, body: () => void | Promise<void>): Promise<void> {
  const signal = lab.options.signal;
  // Sections run synchronously: a turn of the event loop before each is where a stop signal is heard.
  if (signal) await new Promise((resolve) => setImmediate(resolve));
  if (signal?.aborted) return;
  try {
    await body();
  } catch (error) {
    const text = error instanceof Error ? `${error.name}: ${error.message}` : String(error);
    lab.note(`section ${name} failed: ${text}`);
    if (config().debug >= 1 && error instanceof Error) lab.say(error.stack ?? '');
  }
  // Its sweeps stop after their running case: the section's rows are those that finished.
  if (signal?.aborted) lab.note(`section ${name} was stopped part-way by ${String(signal.reason)}`);
  lab.options.onSection?.(results(lab), name);
}

function results(lab: LabContext): ResultsFile {
  return makeResults('lab', {
    rows: lab.rows,
    tables: lab.tables,
    notes: lab.notes,
    ceiling: lab.ceiling,
    sections: lab.sections,
  });
}

/** Runs every section, printing through `options.write`, and returns what was shown as results. */
export async function runLab(options: LabOptions): Promise<ResultsFile> {
  const cuda = cudaAvailable();
  const lab = new LabContext(cuda.ok ? 'cuda' : 'cpu', options);
  await section(lab, '2', () => gpuCheck(lab, cuda.ok ? null : cuda.reason));
  // Sections 3-7 share the inputs of section 3; without them they cannot run.
  await section(lab, '3-7', () => {
    const inputs = createInputs(lab);
    try {
      const naive = naiveSection(lab, inputs);
      fusedSection(lab, inputs, naive);
      cudnnSection(lab, inputs);
      causalSection(lab, inputs);
      if (naive.device === 'cuda') naive.dispose();
    } finally {
      for (const t of [inputs.q, inputs.k, inputs.v]) if (t.device === 'cuda') t.dispose();
    }
  });

  const { ceiling, note } = resolveCeiling();
  lab.ceiling = ceiling;
  if (note && lab.device === 'cuda') lab.note(note);
  await section(lab, '8a', () => defaultTiming(lab));
  await section(lab, '8b-8c', () => sweeps(lab));
  let prefill: ResultRow[] = [];
  await section(lab, '9a', async () => {
    prefill = await headsSection(lab);
  });
  await section(lab, '9b', () => decodeSection(lab, prefill));

  await section(lab, '10a', () => teSweep(lab));
  await section(lab, '10b', () => fp8Section(lab));
  await section(lab, '11', () => backwardSection(lab));

  return results(lab);
}
