/**
 * CPU cases measured off the main thread. A CPU case runs synchronously for as long as its calls take (minutes
 * for a large one): on the main thread, the event loop is blocked all that time, so a SIGTERM or a Ctrl-C is not
 * heard until the case ends, and a second signal cannot quit either (its handler waits behind the first). In a
 * worker thread the main thread only waits for the answer: the first signal is heard at once and stops the run
 * after this case, the second quits at once (the worker ends with the process).
 *
 * Only cases long enough to matter go to the worker: starting it costs a module load (~1 s under tsx on a
 * 2-core machine), more than a whole small case.
 */
import { existsSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { Worker } from 'node:worker_threads';
import type { ResultRow } from '../results/schema.js';
import type { MeasureOptions } from './measure.js';
import type { BenchCase } from './sweep.js';
import type { ModuleCall } from './te-calls.js';

/**
 * Flops per call from which a CPU case runs in the worker: at the CPU flash backend's 0.13 GFLOP/s on the
 * 2-core build machine, 1e8 flops is ~0.8 s a call, and a case makes at least 12 calls (first, 1 warm-up, 10
 * timed): ~10 s in which a signal would go unheard on the main thread. Below it a case ends within a few
 * seconds, and the turn of the event loop between cases hears the signal.
 */
export const WORKER_MIN_FLOPS = 1e8;

/** What the worker is sent: the case, the options that can cross threads (no functions), the module call. */
export interface CaseRequest {
  readonly id: number;
  readonly c: BenchCase;
  readonly options: Omit<Partial<MeasureOptions>, 'call'>;
  readonly module?: ModuleCall;
}

/**
 * A worker running case-worker: the compiled .js beside this file (dist/), else the .ts source through tsx,
 * which a worker must register itself (Node 20 does not carry the parent's `--import tsx` hooks into workers).
 */
function startWorker(): Worker {
  const js = new URL('./case-worker.js', import.meta.url);
  if (existsSync(fileURLToPath(js))) return new Worker(js);
  const ts = new URL('./case-worker.ts', import.meta.url).href;
  const tsx = import.meta.resolve('tsx/esm/api');
  const boot = `import(${JSON.stringify(tsx)}).then((api) => { api.register(); return import(${JSON.stringify(ts)}); });`;
  return new Worker(boot, { eval: true });
}

/** One worker thread, started at the first case it is given, measuring one case at a time. */
export class CpuCaseWorker {
  #worker: Worker | null = null;
  #next = 0;
  readonly #pending = new Map<number, { resolve: (row: ResultRow) => void; reject: (e: Error) => void }>();

  /** The row of case `c`, measured in the worker. */
  measure(
    c: BenchCase,
    options: Omit<Partial<MeasureOptions>, 'call'>,
    module?: ModuleCall,
  ): Promise<ResultRow> {
    const worker = this.#start();
    const id = this.#next++;
    // Held while a case runs: the answer is what the main thread waits for (an idle worker holds nothing).
    worker.ref();
    return new Promise((resolve, reject) => {
      this.#pending.set(id, {
        resolve: (row) => {
          worker.unref();
          resolve(row);
        },
        reject,
      });
      worker.postMessage({ id, c, options, ...(module ? { module } : {}) } satisfies CaseRequest);
    });
  }

  /** Ends the worker (a case still running in it is abandoned). */
  async close(): Promise<void> {
    const worker = this.#worker;
    this.#worker = null;
    if (worker) await worker.terminate();
  }

  #start(): Worker {
    if (this.#worker) return this.#worker;
    const worker = startWorker();
    worker.on('message', (answer: { id: number; row?: ResultRow; error?: string }) => {
      const waiting = this.#pending.get(answer.id);
      this.#pending.delete(answer.id);
      if (answer.row) waiting?.resolve(answer.row);
      else waiting?.reject(new Error(`the CPU case worker failed: ${answer.error}`));
    });
    const fail = (error: Error) => {
      for (const waiting of this.#pending.values()) waiting.reject(error);
      this.#pending.clear();
      this.#worker = null;
    };
    worker.on('error', fail);
    worker.on('exit', (code) => {
      if (this.#pending.size > 0) fail(new Error(`the CPU case worker exited with ${code} during a case`));
      this.#worker = null;
    });
    this.#worker = worker;
    return worker;
  }
}
