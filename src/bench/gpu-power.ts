/**
 * The GPU's power state over a row's timed calls, from NVML's counters (backends/cuda/ffi/nvml.ts) read before
 * the first timed call and after the last one finished: the share of that time the power limit held the GPU
 * below its clocks, and the mean power drawn.
 *
 * Why: back to back at full memory bandwidth an H200 sits at its 700 W limit and lowers its SM clock to
 * 1.2–1.9 GHz; a kernel doing more work per byte then reads less (flash decode at K=4 with a tile of padding:
 * 4.14 TB/s a call against 4.39 with the host hidden, 75–83% of nvidia-smi's samples power-capped), and of four
 * H200s on one day two never reached the limit (benchmarks/results/h200/decode/2026-12-02-1m-tokens-k8-k4). A row that records
 * how long it was capped says which state its number belongs to.
 *
 * Counters, not samples: NVML's violation time (ns held below clocks by power, with the host µs it was read
 * at) and total energy (mJ) are cumulative, so two readings bracket the calls with no sampling thread. But NVML
 * refreshes them only every ~100 ms (H200, benchmarks/results/h200/decode/2026-12-02-1m-tokens-k1-multicast: read every ~0.5 ms over
 * 0.6 s of GPU work, both changed together at 73, 171, 271, 371, 471 and 571 ms, never backwards): a window
 * covers NVML's refreshes around it (`sampledMs`), off the calls' own span by up to ~100 ms at each end. A
 * window under POWER_MIN_WINDOW_MS has no reading: with no refresh inside it the counters do not move (one run:
 * a ~1 ms bench row read a mean of 0 W), and with one the violation clock may have moved while the energy
 * counter had not (a ~1 ms row read under 30 W). Where NVML, the device or a counter is missing (no
 * driver library, a GPU that does not report them), rows go without and `powerProbeReason()` says why.
 */

import {
  enforcedPowerLimitWatts,
  nvmlDevice,
  type PowerCounters,
  readPowerCounters,
} from '../backends/cuda/ffi/nvml.js';
import { getCudaContext } from '../backends/cuda/runtime/context.js';
import { gpuUuid } from './gpu-uuid.js';

/** The power state over a timed window (results schema: rows[].timing.power). */
export interface PowerWindow {
  /** % of the window the power limit held the GPU below its application clocks (NVML_PERF_POLICY_POWER). */
  readonly cappedPercent: number;
  /** Mean power drawn, W (the energy counter's difference over NVML's time between its two refreshes). */
  readonly meanWatts: number;
  /** NVML's time from its last refresh before the window to its last inside it, ms: what the numbers cover. */
  readonly sampledMs: number;
  /** The enforced power limit, W. */
  readonly limitWatts: number;
}

/** The shortest window read: at least two of NVML's ~100 ms refreshes fall inside it. */
export const POWER_MIN_WINDOW_MS = 250;

/**
 * The window between readings `a` and `b`, `hostMs` apart on the host clock, or null when it is shorter than
 * POWER_MIN_WINDOW_MS, NVML did not refresh its counters between them (its referenceTime did not advance) or
 * a counter went backwards (a driver reload). Both numbers are over NVML's own time between the two
 * refreshes; the share is clamped to [0, 100].
 */
export function powerBetween(
  a: PowerCounters,
  b: PowerCounters,
  hostMs: number,
  limitWatts: number,
): PowerWindow | null {
  if (!(hostMs >= POWER_MIN_WINDOW_MS)) return null;
  if (b.referenceUs <= a.referenceUs || b.powerViolationNs < a.powerViolationNs || b.energyMj < a.energyMj)
    return null;
  const sampledMs = Number(b.referenceUs - a.referenceUs) / 1000;
  const capped = (100 * Number(b.powerViolationNs - a.powerViolationNs)) / (sampledMs * 1e6);
  return {
    cappedPercent: Math.min(100, Math.max(0, capped)),
    meanWatts: Number(b.energyMj - a.energyMj) / sampledMs,
    sampledMs,
    limitWatts,
  };
}

/** Reads the current GPU's counters; `start()` returns the function that ends the window. */
export interface PowerProbe {
  readonly limitWatts: number;
  start(): () => PowerWindow | null;
}

/** Probes by CUDA ordinal (null: NVML did not answer for that device), and why the last one failed. */
const probes = new Map<number, PowerProbe | null>();
let probeReason = '';

/**
 * The probe of attnlab's current CUDA device (found in NVML by its UUID), made once per device and process;
 * null where NVML or the counters are not there (powerProbeReason says why). Nothing here throws.
 */
export function gpuPowerProbe(): PowerProbe | null {
  const ordinal = getCudaContext().properties.ordinal;
  const known = probes.get(ordinal);
  if (known !== undefined) return known;
  let made: PowerProbe | null = null;
  try {
    const uuid = gpuUuid(ordinal);
    if (!uuid) throw new Error('the driver gave no UUID for the device');
    const device = nvmlDevice(uuid);
    const limitWatts = enforcedPowerLimitWatts(device);
    readPowerCounters(device); // a GPU without the counters fails here, not in a row
    made = {
      limitWatts,
      start() {
        const before = readPowerCounters(device);
        const t0 = performance.now();
        return () => {
          try {
            return powerBetween(before, readPowerCounters(device), performance.now() - t0, limitWatts);
          } catch {
            return null;
          }
        };
      },
    };
  } catch (error) {
    probeReason = error instanceof Error ? error.message.split('\n')[0] : String(error);
  }
  probes.set(ordinal, made);
  return made;
}

/** Why gpuPowerProbe() gave null ('' before it was asked or where it worked). */
export function powerProbeReason(): string {
  return probeReason;
}
