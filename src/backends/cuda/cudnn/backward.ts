/**
 * The 'cudnn' backward backend: cuDNN's fused flash backward engine through the composite backward
 * graph (sdpa-backward-graph.ts), with the forward's plan cache (memory, then disk, then a build).
 *
 * It takes what the cuDNN forward takes (features.ts says why not otherwise) plus a float32
 * log-sum-exp. Scratch the graph needs — softmaxSum (B,N,T) and, unless dQ is written directly, a
 * float32 dQ accumulator (B,N,T,H) — comes from the pool for the call. With padding the gradients
 * are zeroed first: cuDNN writes only the valid rows (the GEMM overrides), attnlab promises zeros.
 * `deterministic` (and any dBias) takes cuDNN's dP-workspace path, where dQ comes straight from its
 * GEMM instead of accumulated tiles.
 *
 * NaN and Inf inputs run as any others: cuDNN's fused backward spreads them past the gradients the
 * NaN rule allows (0·NaN inside its products: NaN in dQ, dK, dBias where the reference's are finite
 * in 13 of the 23 cases of test/gpu/backward/nan.test.ts on an H100, cuDNN 9.19), and the registry's
 * entry declares the gradient repair as its post-op (ops/gradient-nan-repair.ts), which recomputes the
 * non-finite rows on the device after cuDNN's kernels, with no read back.
 */
import { config } from '../../../config.js';
import { UnsupportedError } from '../../../errors.js';
import { type FloatDType, itemSize } from '../../../tensor/dtype.js';
import { Tensor } from '../../../tensor/tensor.js';
import { NO_PLAN, type Support } from '../../backend.js';
import type { BackwardBackend } from '../../backward-backend.js';
import type { BackwardOutput, BackwardProblem } from '../../backward-problem.js';
import { type ShapeFields, sameShapeFields, shapeFields } from '../../problem.js';
import { cudnnHandle } from '../ffi/cudnn.js';
import { allocDevice, fillDevice32 } from '../runtime/memory.js';
import { cudnnEnvironment } from './backend.js';
import { type CallPointers, executePlan, sequenceLengthsBuffer } from './execute.js';
import { type CudnnEnvironment, describeSdpa } from './features.js';
import { getPlan } from './plan-cache.js';
import { buildSdpaBackwardGraph, type SdpaBackwardFeatures } from './sdpa-backward-graph.js';

/** Before 9.6 cuDNN expected the caller to zero the dQ accumulator (cudnn-frontend does so there). */
const ZEROES_ITS_ACCUMULATOR = 90600;

type BackwardDescription =
  | { ok: true; features: SdpaBackwardFeatures; key: string }
  | { ok: false; reason: string };

/** The backward graph's features for `p`, or the reason cuDNN cannot differentiate it. */
export function describeSdpaBackward(p: BackwardProblem, env: CudnnEnvironment): BackwardDescription {
  if (p.logSumExp.dtype !== 'float32') {
    return { ok: false, reason: `the log-sum-exp must be float32 on cuda, got ${p.logSumExp.dtype}` };
  }
  const d = describeSdpa({ ...p, returnLogSumExp: true }, env, { graph: 'composite', statsLayout: 'btn' });
  if (!d.ok) return d;
  // The forward's device-side preparations have no backward here yet: a converted bias would need
  // its gradient reduced back to the mask/bias the caller gave, and an empty row's −inf Stats makes
  // exp(S − Stats) NaN in the graph.
  if (d.prepare.convertBias) {
    const what = p.mask ? 'a boolean mask' : 'a bias broadcast over T or S';
    return { ok: false, reason: `${what}: the cuDNN backward takes only a (1|B, 1|N, T, S) bias (no mask)` };
  }
  if (d.prepare.fixEmptyRows) {
    return {
      ok: false,
      reason: 'a row sees no key: the cuDNN backward graph would compute exp(−inf + inf) there',
    };
  }
  const features: SdpaBackwardFeatures = {
    ...d.features,
    pass: 'backward',
    directDQ: p.deterministic || d.features.bias !== null,
  };
  return { ok: true, features, key: JSON.stringify(features) };
}

/**
 * describeSdpaBackward's answers for the last few plain problems (16-bit, dense, no bias, mask, lengths or
 * modifiers: it reads only their sizes and flags then, and the loop's `deterministic`), most recent first: a
 * description and its JSON key cost ~6 µs on the build machine, and a call asks twice (its support, its run).
 * A config() reloaded or another cuDNN environment drops or misses them.
 */
interface KeptDescription {
  readonly shape: ShapeFields;
  readonly deterministic: boolean;
  readonly env: CudnnEnvironment;
  readonly description: BackwardDescription;
}
const keptDescriptions: KeptDescription[] = [];
const KEPT_DESCRIPTIONS = 4;
let keptConfig: unknown = null;

function plainBackward(p: BackwardProblem): boolean {
  return (
    !p.paged &&
    !p.packed &&
    !p.bias &&
    !p.mask &&
    !p.modifiers &&
    !p.blockMask &&
    p.querySeqLengths === null &&
    p.keyValueSeqLengths === null &&
    p.logSumExp.dtype === 'float32' &&
    (p.dtype === 'bfloat16' || p.dtype === 'float16')
  );
}

function describeKept(p: BackwardProblem, env: CudnnEnvironment): BackwardDescription {
  if (!plainBackward(p)) return describeSdpaBackward(p, env);
  if (config() !== keptConfig) {
    keptDescriptions.length = 0;
    keptConfig = config();
  }
  for (let i = 0; i < keptDescriptions.length; i++) {
    const k = keptDescriptions[i];
    const same = k.env === env && k.deterministic === p.deterministic;
    if (same && sameShapeFields(k.shape, p)) return k.description;
  }
  const description = describeSdpaBackward(p, env);
  keptDescriptions.unshift({ shape: shapeFields(p), deterministic: p.deterministic, env, description });
  if (keptDescriptions.length > KEPT_DESCRIPTIONS) keptDescriptions.pop();
  return description;
}

/** cuDNN's graph reads O in the inputs' dtype: a float32 output (for D) is attnlab flash's and the CPU's. */
const FLOAT32_OUTPUT =
  "a float32 output (D from the unrounded output): the cuDNN graph reads O in the inputs' dtype";

function supports(p: BackwardProblem): Support {
  if (p.output.dtype !== p.dtype) return { ok: false, reason: FLOAT32_OUTPUT };
  const e = cudnnEnvironment();
  if (!e.ok) return { ok: false, reason: e.reason };
  const d = describeKept(p, e.env);
  return d.ok ? { ok: true } : { ok: false, reason: d.reason };
}

function run(p: BackwardProblem): BackwardOutput {
  if (p.output.dtype !== p.dtype) throw new UnsupportedError('cudnn (cuda) backward', FLOAT32_OUTPUT);
  const e = cudnnEnvironment();
  if (!e.ok) throw new UnsupportedError('cudnn (cuda) backward', e.reason);
  const d = describeKept(p, e.env);
  if (!d.ok) throw new UnsupportedError('cudnn (cuda) backward', d.reason);
  const f = d.features;
  const handle = cudnnHandle();
  const entry = getPlan(d.key, f, e.env, handle, buildSdpaBackwardGraph, 'composite backward');
  const { B, T, S, N, K, H, Hv } = f;
  const size = itemSize(p.dtype);
  const gradient = (shape: number[], dtype: FloatDType = p.dtype) =>
    Tensor.fromDeviceBuffer(allocDevice(shape.reduce((a, b) => a * b, 1) * itemSize(dtype)), shape, dtype);
  const dQuery = gradient([B, T, N, H]);
  const dKey = gradient([B, S, K, H]);
  const dValue = gradient([B, S, K, Hv]);
  const dBias = p.bias ? gradient([...p.bias.tensor.shape], p.dtype) : undefined;
  if (f.padding)
    for (const t of [dQuery, dKey, dValue]) fillDevice32(t.buffer, 0, Math.ceil((t.size * size) / 4));
  const softmaxSum = allocDevice(B * N * T * 4);
  const accumulator = f.directDQ ? null : allocDevice(B * N * T * H * 4);
  if (accumulator && e.env.version < ZEROES_ITS_ACCUMULATOR) fillDevice32(accumulator, 0);
  const lengths = f.padding
    ? [sequenceLengthsBuffer(p.querySeqLengths, B, T), sequenceLengthsBuffer(p.keyValueSeqLengths, B, S)]
    : [];
  const pointers: CallPointers = {
    query: p.query.buffer.ptr,
    key: p.key.buffer.ptr,
    value: p.value.buffer.ptr,
    output: p.output.buffer.ptr,
    stats: p.logSumExp.buffer.ptr,
    dOutput: p.dOutput.buffer.ptr,
    bias: p.bias?.tensor.buffer.ptr,
    dQuery: dQuery.buffer.ptr,
    dKey: dKey.buffer.ptr,
    dValue: dValue.buffer.ptr,
    dBias: dBias?.buffer.ptr,
    softmaxSum: softmaxSum.ptr,
    dQueryAccum: accumulator?.ptr,
    seqLenQ: lengths[0]?.ptr,
    seqLenKv: lengths[1]?.ptr,
  };
  try {
    executePlan(entry, handle, pointers, p.scale);
  } catch (error) {
    for (const t of [dQuery, dKey, dValue, dBias]) t?.dispose();
    throw error;
  } finally {
    // Stream-ordered pool: a later user of these blocks is enqueued after this call's kernels.
    for (const buffer of [softmaxSum, accumulator, ...lengths]) buffer?.release();
  }
  return { dQuery, dKey, dValue, dBias, variant: entry.variant };
}

export const cudnnBackward: BackwardBackend<null> = {
  name: 'cudnn',
  device: 'cuda',
  plan: (p) => {
    const support = supports(p);
    return support.ok ? NO_PLAN : support;
  },
  run: (_plan, p) => run(p),
};
