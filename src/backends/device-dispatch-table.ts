/**
 * What decides a backend's speed on a GPU, as auto dispatch keys its tables: the architecture
 * (compute capability: which kernels exist — the Hopper wgmma kernel needs sm_90a), the SM count,
 * the memory-bandwidth class, and the library versions (cuDNN picks its engines per version). A
 * recorded table applies to every GPU of its architecture, so an H100 (sm_90, 132 SMs, 3.35 TB/s)
 * follows the table recorded on the H200 (sm_90, 132 SMs, 4.8 TB/s) rather than the registry order;
 * where tables of the same class or the same GPU exist, they come first.
 *
 * `auto` decides in three steps, and says which one did (DecisionSource):
 * 1. a calibrated entry: `attnlab tune` (or ATTNLAB_TUNE=auto) timed the backends on this very GPU,
 *    driver and libraries (calibrated-dispatch-table.ts);
 * 2. a recorded table of the same architecture (dispatch-table.ts, decode-dispatch-table.ts);
 * 3. the model: the registry's priority order (cudnn, flash, naive), cuDNN first because it runs on
 *    every architecture from sm_80 with engines tuned per GPU, and attnlab's kernels lead only where a
 *    table measured them leading.
 */

/** A GPU as the dispatch tables see it. */
export interface DeviceClass {
  /** The name the driver reports, e.g. 'NVIDIA H100 80GB HBM3'. */
  readonly gpu: string;
  /** 'major.minor', e.g. '9.0'. */
  readonly computeCapability: string;
  /** null where the record does not say (results files before it was recorded). */
  readonly multiprocessors: number | null;
  /** Peak memory bandwidth in GB/s, or null where unknown. */
  readonly memoryBandwidthGBs: number | null;
  /** cuDNN's version, e.g. '9.19.0', or null where not loaded. */
  readonly cudnn: string | null;
}

/** Which step decided the order `auto` took. */
export type DecisionSource = 'calibrated' | 'recorded' | 'model';

/** How near a recorded table's GPU is to this one; higher is nearer, 0 is another architecture. */
export type DeviceMatch = 0 | 1 | 2 | 3;

/**
 * The memory-bandwidth class: half-octaves of GB/s (H100 SXM 3352 → 3.5, H200 4916 → 4.5 in TB/s of the
 * class's centre): two GPUs of one class differ in bandwidth by at most √2.
 */
export function bandwidthClass(gbs: number | null): number | null {
  if (gbs === null || !(gbs > 0)) return null;
  return Math.round(Math.log2(gbs / 1000) * 2) / 2;
}

/**
 * How near `recorded` is to `device`: 3 the same GPU name, 2 the same architecture, SM count and
 * bandwidth class, 1 the same architecture, 0 another (the table does not apply).
 */
export function deviceMatch(recorded: DeviceClass, device: DeviceClass): DeviceMatch {
  if (recorded.computeCapability !== device.computeCapability) return 0;
  if (recorded.gpu === device.gpu) return 3;
  const sameSms = recorded.multiprocessors !== null && recorded.multiprocessors === device.multiprocessors;
  const a = bandwidthClass(recorded.memoryBandwidthGBs);
  const sameBandwidth = a !== null && a === bandwidthClass(device.memoryBandwidthGBs);
  return sameSms && sameBandwidth ? 2 : 1;
}

/** The words for a match, for `attnlab info` and ATTNLAB_DEBUG lines. */
export function matchWords(match: DeviceMatch, recorded: DeviceClass): string {
  const arch = `sm_${recorded.computeCapability.replace('.', '')}`;
  if (match === 3) return `recorded on this GPU (${recorded.gpu})`;
  if (match === 2)
    return `recorded on ${recorded.gpu}, same architecture (${arch}), SM count and bandwidth class`;
  return `recorded on ${recorded.gpu}, same architecture (${arch})`;
}

/**
 * Of `tables`, those that apply to `device`: the nearest match only (a table of this GPU hides one of
 * its architecture), with that match; none when no table shares the architecture.
 */
export function nearestTables<T extends { readonly device: DeviceClass }>(
  tables: readonly T[],
  device: DeviceClass,
): { tables: T[]; match: DeviceMatch } {
  let best: DeviceMatch = 0;
  for (const t of tables) best = Math.max(best, deviceMatch(t.device, device)) as DeviceMatch;
  if (best === 0) return { tables: [], match: 0 };
  return { tables: tables.filter((t) => deviceMatch(t.device, device) === best), match: best };
}

/** The model's words: what `auto` follows where neither a calibrated entry nor a recorded table speaks. */
export function modelWords(registryOrder: readonly string[]): string {
  return `model: registry order (${registryOrder.join(', ')})`;
}
