/**
 * The FP8 state a DotProductAttention keeps between calls, as TE keeps its `fp8_metas`: one amax
 * history and scale for each of the five FP8 tensors of the forward pass, Q, K, V, S (the softmax
 * output P fed to the second matmul) and O.
 */

import { FP8_GRADIENTS, type Fp8GradientName, type PerGradient } from '../backends/fp8-backward-problem.js';
import {
  FP8_TENSORS,
  type Fp8StateMirror,
  type Fp8TensorName,
  type PerTensor,
} from '../backends/fp8-problem.js';
import { type Fp8DType, fp8Max } from '../tensor/dtype.js';
import { backwardDType, type DelayedScaling, type Fp8Recipe, Fp8TensorMeta, forwardDType } from './recipe.js';

/** The current-scaling scales, computed where the host emulation needs them. */
export { currentScales } from '../backends/cpu/fp8-emulation.js';

export class Fp8State {
  #metas: Record<Fp8TensorName, Fp8TensorMeta> | null = null;
  /** The device copy, if a GPU step made one; `#hostStale` says whether it is ahead of the metas. */
  #mirror: Fp8StateMirror | null = null;
  #hostStale = false;
  /** Steps recorded since the state was created or reset. */
  steps = 0;

  /** The per-tensor metas (created on the first delayed-scaling step); reading waits for the GPU. */
  get metas(): PerTensor<Fp8TensorMeta> | null {
    this.#pull();
    return this.#metas;
  }

  /**
   * The mirror a GPU step updates, made by `upload` from the host state when there is none (or its
   * history length is not the recipe's). Call `deviceStepEnqueued` after enqueuing the step.
   */
  mirrorFor<M extends Fp8StateMirror>(
    recipe: DelayedScaling,
    upload: (metas: PerTensor<Fp8TensorMeta>) => M,
  ): M {
    // The common case touches nothing on the host: reading the metas here would wait for the GPU.
    if (this.#mirror && this.#mirror.historyLength === recipe.amaxHistoryLen) return this.#mirror as M;
    this.delayedScales(recipe); // pulls a stale mirror first, and starts afresh on a new history length
    this.#dropMirror();
    this.#mirror = upload(this.#metas!);
    return this.#mirror as M;
  }

  /** Counts a step whose state update runs on the device: the host metas are now behind. */
  deviceStepEnqueued(): void {
    this.steps++;
    this.#hostStale = true;
  }

  #pull(): void {
    if (this.#mirror && this.#hostStale && this.#metas) this.#mirror.pull(this.#metas);
    this.#hostStale = false;
  }

  #dropMirror(): void {
    this.#mirror?.release();
    this.#mirror = null;
    this.#hostStale = false;
  }

  /**
   * The scales the next delayed step uses: TE's per-tensor scales from the histories, with two caps
   * that only ever lower a scale, each from a bound that holds for every input:
   * - scale_s ≤ fp8Max. cuDNN's Hopper FP8 kernel multiplies the *unnormalised* weights
   *   exp(s − rowmax) by scale_s, and every row has one weight equal to 1; amax_s measures the
   *   normalised P (0.2 at T = 256). With TE's 448 / amax_s = 2250 the largest weights saturated
   *   and the H200 returned O off by up to 0.48 at |O| ≤ 0.57 (causal rows, whose amax_s is 1,
   *   were unaffected).
   * - scale_o ≤ scale_v. Each output row is a convex combination of (dequantised) V rows, so
   *   |O| ≤ 448 / scale_v and O·scale_o cannot saturate, even when O grows past its history.
   * S starts at fp8Max rather than TE's 1: the bound P ≤ 1 is known before any step, and with scale 1
   * every weight below 2^-10 would round to zero on the first call.
   * A history of another length starts afresh, as in TE.
   */
  delayedScales(recipe: DelayedScaling): PerTensor<number> {
    this.#pull();
    if (!this.#metas || this.#metas.q.amaxHistory.length !== recipe.amaxHistoryLen) {
      this.#dropMirror();
      const make = () => new Fp8TensorMeta(recipe.amaxHistoryLen);
      this.#metas = { q: make(), k: make(), v: make(), s: make(), o: make() };
      this.#metas.s.scale = fp8Max(forwardDType(recipe.fp8Format));
    }
    const m = this.#metas;
    const max = fp8Max(forwardDType(recipe.fp8Format));
    return {
      q: m.q.scale,
      k: m.k.scale,
      v: m.v.scale,
      s: Math.min(m.s.scale, max),
      o: Math.min(m.o.scale, m.v.scale),
    };
  }

  /** Ends a step: delayed scaling records the amax values and updates the scales; current keeps none. */
  record(recipe: Fp8Recipe, amax: PerTensor<number>, dtype: Fp8DType): void {
    // The host copy is about to move ahead of the device's: bring it up to date, then forget the device's.
    this.#pull();
    this.#dropMirror();
    this.steps++;
    if (recipe.kind !== 'delayed') return;
    this.delayedScales(recipe);
    for (const name of FP8_TENSORS) this.#metas![name].recordDelayed(amax[name], recipe, dtype);
  }

  /**
   * The backward's metas, TE's `scaling_bwd`: dO, dP (the softmax gradient), dQ, dK, dV; created by
   * the first FP8 backward. They live on the host: a backward reads its amax values back at its end.
   */
  #gradientMetas: Record<Fp8GradientName, Fp8TensorMeta> | null = null;
  /** FP8 backward steps recorded since the state was created or reset. */
  backwardSteps = 0;

  get gradientMetas(): PerGradient<Fp8TensorMeta> | null {
    return this.#gradientMetas;
  }

  /**
   * The scales the next FP8 backward quantises with: TE's rule over each gradient's history with
   * the gradient type's maximum (57344 for e5m2 under HYBRID), starting at 1 as TE's do. A history
   * of another length starts afresh.
   */
  backwardScales(recipe: DelayedScaling): PerGradient<number> {
    if (!this.#gradientMetas || this.#gradientMetas.dO.amaxHistory.length !== recipe.amaxHistoryLen) {
      const make = () => new Fp8TensorMeta(recipe.amaxHistoryLen);
      this.#gradientMetas = { dO: make(), dP: make(), dQ: make(), dK: make(), dV: make() };
    }
    const m = this.#gradientMetas;
    return { dO: m.dO.scale, dP: m.dP.scale, dQ: m.dQ.scale, dK: m.dK.scale, dV: m.dV.scale };
  }

  /** Ends a backward step: records the five amax values and updates the scales (delayed scaling). */
  recordBackward(recipe: DelayedScaling, amax: PerGradient<number>): void {
    this.backwardScales(recipe);
    const dtype = backwardDType(recipe.fp8Format);
    for (const name of FP8_GRADIENTS) this.#gradientMetas![name].recordDelayed(amax[name], recipe, dtype);
    this.backwardSteps++;
  }

  /** Forgets every history and scale (TE re-initialises its metas the same way). */
  reset(): void {
    this.#dropMirror();
    this.#metas = null;
    this.#gradientMetas = null;
    this.steps = 0;
    this.backwardSteps = 0;
  }
}
