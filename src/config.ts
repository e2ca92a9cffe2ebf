/**
 * The one reader of attnlab's environment: every ATTNLAB_* variable is parsed here into a typed
 * setting, and every other module asks config(). The variables are read once, at the first call
 * (not at import, so a program or test may set them after importing attnlab); a test or tool that
 * changes them later calls reloadConfig(). docs/guide/configuration.md documents each one,
 * and a CPU test (test/unit/config.test.ts) checks that the table, this file and src/ agree.
 */
import { homedir } from 'node:os';
import { join } from 'node:path';
import { InvalidArgumentError } from './errors.js';

/** The libraries found through ATTNLAB_<LIB> (a file, or a folder to look in), before any search. */
export const LIBRARY_VARIABLES = {
  cuda: 'ATTNLAB_LIBCUDA',
  nvrtc: 'ATTNLAB_NVRTC',
  cublasLt: 'ATTNLAB_CUBLASLT',
  cudnn: 'ATTNLAB_CUDNN',
  /** NCCL, for context-parallel attention across GPUs (backends/cuda/ffi/nccl.ts). */
  nccl: 'ATTNLAB_NCCL',
  /** NVML, the driver's management library: the GPU's power state beside bench rows (ffi/nvml.ts). */
  nvml: 'ATTNLAB_NVML',
} as const;
export type ConfiguredLibrary = keyof typeof LIBRARY_VARIABLES;

export type CudnnGraphChoice = 'composite' | 'unified';
export type FlashKernelChoice = 'wgmma' | 'mma';
/** The backward's loops: wgmma (256 threads), wgmma-ws (a producer warpgroup beside them), mma.sync. */
export type FlashBackwardKernelChoice = 'wgmma' | 'wgmma-ws' | 'mma';
/** The wgmma backward's deterministic dQ: adds in a fixed order of key blocks, or the loop without dQ and the dQ pass. */
export type FlashBackwardDeterministicChoice = 'ordered' | 'pass';
export type FlashBackwardDbiasChoice = 'add' | 'store';
export type FlashBackwardScoreGradChoice = 'score' | 'output';
/** The producer-warpgroup backward's dQ split by keys: with the warpgroups' turns ('1') or alone ('keys'). */
export type FlashBackwardPingPongChoice = '0' | '1' | 'keys';
export type DecodeKernelChoice = 'heads' | 'rows' | 'tma';
/** ATTNLAB_TUNE: 'auto' calibrates a shape class the first time it is seen; 'off' ignores calibrated tables. */
export type TuneMode = 'use' | 'auto' | 'off';
/** Which decode launches are programmatic dependents (ATTNLAB_DEPENDENT_LAUNCH: 1, splits, combine, 0; unset: auto). */
export type DependentLaunchChoice = 'auto' | 'all' | 'splits' | 'combine' | 'off';

/** The ATTNLAB_* variables that exist for experiments, read here and nowhere else. */
export interface ExperimentalKnobs {
  /** ATTNLAB_FLASH_TILES, e.g. '128x64x4': the flash kernel's tiles for every head dim (benchmarks). */
  readonly flashTiles: string | null;
  /** ATTNLAB_FLASH_BWD_TILES, e.g. '128x128x8': the fused flash backward's keys×queries×warps (benchmarks). */
  readonly flashBackwardTiles: string | null;
  /**
   * ATTNLAB_FLASH_BWD_KERNEL=wgmma|wgmma-ws|mma: on sm_90a, run the fused flash backward's dK/dV loop on
   * wgmma (hopper/hopper_bwd.cu) where it applies — wgmma-ws with its loads on a producer warpgroup —
   * or on mma.sync; unset follows HOPPER_BACKWARD_DEFAULT_HEAD_DIMS (backward-variant.ts).
   */
  readonly flashBackwardKernel: FlashBackwardKernelChoice | null;
  /**
   * ATTNLAB_FLASH_BWD_DET=ordered|pass: with `deterministic: true` on the wgmma loops, add dQ in a fixed order
   * of key blocks (hopper/bwd_dq_order.cuh, the default) or run the loop without dQ and the mma.sync dQ pass.
   */
  readonly flashBackwardDeterministic: FlashBackwardDeterministicChoice | null;
  /**
   * The wgmma backward loops' step position by increments, whole tiles' copies without predicates, and the
   * producer-warpgroup loop's 32 / 232 register split (docs/internals/backward.md, v6 and v7): on by default;
   * ATTNLAB_FLASH_BWD_LEAN=0 builds the previous code, for comparisons.
   */
  readonly flashBackwardLean: boolean;
  /**
   * ATTNLAB_FLASH_BWD_WIDE=1|pair|halves: on sm_90a, the fused flash backward takes padded head dims 160–256 on
   * the wgmma loop for them (hopper/bwd_dkdv_wide_sm90.cuh); `pair` with both dQ passes in flight at once,
   * `halves` that and dV, dK over a warpgroup's own queries issued before the exchange. Off unless set: both
   * modules pass the GPU suite; the sanitizers have run on the 256-column one only.
   */
  readonly flashBackwardWide: boolean;
  /** ATTNLAB_FLASH_BWD_WIDE=pair or halves (above). */
  readonly flashBackwardWidePair: boolean;
  /** ATTNLAB_FLASH_BWD_WIDE=halves (above). */
  readonly flashBackwardWideHalves: boolean;
  /**
   * ATTNLAB_FLASH_BWD_DBIAS=add|store: where no bias element is shared by two positions, the wgmma loop adds
   * dBias into a float32 accumulator (add) or stores it once an element in the bias's dtype (store; unset:
   * store, faster on an H100).
   */
  readonly flashBackwardDbias: FlashBackwardDbiasChoice | null;
  /**
   * ATTNLAB_FLASH_BWD_SCORE_GRAD=score|output: a score modifier's gradient on the wgmma loop from the
   * recomputed raw score (score) or, where the generated source allows, from the modified score taken
   * from P (output; unset: output, faster on an H100).
   */
  readonly flashBackwardScoreGrad: FlashBackwardScoreGradChoice | null;
  /**
   * ATTNLAB_FLASH_BWD_PINGPONG=0|1|keys: the producer-warpgroup backward loop (wgmma-ws) with dQ split by keys,
   * so that its two consumer warpgroups need not exchange dS and run out of phase; `1` also makes them take
   * turns issuing Sᵀ and dPᵀ (hopper/bwd_dkdv_sm90_ws.cuh), `0` neither. Unset follows
   * HOPPER_BACKWARD_PINGPONG_HEAD_DIMS (backward-variant.ts: at D=64, where it measured faster); never with
   * `deterministic: true`, whose ordered dQ adds need one adding warp an element.
   */
  readonly flashBackwardPingPong: FlashBackwardPingPongChoice | null;
  /**
   * The producer warpgroup of wgmma-ws cleans non-finite Q and dO elements only in steps whose statistics flag
   * a row, instead of scanning every step (hopper/bwd_dkdv_sm90_ws.cuh): on by default;
   * ATTNLAB_FLASH_BWD_WS_FLAGGED=0 builds the every-step scan, for comparisons.
   */
  readonly flashBackwardWsFlagged: boolean;
  /**
   * The wgmma loops' float32 dQ staging and workspace with the chunk permutation that spreads each
   * half-warp's 64-bit stores over all banks (hopper/bwd_dq_accum.cuh), for problems without hooks (a bias, a
   * mask, modifiers, a block mask: their loop keeps the plain staging until the GPU suite has run it so): on
   * by default; ATTNLAB_FLASH_BWD_DQ_SWIZZLE=0 builds the unpermuted staging, for comparisons.
   */
  readonly flashBackwardDqSwizzle: boolean;
  /**
   * The wgmma loops (without hooks) read the first row statistics of Pᵀ and dSᵀ before waiting for Sᵀ and
   * dPᵀ (hopper/bwd_dkdv_sm90.cuh, stats_early): on by default; ATTNLAB_FLASH_BWD_STATS_EARLY=0 turns it off.
   */
  readonly flashBackwardStatsEarly: boolean;
  /**
   * ATTNLAB_FLASH_KERNEL=wgmma|mma: on sm_90a, run the cases the Hopper kernel covers on it (wgmma)
   * or keep every case on the mma.sync kernel; unset follows HOPPER_BY_DEFAULT (hopper-variant.ts).
   */
  readonly flashKernel: FlashKernelChoice | null;
  /**
   * ATTNLAB_DECODE_KERNEL=heads|rows|tma: the flash backend's decode kernel where it can run (every kv
   * head of a token row per block, flash_decode_heads.cu; one kv head per block, flash_decode.cu; the
   * heads kernel's TMA form, flash_decode_ws.cu); unset follows decode.ts's measured choice.
   */
  readonly decodeKernel: DecodeKernelChoice | null;
  /** ATTNLAB_CUDNN_GRAPH=composite|unified: the cuDNN SDPA graph to build where both can run. */
  readonly cudnnGraph: CudnnGraphChoice | null;
  /**
   * ATTNLAB_BLOCK_MASK_GRID=dynamic|2d: the Hopper forward's grid for a block mask without a score
   * modifier: 2d (one block an item) and unset run the 2-D grid; dynamic is refused with an UnsupportedError
   * (it failed racecheck on an H100 and was slower: hopper-variant.ts BLOCK_MASK_DYNAMIC_REFUSED).
   */
  readonly blockMaskGrid: 'dynamic' | '2d' | null;
  /**
   * ATTNLAB_BLOCK_MASK_TILE=64x64: the Hopper forward with a block mask at Dk, Dv ≤ 128 runs 64 query
   * rows × 64 keys, one consumer warpgroup, two blocks an SM (hopper-variant.ts BLOCK_MASK_SHORT_TILE);
   * unset: the 128 × 128 two-consumer tile.
   */
  readonly blockMaskTile: '64x64' | null;
  /**
   * ATTNLAB_FOLD_SCORE_FACTORS=1: generated score modifiers with a constant factor on the score and on
   * their result (softcap) hand both to the forward kernels to fold into their own multiplies
   * (src/variants/cuda.ts scoreScales); unset or 0: the modifier as written.
   */
  readonly foldScoreFactors: boolean;
  /**
   * ATTNLAB_CUDNN_CUDA_GRAPH=0: enqueue every cuDNN plan with cudnnBackendExecute; unset or =1, a plan
   * whose pointers repeat runs as a CUDA graph where cuDNN can populate one (cudnn/cuda-graph.ts).
   */
  readonly cudnnCudaGraph: boolean;
  /**
   * ATTNLAB_LAUNCH_GRAPH=0: launch every group's kernels one by one; unset, =1 or =all, a plan whose arguments
   * repeat enqueues a decode step's split kernel and combine as one captured CUDA graph (runtime/launch-graph.ts).
   */
  readonly launchGraph: boolean;
  /**
   * ATTNLAB_LAUNCH_GRAPH=all: naive's matmuls and softmax, a KVCache append's launch and the flash backward's
   * three launches as graphs too (opt-in until the GPU suite runs them; their stand-in tests pin the calls).
   */
  readonly launchGraphAll: boolean;
  /**
   * Which TMA decode launches are programmatic dependents (launch-dependent.ts; decode-tma.ts,
   * tmaDependentLaunches, has the measurements): unset or =auto, 'auto' (both kernels of a split call
   * whose cache read is under 1 GiB); =1 'all' (the TMA kernel always, and its combine); =splits (both kernels
   * wherever the keys are split); =combine (only the combine); =0 'off' (plain launches).
   */
  readonly dependentLaunch: DependentLaunchChoice;
}

export interface AttnlabConfig {
  /**
   * ATTNLAB_DEBUG (0 when unset; any other value but an integer ≥ 0 is an error): 1 prints which backend and kernel variant ran each
   * call, and disk-cache write problems; 2 adds compiler logs; 3 adds every kernel load.
   */
  readonly debug: number;
  /** ATTNLAB_DISABLE_CUDA=1: behave as if there were no GPU. */
  readonly disableCuda: boolean;
  /** ATTNLAB_CACHE_DIR (default ~/.cache/attnlab): the root of every disk cache below. */
  readonly cacheRoot: string;
  /** <root>/kernels, or null with ATTNLAB_KERNEL_CACHE=0: compiled kernels (.cubin + .json). */
  readonly kernelCacheDir: string | null;
  /** <root>/cudnn-plans, or null with ATTNLAB_CUDNN_PLAN_CACHE=0: serialised cuDNN execution plans. */
  readonly cudnnPlanCacheDir: string | null;
  /** <root>/dispatch: the calibrated dispatch tables `attnlab tune` writes, one file per GPU and versions. */
  readonly dispatchCacheDir: string;
  /**
   * ATTNLAB_TUNE: unset, `auto` uses a calibrated entry where the cache has one ('use'); =auto also
   * calibrates a shape class the first time a call of it runs ('auto', within tuneBudgetMs); =0 ignores
   * calibrated tables ('off': the recorded table of the architecture, then the model).
   */
  readonly tune: TuneMode;
  /** ATTNLAB_TUNE_BUDGET_MS (default 2000): the most wall time ATTNLAB_TUNE=auto spends on one shape class. */
  readonly tuneBudgetMs: number;
  /** <root>/matmul-ceiling.json: the measured matmul ceiling per GPU name. */
  readonly ceilingCacheFile: string;
  /** ATTNLAB_ASSERT_NO_COMPILE=1: any NVRTC compile is an error (proves a warm run compiled nothing). */
  readonly assertNoCompile: boolean;
  /** ATTNLAB_KERNELS_DIR: the folder of .cu sources to compile instead of src/kernels/ (tests). */
  readonly kernelsDir: string | null;
  /**
   * The experiment knobs: kernel choices and tile sizes that override what attnlab chose from its
   * measurements, for benchmarks and kernel comparisons only (docs/guide/configuration.md,
   * "Experimental knobs"). Not a stable interface: a knob goes once its experiment is decided.
   */
  readonly experimental: ExperimentalKnobs;
  /** ATTNLAB_CUDNN_TRACE=1: print every cuDNN backend call and its status to stderr. */
  readonly cudnnTrace: boolean;
  /**
   * ATTNLAB_WEBGPU_EXPERIMENTAL=1: the tests, `attnlab check --device webgpu` and the WebGPU timings
   * open the device with initWebgpu({ experimental: true }) (Dawn's experimental features and
   * shader-f16 on NVIDIA's Vulkan driver: the subgroup-matrix forward).
   */
  readonly webgpuExperimental: boolean;
  /** ATTNLAB_COMMIT: the commit results files record when the checkout has no .git. */
  readonly commit: string | null;
  /** ATTNLAB_PYTHON: the only interpreter tried for the JAX/PyTorch peers. */
  readonly python: string | null;
  /** ATTNLAB_LIBCUDA, ATTNLAB_NVRTC, ATTNLAB_CUBLASLT, ATTNLAB_CUDNN, ATTNLAB_NCCL, ATTNLAB_NVML. */
  readonly libraries: Readonly<Record<ConfiguredLibrary, string | null>>;
}

/**
 * Parses `env` (any object of variables; tests pass their own). An empty value counts as unset; a
 * value a variable does not take throws InvalidArgumentError naming the variable, the values it takes
 * and what came, rather than running the defaults while a results file records the variable as set.
 */
export function readConfig(env: NodeJS.ProcessEnv): AttnlabConfig {
  const text = (name: string): string | null => env[name] || null;
  const choice = <T extends string>(name: string, allowed: readonly T[]): T | null => {
    const value = text(name);
    if (value === null || (allowed as readonly string[]).includes(value)) return value as T | null;
    throw new InvalidArgumentError(name, `one of ${allowed.join(', ')} (or unset)`, JSON.stringify(value));
  };
  /** A 0/1 switch: true when set to `on`. */
  const flag = (name: string, on: '0' | '1' = '1'): boolean => choice(name, ['0', '1']) === on;
  const cacheRoot = text('ATTNLAB_CACHE_DIR') ?? join(homedir(), '.cache', 'attnlab');
  const libraries = Object.fromEntries(
    Object.entries(LIBRARY_VARIABLES).map(([library, variable]) => [library, text(variable)]),
  ) as Record<ConfiguredLibrary, string | null>;
  const wide = choice('ATTNLAB_FLASH_BWD_WIDE', ['0', '1', 'pair', 'halves']);
  const dependent = choice('ATTNLAB_DEPENDENT_LAUNCH', ['auto', '1', 'splits', 'combine', '0']);
  const launchGraph = choice('ATTNLAB_LAUNCH_GRAPH', ['1', 'all', '0']);
  return {
    debug: debugLevel(text('ATTNLAB_DEBUG')),
    disableCuda: flag('ATTNLAB_DISABLE_CUDA'),
    cacheRoot,
    kernelCacheDir: flag('ATTNLAB_KERNEL_CACHE', '0') ? null : join(cacheRoot, 'kernels'),
    cudnnPlanCacheDir: flag('ATTNLAB_CUDNN_PLAN_CACHE', '0') ? null : join(cacheRoot, 'cudnn-plans'),
    dispatchCacheDir: join(cacheRoot, 'dispatch'),
    tune: tuneMode(choice('ATTNLAB_TUNE', ['auto', '1', '0'])),
    tuneBudgetMs: budget(text('ATTNLAB_TUNE_BUDGET_MS')),
    ceilingCacheFile: join(cacheRoot, 'matmul-ceiling.json'),
    assertNoCompile: flag('ATTNLAB_ASSERT_NO_COMPILE'),
    kernelsDir: text('ATTNLAB_KERNELS_DIR'),
    experimental: {
      flashTiles: text('ATTNLAB_FLASH_TILES'),
      flashBackwardTiles: text('ATTNLAB_FLASH_BWD_TILES'),
      flashBackwardKernel: choice('ATTNLAB_FLASH_BWD_KERNEL', ['wgmma', 'wgmma-ws', 'mma']),
      flashBackwardDeterministic: choice('ATTNLAB_FLASH_BWD_DET', ['ordered', 'pass']),
      flashBackwardLean: !flag('ATTNLAB_FLASH_BWD_LEAN', '0'),
      flashBackwardWide: wide === '1' || wide === 'pair' || wide === 'halves',
      flashBackwardWidePair: wide === 'pair' || wide === 'halves',
      flashBackwardWideHalves: wide === 'halves',
      flashBackwardDbias: choice('ATTNLAB_FLASH_BWD_DBIAS', ['add', 'store']),
      flashBackwardScoreGrad: choice('ATTNLAB_FLASH_BWD_SCORE_GRAD', ['score', 'output']),
      flashBackwardPingPong: choice('ATTNLAB_FLASH_BWD_PINGPONG', ['0', '1', 'keys']),
      flashBackwardWsFlagged: !flag('ATTNLAB_FLASH_BWD_WS_FLAGGED', '0'),
      flashBackwardDqSwizzle: !flag('ATTNLAB_FLASH_BWD_DQ_SWIZZLE', '0'),
      flashBackwardStatsEarly: !flag('ATTNLAB_FLASH_BWD_STATS_EARLY', '0'),
      flashKernel: choice('ATTNLAB_FLASH_KERNEL', ['wgmma', 'mma']),
      decodeKernel: choice('ATTNLAB_DECODE_KERNEL', ['heads', 'rows', 'tma']),
      cudnnGraph: choice('ATTNLAB_CUDNN_GRAPH', ['composite', 'unified']),
      blockMaskGrid: choice('ATTNLAB_BLOCK_MASK_GRID', ['dynamic', '2d']),
      blockMaskTile: choice('ATTNLAB_BLOCK_MASK_TILE', ['64x64']),
      foldScoreFactors: flag('ATTNLAB_FOLD_SCORE_FACTORS'),
      cudnnCudaGraph: !flag('ATTNLAB_CUDNN_CUDA_GRAPH', '0'),
      launchGraph: launchGraph !== '0',
      launchGraphAll: launchGraph === 'all',
      dependentLaunch: dependent === '1' ? 'all' : dependent === '0' ? 'off' : (dependent ?? 'auto'),
    },
    cudnnTrace: flag('ATTNLAB_CUDNN_TRACE'),
    webgpuExperimental: flag('ATTNLAB_WEBGPU_EXPERIMENTAL'),
    commit: text('ATTNLAB_COMMIT'),
    python: text('ATTNLAB_PYTHON'),
    libraries,
  };
}

function tuneMode(value: 'auto' | '1' | '0' | null): TuneMode {
  return value === 'auto' ? 'auto' : value === '0' ? 'off' : 'use';
}

/** The most ATTNLAB_TUNE_BUDGET_MS takes: an hour a shape class, the range of `tune --budget-ms`. */
const MAX_TUNE_BUDGET_MS = 3_600_000;

/** ATTNLAB_TUNE_BUDGET_MS: unset (2000) or an integer of milliseconds in [1, 3600000]. */
function budget(value: string | null): number {
  if (value === null) return 2000;
  if (!/^\d+$/.test(value) || Number(value) < 1 || Number(value) > MAX_TUNE_BUDGET_MS) {
    throw new InvalidArgumentError(
      'ATTNLAB_TUNE_BUDGET_MS',
      `an integer number of milliseconds in [1, ${MAX_TUNE_BUDGET_MS}] (or unset: 2000)`,
      JSON.stringify(value),
    );
  }
  return Number(value);
}

/** ATTNLAB_DEBUG: unset or an integer ≥ 0 (0 off; 1, 2, 3 print more; above 3 is as 3). */
function debugLevel(value: string | null): number {
  if (value === null) return 0;
  if (!/^\d+$/.test(value)) {
    throw new InvalidArgumentError(
      'ATTNLAB_DEBUG',
      'an integer ≥ 0 (0 off, 1..3 more output; or unset)',
      JSON.stringify(value),
    );
  }
  return Number(value);
}

/**
 * The ATTNLAB_* variables that change which kernels run, how they launch, or what a timing includes (a compile
 * past a disabled cache, a debug line a call): a results file records those set (machine.settings), since a row
 * measured under one says nothing about the defaults (ATTNLAB_DEPENDENT_LAUNCH=1 read 3604 GB/s where
 * the default read 4134).
 */
export const RUN_SETTING_VARIABLES = [
  'ATTNLAB_FLASH_KERNEL',
  'ATTNLAB_FLASH_TILES',
  'ATTNLAB_FLASH_BWD_KERNEL',
  'ATTNLAB_FLASH_BWD_TILES',
  'ATTNLAB_FLASH_BWD_DET',
  'ATTNLAB_FLASH_BWD_WIDE',
  'ATTNLAB_FLASH_BWD_DBIAS',
  'ATTNLAB_FLASH_BWD_SCORE_GRAD',
  'ATTNLAB_DECODE_KERNEL',
  'ATTNLAB_DEPENDENT_LAUNCH',
  'ATTNLAB_CUDNN_GRAPH',
  'ATTNLAB_BLOCK_MASK_GRID',
  'ATTNLAB_BLOCK_MASK_TILE',
  'ATTNLAB_FOLD_SCORE_FACTORS',
  'ATTNLAB_CUDNN_CUDA_GRAPH',
  'ATTNLAB_LAUNCH_GRAPH',
  'ATTNLAB_KERNELS_DIR',
  'ATTNLAB_KERNEL_CACHE',
  'ATTNLAB_CUDNN_PLAN_CACHE',
  'ATTNLAB_DEBUG',
  'ATTNLAB_CUDNN_TRACE',
  'ATTNLAB_TUNE',
  'ATTNLAB_WEBGPU_EXPERIMENTAL',
] as const;

/**
 * The RUN_SETTING_VARIABLES set (non-empty) in `env`, with their values as given: each checked first
 * (readConfig), so a results file never records a value that did not apply.
 */
export function runSettings(env: Record<string, string | undefined> = process.env): Record<string, string> {
  readConfig(env);
  const set: Record<string, string> = {};
  for (const name of RUN_SETTING_VARIABLES) {
    const value = env[name];
    if (value) set[name] = value;
  }
  return set;
}

let current: AttnlabConfig | null = null;

/** The settings of this process, read from process.env at the first call. */
export function config(): AttnlabConfig {
  current ??= readConfig(process.env);
  return current;
}

/**
 * Reads process.env again (tests, tools that set variables after the first call). Anything already
 * built from the old values stays: a loaded library, the CUDA availability answer, compiled kernels.
 */
export function reloadConfig(): AttnlabConfig {
  current = readConfig(process.env);
  return current;
}
