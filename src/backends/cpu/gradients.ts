/**
 * The float64 gradient accumulators of the CPU backward backends and their conversion to tensors in
 * each input's shape and dtype, so that both CPU backends round their results one way.
 */

import { allocFloat64 } from '../../tensor/checks.js';
import type { FloatDType } from '../../tensor/dtype.js';
import { Tensor } from '../../tensor/tensor.js';
import type { BackwardOutput, BackwardProblem } from '../backward-problem.js';

export interface GradientBuffers {
  /** (B,T,N,H) */
  readonly dq: Float64Array;
  /** (B,S,K,H), summed over each KV head's G query heads. */
  readonly dk: Float64Array;
  /** (B,S,K,Hv), summed as dk. */
  readonly dv: Float64Array;
  /** The bias's own elements, indexed through its broadcast strides (so broadcast dims sum). */
  readonly dbias: Float64Array | null;
  /** Per capture slot of the modifiers: the capture's size for a learned one, else empty; null without modifiers. */
  readonly dcaptures: Float64Array[] | null;
}

export function gradientBuffers(p: BackwardProblem): GradientBuffers {
  const { B, T, S, N, K, H, Hv } = p;
  return {
    dq: allocFloat64([B, T, N, H]),
    dk: allocFloat64([B, S, K, H]),
    dv: allocFloat64([B, S, K, Hv]),
    dbias: p.bias ? allocFloat64(p.bias.tensor.shape) : null,
    dcaptures: p.modifiers
      ? p.modifiers.captures.map((c) => (c.needsGrad ? allocFloat64(c.tensor.shape) : new Float64Array(0)))
      : null,
  };
}

/** Rounds the float64 sums once, to the inputs' dtype (dBias to the bias's). */
export function gradientTensors(p: BackwardProblem, g: GradientBuffers, variant: string): BackwardOutput {
  return {
    dQuery: Tensor.fromArray(g.dq, p.query.shape, p.dtype),
    dKey: Tensor.fromArray(g.dk, p.key.shape, p.dtype),
    dValue: Tensor.fromArray(g.dv, p.value.shape, p.dtype),
    dBias:
      p.bias && g.dbias
        ? Tensor.fromArray(g.dbias, p.bias.tensor.shape, p.bias.tensor.dtype as FloatDType)
        : undefined,
    dCaptures: captureGradients(p, g),
    variant,
  };
}

/** The learned captures' gradients by name, float32 in each capture's shape; undefined when none is learned. */
function captureGradients(p: BackwardProblem, g: GradientBuffers): Record<string, Tensor> | undefined {
  const captures = p.modifiers?.captures ?? [];
  if (!g.dcaptures || !captures.some((c) => c.needsGrad)) return undefined;
  const out: Record<string, Tensor> = {};
  captures.forEach((c, slot) => {
    if (c.needsGrad && g.dcaptures)
      out[c.name] = Tensor.fromArray(g.dcaptures[slot], c.tensor.shape, 'float32');
  });
  return out;
}
