/**
 * The worker thread CPU cases are measured in (cpu-worker.ts starts it): it takes one case at a time and
 * answers its row. The case runs synchronously here, so the main thread's event loop stays free to hear a
 * stop signal while it runs.
 */
import { parentPort } from 'node:worker_threads';
import type { CaseRequest } from './cpu-worker.js';
import { measureAttnlabCase } from './measure.js';
import { moduleCall } from './te-calls.js';

parentPort?.on('message', ({ id, c, options, module }: CaseRequest) => {
  // measureAttnlabCase turns every failure into a row; anything else reaching here is a bug, answered as text.
  try {
    const row = measureAttnlabCase(c, { ...options, ...(module ? moduleCall(module, c) : {}) });
    parentPort?.postMessage({ id, row });
  } catch (error) {
    parentPort?.postMessage({
      id,
      error: error instanceof Error ? (error.stack ?? error.message) : String(error),
    });
  }
});
