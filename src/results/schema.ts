/**
 * The results file: what `attnlab bench` and `attnlab lab --out` write and `attnlab report` reads.
 * docs/results-schema.md documents every field; bump RESULTS_SCHEMA_VERSION on any change that an
 * old reader would misread (a renamed or re-unit field), not for added optional fields.
 */
export const RESULTS_SCHEMA = 'attnlab.results';
export const RESULTS_SCHEMA_VERSION = 1;

/** The H200's HBM3e peak by its datasheet, GB/s: what bandwidthPercent is relative to. */
export const HBM_PEAK_GBS = 4800;

/** Who produced a row: attnlab itself or a peer framework run through its Python script. */
export type RowSource = 'attnlab' | 'jax' | 'torch';

/**
 * What a row timed: the forward, the backward alone (the forward's residuals made beforehand), or
 * both in one call. Rows written before this field existed are forward rows.
 */
export type Pass = 'forward' | 'backward' | 'forward+backward';
export const PASSES: readonly Pass[] = ['forward', 'backward', 'forward+backward'];

/**
 * Floating-point work of a pass in units of the forward's: the backward's five matmuls of the
 * forward's size count 2.5× (FlashAttention's convention), forward+backward 3.5×.
 */
export const PASS_FLOPS: Record<Pass, number> = { forward: 1, backward: 2.5, 'forward+backward': 3.5 };

/** How a row's `ms` was measured. */
export type TimingMethod =
  /** CUDA events recorded on the stream around each call (device time). */
  | 'cuda-events'
  /** performance.now() around each call of a CPU backend (host time is device time). */
  | 'performance-now'
  /** Host wall time of a call followed by jax.block_until_ready (the codelab's method). */
  | 'wall-block-until-ready';

/** 'unavailable': a peer's row that its answer did not give in a valid form (the reason says what was wrong). */
export type RowStatus = 'ok' | 'unsupported' | 'error' | 'out-of-memory' | 'unavailable';

/** The implementations each peer framework times, in the order they appear in tables (row.impl). */
export const PEER_IMPLS: Readonly<Record<'jax' | 'torch', readonly string[]>> = {
  jax: ['xla', 'cudnn'],
  torch: ['flash', 'cudnn', 'efficient', 'math'],
};

/**
 * An attnlab row's impl: a backend, or the lab's TransformerEngine-style module (te), with an optional
 * -variant suffix a bench script adds (te-fp8, flash-mma).
 */
export const OWN_IMPL = /^(reference|naive|flash|cudnn|webgpu|te)(-[a-z0-9]+)*$/;

/** One measured (or refused) case. */
export interface ResultRow {
  /** The group of rows one chart compares: 'bench', or the lab's 'default', 'seq', 'batch', 'heads', 'decode', 'fwd-bwd T=<T>'. */
  sweep: string;
  source: RowSource;
  /** The implementation inside its source: attnlab 'naive'…, jax 'xla'/'cudnn', torch 'flash'/'math'…. */
  impl: string;
  /** The series name charts and tables use, e.g. 'attnlab flash bfloat16 causal'. */
  label: string;
  B: number;
  T: number;
  S: number;
  N: number;
  K: number;
  H: number;
  dtype: string;
  causal: boolean;
  /** What was timed; absent means 'forward'. */
  pass?: Pass;
  /** Key and value were a paged cache of blocks of this many tokens behind a shuffled table; absent: dense. */
  blockSize?: number;
  status: RowStatus;
  /** Why the row has no timing (status other than 'ok'). */
  reason?: string;
  /** attnlab: the kernel variant key that ran; peers: the backend they reported. */
  variant?: string;
  timing?: RowTiming;
  /** Floating-point work per call (attentionFlops: 4·B·N·T·S·H, causal halved; × PASS_FLOPS[pass]). */
  flops: number;
  /** flops / median time, in TFLOP/s. */
  tflops?: number;
  /** tflops as a percentage of the results file's matmul ceiling. */
  ceilingPercent?: number;
  /**
   * Memory-bound rows (decoding): bytes moved — the K/V cache rows read once, Q and O — over the
   * median time, in GB/s (10^9 bytes per second).
   */
  bandwidthGBs?: number;
  /** bandwidthGBs as a percentage of the GPU's HBM peak (HBM_PEAK_GBS on the H200). */
  bandwidthPercent?: number;
  /**
   * Context-parallel rows (benchmarks/harnesses/context-parallel.ts): the GPUs the call ran on (1 for a single-GPU call and for the
   * loopback group, whose ranks share one GPU).
   */
  gpus?: number;
  /** Context-parallel rows: the ranks P the sequence was split over (virtual ones for the loopback group). */
  ranks?: number;
  /** Context-parallel rows: the single-GPU call's median time of the same shape over this row's. */
  speedupOverOneGpu?: number;
  /** Context-parallel rows: false on the row timed with the key/value exchange left out (wrong results, the compute alone). */
  exchange?: boolean;
  /** Peak device memory during the timed calls, bytes (null where the source cannot tell). */
  peakMemoryBytes?: number | null;
  /** Largest |output − float64 reference| over the checked elements. */
  maxError?: number | null;
  /** 'full': every output element checked; 'sampled': some query rows of every (b, n). */
  errorCheck?: 'full' | 'sampled' | 'none';
}

/** Median and spread of a set of samples, in the samples' unit. */
export interface SampleSummary {
  readonly median: number;
  readonly p10: number;
  readonly p90: number;
  readonly min: number;
  readonly max: number;
  readonly mean: number;
  /** How many samples the summary is over. */
  readonly count: number;
}

export interface RowTiming {
  method: TimingMethod;
  /** Device time per call, ms. */
  ms: SampleSummary;
  /** Host wall time per call without waiting for the device, ms: the dispatch overhead. */
  hostMs?: SampleSummary;
  /** The first call, ms of wall time: it includes kernel compile or plan build. */
  firstCallMs: number;
  warmup: number;
  /** Distinct input copies cycled through so that inputs do not sit in L2 between calls. */
  inputCopies: number;
  /** Untimed back-to-back calls right before the timed ones (GPU rows; see MeasureOptions.settleMs). */
  settleCalls?: number;
  /**
   * The GPU's power state over the timed calls (attnlab GPU rows where NVML answers, bench/gpu-power.ts): % of
   * the time its power limit held it below its clocks, mean W drawn, the limit.
   */
  /** sampledMs: files before 2026-12-02 have no such field. */
  power?: { cappedPercent: number; meanWatts: number; sampledMs?: number; limitWatts: number };
}

/** A table of strings (the lab's non-timing sections: Q/K/V, causal effect, head shapes). */
export interface ResultTable {
  title: string;
  headers: string[];
  rows: string[][];
  /** What the table shows, in a sentence. */
  note?: string;
}

export interface GpuInfo {
  name: string;
  computeCapability: string;
  memoryBytes: number;
  l2Bytes?: number;
  driver?: string;
  /**
   * The GPU's UUID (cuDeviceGetUuid, as nvidia-smi prints it): rows from two files compare only on one GPU
   * (two H200s read the same decode rows 3% apart: benchmarks/results/h200/decode/2026-12-02-cache-length-row-groups).
   */
  uuid?: string;
  /** The enforced power limit, W, from NVML where the driver's library answers (bench/gpu-power.ts). */
  powerLimitWatts?: number;
  /** SM count and peak memory bandwidth (GB/s): with computeCapability, the device class auto dispatch keys tables by. */
  multiprocessors?: number;
  memoryBandwidthGBs?: number;
}

export interface PeerInfo {
  name: 'jax' | 'torch';
  available: boolean;
  /** Why the peer did not run, when unavailable. */
  reason?: string;
  python?: string;
  /** Package and library versions the peer reported (jax, jaxlib, torch, cudnn…). */
  versions?: Record<string, string>;
}

/** Which suite a results file records, so a table built from it keeps its provenance as data. */
export interface SuiteInfo {
  /** The suite's name (bench/suites.ts), e.g. 'forward'. */
  name: string;
  /** The GPU slug the file is filed under (results/suite-path.ts), e.g. 'h200'; 'cpu' without a GPU. */
  gpu: string;
  /** The suite's shorter list (`--quick`) rather than the whole suite. */
  quick: boolean;
  /** Options given beside --suite that replaced the suite's own values, as typed (e.g. '--seq 64'). */
  overrides: string[];
}

export interface CeilingInfo {
  /** Dense matmul TFLOP/s that percentages are relative to. */
  tflops: number;
  dtype: string;
  /** How it was obtained: 'given' (--ceiling), 'cublaslt', 'torch-matmul', or one of those + ' (cached)'. */
  source: string;
}

/**
 * One section of a lab run as the terminal showed it: its numbered title, the explanations printed in
 * it, and which tables (by title) and timed sweeps (by sweep id) it produced. The HTML report lays a
 * lab out by these.
 */
export interface LabSection {
  title: string;
  text: string[];
  tables: string[];
  sweeps: string[];
}

export interface ResultsFile {
  schema: typeof RESULTS_SCHEMA;
  schemaVersion: number;
  /** 'bench' or 'lab'. */
  kind: 'bench' | 'lab';
  createdAt: string;
  /** The command line that produced the file. */
  command: string;
  attnlab: { version: string; commit: string };
  machine: {
    hostname: string;
    platform: string;
    cpu: string;
    node: string;
    device: 'cuda' | 'cpu';
    gpu?: GpuInfo;
    /** Loaded library versions, e.g. { cudnn: '9.19.0', nvrtc: '13.0' }. */
    libraries: Record<string, string>;
    /**
     * The ATTNLAB_* variables set that change what runs or its timing (config.ts, RUN_SETTING_VARIABLES), as
     * given, e.g. { ATTNLAB_DEPENDENT_LAUNCH: '1' }; absent when none is set (the library's defaults).
     */
    settings?: Record<string, string>;
  };
  /** The named suite the file records (`attnlab bench --suite`); absent for other runs. */
  suite?: SuiteInfo;
  ceiling: CeilingInfo | null;
  peers: PeerInfo[];
  rows: ResultRow[];
  tables: ResultTable[];
  /** Messages worth keeping with the numbers (skipped sizes, missing peers, CPU-only mode). */
  notes: string[];
  /** The lab's sections in order (absent in bench files and in lab files written before sections existed). */
  sections?: LabSection[];
}
