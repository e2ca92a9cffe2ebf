/**
 * The codelab's sweeps as data, for `attnlab lab` and `attnlab bench --preset codelab`.
 *
 * On a GPU: the default shape B=4, T=128, N=8, H=64; sequence lengths 64…1024 as in the codelab,
 * or on to 16384 with `long` (at 1024 nothing is yet memory-bound on an H200); batch 1…16 at T=256.
 * Series follow the codelab's: naive and fused in float32, then naive, fused and cuDNN in bfloat16.
 *
 * On the CPU the float64 reference costs ~4·B·N·T²·H operations at a few hundred MFLOP/s in V8, so
 * the same sweeps run at B=1, N=4, H=32 and T ≤ 256: each size takes milliseconds, the lab seconds.
 */
import type { Implementation } from '../backends/problem.js';
import type { FloatDType } from '../tensor/dtype.js';
import type { SweepGroup } from './run-bench.js';
import type { SweepSpec } from './sweep.js';

export interface CodelabSizes {
  readonly B: number;
  readonly T: number;
  readonly N: number;
  readonly H: number;
  readonly seq: readonly number[];
  readonly batch: readonly number[];
  /** T of the batch sweep. */
  readonly batchSeq: number;
  /** T at which the lab times MHA, GQA and MQA (section 9a). */
  readonly headsSeq: number;
  /** The lab's TransformerEngine-style module sweep over T (section 10a), bf16 causal. */
  readonly teSeq: readonly number[];
  /** T of the FP8 comparison (section 10b; sm_90 GPUs only) at the lab's B, N, H. */
  readonly fp8Seq: number;
  /**
   * The second FP8 shape (section 10b): one where the GEMMs, not the quantisation passes, set the
   * time — the shape of the recorded FP8 speed-up (docs/guide/te-fp8.md: 1.42–1.44× bf16 cuDNN at B=4, T=8192,
   * N=16, H=128). Null where there is no FP8 (CPU).
   */
  readonly fp8Large: {
    readonly B: number;
    readonly T: number;
    readonly N: number;
    readonly H: number;
  } | null;
  /** Decoding by KV heads (section 9b): one query token per sequence over a cache of S tokens. */
  readonly decode: { readonly B: number; readonly S: number; readonly N: number; readonly H: number };
  /** The long sequence of the forward/backward section (11), beside the default shape. */
  readonly backwardSeq: number;
}

/** The sizes of the codelab's sections on each kind of machine; `long` extends the sequence sweep. */
export function codelabSizes(device: 'cuda' | 'cpu', long: boolean): CodelabSizes {
  if (device === 'cuda') {
    return {
      B: 4,
      T: 128,
      N: 8,
      H: 64,
      seq: doubling(64, long ? 16384 : 1024),
      batch: doubling(1, 16),
      batchSeq: 256,
      headsSeq: 2048,
      teSeq: doubling(128, 2048),
      fp8Seq: long ? 2048 : 1024,
      // 4·4·16·8192²·128 / 2 = 1.1 TFLOP per causal call: ~2 ms in bf16, past every fixed cost.
      fp8Large: { B: 4, T: 8192, N: 16, H: 128 },
      // 2·8·32768·8·128 bf16 values = 1 GiB of cache at K=8: well past L2, ~0.25 ms at 4 TB/s.
      decode: { B: 8, S: 32768, N: 32, H: 128 },
      backwardSeq: long ? 8192 : 2048,
    };
  }
  return {
    B: 1,
    T: 64,
    N: 4,
    H: 32,
    seq: doubling(16, long ? 256 : 128),
    batch: doubling(1, long ? 8 : 4),
    batchSeq: 64,
    headsSeq: 64,
    teSeq: doubling(16, 64),
    fp8Seq: 64,
    fp8Large: null,
    // A few ms per decode step and ~0.3 s per float64 reference backward call at T=256.
    decode: { B: 2, S: 2048, N: 8, H: 32 },
    backwardSeq: 256,
  };
}

/** The implementations and dtypes compared at each size: the codelab's series, in attnlab's names. */
export function codelabSeries(device: 'cuda' | 'cpu'): { dtype: FloatDType; impl: Implementation[] }[] {
  if (device === 'cuda') {
    // cuDNN takes bfloat16/float16 only; flash also has a float32 (FMA) kernel.
    return [
      { dtype: 'float32', impl: ['naive', 'flash'] },
      { dtype: 'bfloat16', impl: ['naive', 'flash', 'cudnn'] },
    ];
  }
  // The CPU has no naive or cuDNN backend: the float64 reference plays "from scratch", flash "fused".
  return [{ dtype: 'float32', impl: ['reference', 'flash'] }];
}

/** The default-shape timing, sequence sweep and batch sweep as named groups. */
export function codelabSweeps(device: 'cuda' | 'cpu', long: boolean): SweepGroup[] {
  const s = codelabSizes(device, long);
  const groups: SweepGroup[] = [];
  const add = (name: string, sizes: Pick<SweepSpec, 'batch' | 'seq'>) => {
    for (const { dtype, impl } of codelabSeries(device)) {
      groups.push({
        name,
        spec: { ...sizes, heads: [s.N], headDim: [s.H], dtype: [dtype], causal: [false], impl },
      });
    }
  };
  add('default', { batch: [s.B], seq: [s.T] });
  add('seq', { batch: [s.B], seq: s.seq });
  add('batch', { batch: s.batch, seq: [s.batchSeq] });
  return groups;
}

/** from, 2·from, 4·from, … up to and including `to`. */
export function doubling(from: number, to: number): number[] {
  const values: number[] = [];
  for (let v = from; v <= to; v *= 2) values.push(v);
  return values;
}
