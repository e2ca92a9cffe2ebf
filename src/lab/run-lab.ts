/**
 * `attnlab lab`: the codelab's sections 2–10 in order, on this machine's GPU or, without one, on the
 * CPU backends at small sizes. Returns a results file (tables and timed rows) for JSON and HTML.
 */
import { cudaAvailable } from '../backends/cuda/context.js';
import { resolveCeiling } from '../bench/ceiling.js';
import { makeResults } from '../bench/results.js';
import type { ResultsFile } from '../bench/schema.js';
import { causalSection, createInputs, cudnnSection, fusedSection, gpuCheck, naiveSection } from './basics.js';
import { LabContext, type LabOptions } from './context.js';
import { fp8Section, loadTe, teSweep } from './te.js';
import { defaultTiming, headsSection, sweeps } from './timing.js';

/** Runs every section, printing through `options.write`, and returns what was shown as results. */
export async function runLab(options: LabOptions): Promise<ResultsFile> {
  const cuda = cudaAvailable();
  const lab = new LabContext(cuda.ok ? 'cuda' : 'cpu', options);
  gpuCheck(lab, cuda.ok ? null : cuda.reason);
  const inputs = createInputs(lab);
  const naive = naiveSection(lab, inputs);
  fusedSection(lab, inputs, naive);
  cudnnSection(lab, inputs);
  causalSection(lab, inputs);
  for (const t of [naive, inputs.q, inputs.k, inputs.v]) if (t.device === 'cuda') t.dispose();

  const { ceiling, note } = resolveCeiling();
  lab.ceiling = ceiling;
  if (note && lab.device === 'cuda') lab.note(note);
  await defaultTiming(lab);
  await sweeps(lab);
  await headsSection(lab);

  const loaded = await loadTe();
  const te = 'te' in loaded ? loaded.te : null;
  await teSweep(lab, te, 'reason' in loaded ? loaded.reason : null);
  await fp8Section(lab, te);

  return makeResults('lab', { rows: lab.rows, tables: lab.tables, notes: lab.notes, ceiling: lab.ceiling });
}
