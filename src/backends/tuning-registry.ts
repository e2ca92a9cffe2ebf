/**
 * Calibration on the device: this GPU's class and calibration key, its calibrated table (read once
 * from the cache folder), and the timing of real backends on a problem, with CUDA events around each
 * call on attnlab's stream. registry.ts and backward-registry.ts ask it before the recorded tables;
 * `attnlab tune` and ATTNLAB_TUNE=auto calibrate through it.
 */
import { readdirSync } from 'node:fs';
import { config } from '../config.js';
import { packageVersion } from '../version.js';
import {
  CALIBRATION_FORMAT,
  type CalibratedEntry,
  type CalibratedTable,
  type CalibrationKey,
  type Contender,
  calibrate,
  calibrationFile,
  calibrationFilePrefix,
  describeProblem,
  loadCalibration,
  saveCalibration,
  shapeClass,
  type TunedOperation,
  withEntries,
} from './calibrated-dispatch-table.js';
import { CU_EVENT_DEFAULT, cu, outBigInt } from './cuda/ffi/driver.js';
import { loadLibrary } from './cuda/ffi/libraries.js';
import { nv } from './cuda/ffi/nvrtc.js';
import { formatCudaVersion, formatLibraryVersion, getCudaContext } from './cuda/runtime/context.js';
import type { DeviceClass } from './device-dispatch-table.js';
import type { AttentionProblem } from './problem.js';

interface DeviceState {
  readonly device: DeviceClass;
  /** Worked out on first read (it loads NVRTC for its version). */
  readonly key: CalibrationKey;
  readonly file: string;
  table: CalibratedTable;
}

/** Per device ordinal: read once (a cuDNN version probe and a file read, ~1 ms), then kept. */
const states = new Map<number, DeviceState>();
/** Bumped whenever a calibrated table changes in memory: what registry.ts's remembered decisions check. */
let generation = 0;

/** The calibrated tables' generation: a decision made under another one may be stale. */
export function calibrationGeneration(): number {
  return generation;
}

function state(): DeviceState {
  const { device: ordinal, properties: p } = getCudaContext();
  const known = states.get(ordinal);
  if (known) return known;
  const cudnn = probe(() => {
    const { lib } = loadLibrary('cudnn');
    return formatLibraryVersion(Number(lib.func('size_t cudnnGetVersion()')()));
  });
  const device: DeviceClass = {
    gpu: p.name,
    computeCapability: `${p.computeCapability.major}.${p.computeCapability.minor}`,
    multiprocessors: p.multiprocessorCount,
    memoryBandwidthGBs: p.memoryBandwidthGBs ?? null,
    cudnn,
  };
  const dir = config().dispatchCacheDir;
  // The key names NVRTC's version, and reading it loads NVRTC (~9 ms on an H100): it is worked out only
  // where a file of this GPU exists to be read, or when a table is saved. A process with no calibrated file
  // (and shipped kernels) never loads NVRTC for its dispatch.
  let key: CalibrationKey | undefined;
  const keyOf = (): CalibrationKey => {
    key ??= {
      gpu: p.name,
      uuid: probe(() => {
        const bytes = new Uint8Array(16);
        cu().cuDeviceGetUuid_v2(bytes, ordinal);
        return Array.from(bytes, (b) => b.toString(16).padStart(2, '0')).join('');
      }),
      computeCapability: device.computeCapability,
      multiprocessors: p.multiprocessorCount,
      memoryBandwidthGBs: device.memoryBandwidthGBs,
      driver: `CUDA ${formatCudaVersion(p.driverVersion)}`,
      cudnn,
      nvrtc: probe(() => nv().version),
      attnlab: packageVersion(),
    };
    return key;
  };
  const made: DeviceState = {
    device,
    get key() {
      return keyOf();
    },
    get file() {
      return calibrationFile(dir, keyOf());
    },
    table: hasCalibrationFile(dir, p.name)
      ? loadCalibration(calibrationFile(dir, keyOf()), keyOf())
      : emptyTable(keyOf),
  };
  states.set(ordinal, made);
  generation++;
  return made;
}

/** An empty table whose key is worked out when it is first read (a save). */
function emptyTable(keyOf: () => CalibrationKey): CalibratedTable {
  return {
    format: CALIBRATION_FORMAT,
    get key() {
      return keyOf();
    },
    entries: {},
  };
}

/** Whether `dir` holds a calibrated file of a GPU of this name (any versions). */
function hasCalibrationFile(dir: string, gpu: string): boolean {
  const prefix = calibrationFilePrefix(gpu);
  try {
    return readdirSync(dir).some((name) => name.startsWith(prefix) && name.endsWith('.json'));
  } catch {
    return false;
  }
}

function probe(read: () => string): string | null {
  try {
    return read();
  } catch {
    return null;
  }
}

/** Reads the current GPU's calibrated file again (another process, or `attnlab tune --reset`, wrote it). */
export function reloadCalibration(): CalibratedTable {
  const s = state();
  s.table = loadCalibration(s.file, s.key);
  generation++;
  return s.table;
}

/** Empties the current GPU's calibrated table in memory (`attnlab tune --reset`; saved at its end). */
export function resetCalibration(): void {
  const s = state();
  s.table = { ...s.table, entries: {} };
  generation++;
}

/** The current GPU as the dispatch tables key it. */
export function currentDeviceClass(): DeviceClass {
  return state().device;
}

/** The current GPU's calibrated table and the file it lives in. */
export function currentCalibration(): { readonly file: string; readonly table: CalibratedTable } {
  const s = state();
  return { file: s.file, table: s.table };
}

/** The calibrated entry for `p` on the current GPU, or null (none, or ATTNLAB_TUNE=0). */
export function calibratedEntry(
  operation: TunedOperation,
  p: AttentionProblem,
): { readonly shapeClass: string; readonly entry: CalibratedEntry } | null {
  if (config().tune === 'off') return null;
  const shape = shapeClass(operation, p);
  const entry = state().table.entries[shape];
  return entry ? { shapeClass: shape, entry } : null;
}

/** A backend's call on a problem, returning what it made (disposed after timing). */
export interface Candidate {
  readonly name: string;
  run(): ReadonlyArray<{ dispose(): void } | null | undefined>;
}

let events: { start: bigint; end: bigint } | null = null;

/** One call's device time in ms: events on attnlab's stream around it, then wait for the end. */
function timeCall(candidate: Candidate): number {
  const d = cu();
  events ??= {
    start: outBigInt((s) => d.cuEventCreate(s, CU_EVENT_DEFAULT)),
    end: outBigInt((s) => d.cuEventCreate(s, CU_EVENT_DEFAULT)),
  };
  const { stream } = getCudaContext();
  d.cuEventRecord(events.start, stream);
  const made = candidate.run();
  d.cuEventRecord(events.end, stream);
  d.cuEventSynchronize(events.end);
  const out = new Float32Array(1);
  d.cuEventElapsedTime(out, events.start, events.end);
  for (const tensor of made) tensor?.dispose();
  return out[0];
}

/**
 * Times `candidates` on `p` within `budgetMs` (calibrated-dispatch-table.ts, `calibrate`), records the
 * entry under p's shape class in the current GPU's table and saves the file (when `save`).
 */
export function calibrateOnDevice(
  operation: TunedOperation,
  p: AttentionProblem,
  candidates: readonly Candidate[],
  budgetMs: number,
  save = true,
): { readonly shapeClass: string; readonly entry: CalibratedEntry } {
  const contenders: Contender[] = candidates.map((c) => ({ name: c.name, timeOnce: () => timeCall(c) }));
  const timed = calibrate(contenders, { budgetMs });
  const entry: CalibratedEntry = { ...timed, measured: describeProblem(p), at: new Date().toISOString() };
  const shape = shapeClass(operation, p);
  const s = state();
  s.table = withEntries(s.table, { [shape]: entry });
  generation++;
  if (save) saveCalibration(s.file, s.table);
  return { shapeClass: shape, entry };
}

/** Saves the current GPU's table (after calibrateOnDevice calls with save = false). */
export function saveCurrentCalibration(): string {
  const s = state();
  saveCalibration(s.file, s.table);
  return s.file;
}
