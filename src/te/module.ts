/**
 * A TransformerEngine-style DotProductAttention: TE's options, value names and defaults in front of
 * attnlab's attention(), with TE's FP8 path (cuDNN's FP8 SDPA graph) under autocast.
 *
 * Where it differs from dotProductAttention (docs/guide/te-fp8.md has the full list): the mask type defaults
 * to 'causal'; padding comes from a SequenceDescriptor of lengths; a legacy mask is true where a
 * pair is masked out (ours is true where it is kept); layouts may be packed or sequence-first.
 */

import { attention } from '../api/attention.js';
import { attentionVjp } from '../api/backward.js';
import { validateAttention } from '../api/validate.js';
import { checkBoolean, checkKeys, checkOptionsObject } from '../arguments.js';
import type { AttentionGradients } from '../backends/backward-problem.js';
import { fp8Support } from '../backends/cuda/fp8/support.js';
import { cudaAvailable, getCudaContext } from '../backends/cuda/runtime/context.js';
import type { Fp8BackendName } from '../backends/fp8-backend.js';
import type { PerGradient } from '../backends/fp8-backward-problem.js';
import type { PerTensor } from '../backends/fp8-problem.js';
import { fp8BackwardSupportFor } from '../backends/fp8-registry.js';
import type { AttentionOptions, Implementation } from '../backends/problem.js';
import { InvalidArgumentError, UnsupportedError } from '../errors.js';
import type { Device } from '../tensor/storage.js';
import type { Tensor } from '../tensor/tensor.js';
import { activeAutocast, type Fp8Autocast } from './autocast.js';
import { runFp8BackwardStep } from './fp8-backward-path.js';
import { describeFp8Path, runFp8Step } from './fp8-path.js';
import { Fp8State } from './fp8-state.js';
import { outputInLayout, splitQkv } from './layout.js';
import {
  attentionOptionsFor,
  type DotProductAttentionConfig,
  type ResolvedConfig,
  resolveConfig,
  SequenceDescriptor,
} from './options.js';

const FORWARD_KEYS: readonly string[] = [
  'sequenceDescriptor',
  'bias',
  'deterministic',
  'autocast',
  'keepFp8Output',
  'scoreMod',
  'maskMod',
  'blockMask',
];

/** TE's forward() argument names → ours (a mask type or window per call is a constructor option here). */
const TE_FORWARD_NAMES: Readonly<Record<string, string>> = {
  attention_mask: 'sequenceDescriptor',
  sequence_descriptor: 'sequenceDescriptor',
  core_attention_bias: 'bias',
  attn_mask_type: 'attnMaskType (a constructor option)',
  attnMaskType: 'attnMaskType (a constructor option)',
  window_size: 'windowSize (a constructor option)',
  windowSize: 'windowSize (a constructor option)',
  core_attention_bias_type: 'attnBiasType (a constructor option)',
  score_mod: 'scoreMod',
  mask_mod: 'maskMod',
  block_mask: 'blockMask',
};

export interface ForwardOptions {
  /** Per-batch lengths (or a legacy mask) for the padding mask types. */
  sequenceDescriptor?: SequenceDescriptor;
  /** (B|1, N|1, T, S) bias; its meaning follows attnBiasType. */
  bias?: Tensor;
  /** TE's flag: true disables dropout (inference). Default false, as in TE. */
  deterministic?: boolean;
  /** An explicit FP8 scope from autocast({ ... }); overrides an enclosing autocast callback. */
  autocast?: Fp8Autocast;
  /** On the FP8 path, also return O as FP8 codes with its scale (result.output8). */
  keepFp8Output?: boolean;
  /** A score modifier (docs/guide/variants.md); with modifiers the GPU runs attnlab's flash, not cuDNN. */
  scoreMod?: AttentionOptions['scoreMod'];
  /** A mask modifier, on top of the module's attnMaskType. */
  maskMod?: AttentionOptions['maskMod'];
  /** createBlockMask of maskMod for this call's sizes. */
  blockMask?: AttentionOptions['blockMask'];
}

export interface DotProductAttentionResult {
  /** O in the caller's layout: (B,T,N,Hv), or (T,B,N,Hv) when sequence-first; the inputs' dtype. */
  readonly output: Tensor;
  /** 'fp8' when the FP8 path ran (on the GPU, or emulated on the CPU), else 'bf16'. */
  readonly precision: 'fp8' | 'bf16';
  /** The backend that ran: attention()'s choice, 'cudnn-fp8' or 'cpu-fp8-emulated'. */
  readonly backend: string;
  readonly variant: string;
  /** FP8 only: O as (B,T,N,Hv) e4m3 codes and 1/scale_o, when keepFp8Output was set. */
  readonly output8?: { readonly tensor: Tensor; readonly scaleInv: number };
  /**
   * FP8 only: the scales used and the amax values measured in this call. On the GPU they are read
   * back on first use (which waits for the call); the module's state never needs them on the host.
   */
  readonly fp8?: { readonly scales: PerTensor<number>; readonly amax: PerTensor<number> };
  /** Set when FP8 was asked for, could not run, and autocast's fallback ran the bf16 path. */
  readonly fallbackReason?: string;
}

/** What DotProductAttention.backward returns: the gradients, which path and backend made them. */
export interface ModuleBackwardResult extends AttentionGradients {
  /** attentionBackward's backend on the bf16 path; 'cudnn-fp8' or 'cpu-fp8-emulated' on the FP8 path. */
  readonly backend: Implementation | Fp8BackendName;
  readonly device: Device;
  /** The kernel variant; on the FP8 path the forward's, then ' + ', then the backward graph's. */
  readonly variant: string;
  readonly precision: 'fp8' | 'bf16';
  /**
   * FP8 only: the backward's scales and the amax values it measured for dO, dP (the softmax
   * gradient), dQ, dK, dV, and the FP8 gradient codes (e5m2 under HYBRID) the bf16 gradients came from.
   */
  readonly fp8?: {
    readonly scales: PerGradient<number>;
    readonly amax: PerGradient<number>;
    readonly gradients8: { readonly dQuery: Tensor; readonly dKey: Tensor; readonly dValue: Tensor };
    /**
     * The backward tensors whose values passed the FP8 format at this step's scale, each with its amax, scale
     * and the format's limit (`dV: amax 2.139e+5 × scale 0.2728 passes float8_e4m3fn's 448`): their codes
     * saturated (CPU emulation) or are NaN (cuDNN), so the gradients built from them are clipped or NaN. Empty
     * when none did. Delayed scaling sets the next step's scales from this step's amax.
     */
    readonly overflow: readonly string[];
  };
  /** Set when FP8 was asked for, could not run, and autocast's fallback ran the bf16 backward. */
  readonly fallbackReason?: string;
}

/**
 * TE's DotProductAttention. Construct once with the model's sizes; call `forward` per step.
 *
 *   out = softmax(scaleFactor · Q·Kᵀ [+ bias] [masked]) · V,  Q (B,T,N,H), K (B,S,K,H), V (B,S,K,Hv)
 *
 * @example
 * const attn = new DotProductAttention({ headDim: 64, numAttentionHeads: 8, attnMaskType: 'causal' });
 * const out = attn.forward(q, k, v, { deterministic: true });
 * const out8 = autocast({ recipe: new DelayedScaling() }, () => attn.forward(q, k, v)); // FP8 on sm_90
 */
export class DotProductAttention {
  readonly config: ResolvedConfig;
  /** Amax histories and scales kept between FP8 calls (TE's fp8_metas). */
  readonly fp8State = new Fp8State();

  constructor(config: DotProductAttentionConfig) {
    this.config = resolveConfig(config);
  }

  /** Attention over the layout's tensors; returns O in the caller's layout. */
  forward(query: Tensor, key?: Tensor | null, value?: Tensor | null, options: ForwardOptions = {}): Tensor {
    return this.apply(query, key, value, options).output;
  }

  /** As forward, also saying which path and backend ran, with the FP8 scales and amax values. */
  apply(
    query: Tensor,
    key?: Tensor | null,
    value?: Tensor | null,
    optionsIn: ForwardOptions = {},
  ): DotProductAttentionResult {
    const options = this.#checkOptions(optionsIn);
    const keepFp8Output = options.keepFp8Output ?? false;
    // The copies this call makes (layout gathers, a pre-scaled bias, an inverted legacy mask, the (B,T,N,Hv)
    // output a sequence-first one is gathered from) are freed when it returns, not left to the GC net, which
    // a synchronous loop never lets run: memoryStats().hostBytes grew at every call that disposed its output.
    return freeingCopies((made) => this.#apply({ query, key, value, options, made }, keepFp8Output));
  }

  #apply(call: Call, keepFp8Output: boolean): DotProductAttentionResult {
    const { query, key, value, options, made } = call;
    const c = this.config;
    const qkv = this.#operands(query, key, value, made);
    this.#checkShapes(qkv.query, qkv.key, qkv.value);
    const attentionOptions = this.#attentionOptions(options, made);
    const inLayout = (output: Tensor) => {
      if (c.transposed) made.push(output);
      return outputInLayout(output, c.transposed);
    };
    const scope = activeAutocast(options.autocast);
    let fallbackReason: string | undefined;
    if (scope?.enabled) {
      const problem = validateAttention(qkv.query, qkv.key, qkv.value, attentionOptions);
      const support = fp8Support(problem, problem.device === 'cpu' ? 'emulated' : gpuCapability());
      if (support.ok) {
        const step = runFp8Step(problem, scope.recipe, this.fp8State, keepFp8Output);
        return {
          output: inLayout(step.output),
          precision: 'fp8',
          backend: step.backend,
          variant: step.variant,
          output8: step.output8,
          fp8: step.report,
        };
      }
      if (!scope.fallback) {
        throw new UnsupportedError(
          'te.DotProductAttention FP8',
          `${support.reason}. Pass autocast({ ..., fallback: true }) to run in ${problem.dtype} instead.\n` +
            describeFp8Path(problem, scope.recipe),
        );
      }
      fallbackReason = support.reason;
    }
    const implementation = DotProductAttention.#implementation(qkv.query.device, attentionOptions);
    const result = attention(qkv.query, qkv.key, qkv.value, { ...attentionOptions, implementation });
    return {
      output: inLayout(result.output),
      precision: 'bf16',
      backend: result.backend,
      variant: result.variant,
      fallbackReason,
    };
  }

  /**
   * Gradients of forward's output with respect to query, key and value (and bias), for ∂loss/∂output
   * `dOutput` (the output's shape): the forward is run again and its residuals pulled back, on cuDNN
   * on the GPU as the forward; the bshd_bshd_bshd layout. Outside autocast: bf16/fp16 through
   * attentionVjp. Under an FP8 autocast with DelayedScaling, TE's FP8 backward: the FP8 forward keeps
   * Q8/K8/V8/O8 and its statistics, dO is quantised to the recipe's gradient type (e5m2 under
   * HYBRID), cuDNN's FP8 backward graph returns FP8 dQ/dK/dV (dequantised to bf16 here; the codes in
   * `fp8.gradients8`) and the five backward amax values go into the module's histories. Where that
   * cannot run (H ≠ 128 on Hopper, current scaling, …) it throws UnsupportedError with the reason,
   * unless the scope allows the fallback to the bf16 backward.
   *
   * @example
   * const out = attn.forward(q, k, v);
   * const { dQuery, dKey, dValue } = attn.backward(q, k, v, dOut);
   * const g8 = autocast({ recipe: new DelayedScaling() }, () => attn.backward(q, k, v, dOut)); // FP8, sm_90
   */
  backward(
    query: Tensor,
    key: Tensor,
    value: Tensor,
    dOutput: Tensor,
    optionsIn: ForwardOptions = {},
  ): ModuleBackwardResult {
    const c = this.config;
    const options = this.#checkOptions(optionsIn);
    if (c.layout !== 'bshd_bshd_bshd' || c.transposed) {
      const name = c.transposed ? `${c.layout} (sequence-first)` : c.layout;
      throw new UnsupportedError(
        'te.DotProductAttention backward',
        `qkvFormat/layout ${name}: the backward takes separate (B,S,N,H) query, key and value (bshd_bshd_bshd) only`,
      );
    }
    // As in apply: this call's own copies are freed when it returns.
    return freeingCopies((made) => this.#backward({ query, key, value, options, made }, dOutput));
  }

  #backward(call: Call, dOutput: Tensor): ModuleBackwardResult {
    const { query, key, value, options, made } = call;
    const qkv = this.#operands(query, key, value, made);
    this.#checkShapes(qkv.query, qkv.key, qkv.value);
    const scope = activeAutocast(options.autocast);
    let fallbackReason: string | undefined;
    const attentionOptions = this.#attentionOptions(options, made);
    if (scope?.enabled) {
      const problem = validateAttention(qkv.query, qkv.key, qkv.value, attentionOptions);
      const recipe = scope.recipe;
      const support = fp8BackwardSupportFor(problem, recipe.kind);
      if (support.ok && recipe.kind === 'delayed') {
        const g = runFp8BackwardStep(problem, recipe, this.fp8State, dOutput);
        return {
          dQuery: g.dQuery,
          dKey: g.dKey,
          dValue: g.dValue,
          backend: g.backend,
          device: g.device,
          variant: `${g.forwardVariant} + ${g.variant}`,
          precision: 'fp8',
          fp8: { scales: g.scales, amax: g.amax, gradients8: g.gradients8, overflow: g.overflow },
        };
      }
      const reason = support.ok ? 'the FP8 backward takes DelayedScaling' : support.reason;
      if (!scope.fallback) {
        throw new UnsupportedError(
          'te.DotProductAttention FP8 backward',
          `${reason}; call backward outside autocast, or pass autocast({ ..., fallback: true }) for the ${qkv.query.dtype} backward`,
        );
      }
      fallbackReason = reason;
    }
    const implementation = DotProductAttention.#implementation(qkv.query.device, attentionOptions);
    const f = attentionVjp(qkv.query, qkv.key, qkv.value, { ...attentionOptions, implementation });
    made.push(f.output, f.logSumExp); // the residuals, on either device
    return { ...f.backward(dOutput), precision: 'bf16', fallbackReason };
  }

  /** The layout's (B,T,N,H)-style tensors; those that are copies of the caller's go into `made`. */
  #operands(query: Tensor, key: Tensor | null | undefined, value: Tensor | null | undefined, made: Tensor[]) {
    const qkv = splitQkv(this.config.layout, this.config.transposed, query, key, value);
    for (const [t, given] of [
      [qkv.query, query],
      [qkv.key, key],
      [qkv.value, value],
    ] as const)
      if (t !== given) made.push(t);
    return qkv;
  }

  /** attention()'s options for this call; a bias or mask made for it (pre-scaled, inverted) goes into `made`. */
  #attentionOptions(options: ForwardOptions, made: Tensor[]): AttentionOptions {
    const attentionOptions = attentionOptionsFor(this.config, options.sequenceDescriptor, options.bias);
    if (attentionOptions.bias && attentionOptions.bias !== options.bias) made.push(attentionOptions.bias);
    if (attentionOptions.mask) made.push(attentionOptions.mask); // always the inverted copy of a legacy mask
    const { scoreMod, maskMod, blockMask } = options;
    return {
      ...attentionOptions,
      ...(scoreMod !== undefined && { scoreMod }),
      ...(maskMod !== undefined && { maskMod }),
      ...(blockMask !== undefined && { blockMask }),
    };
  }

  /**
   * cuDNN is TE's fused-attention engine on the GPU; it takes no modifiers, so a call with them leaves the
   * choice to attention() (flash). On the CPU always attention()'s own choice.
   */
  static #implementation(device: string, options: AttentionOptions): 'cudnn' | undefined {
    const modified = options.scoreMod !== undefined || options.maskMod !== undefined;
    return device === 'cuda' && !modified ? 'cudnn' : undefined;
  }

  /** TE's dropout rule: attnlab has none, so a module with dropout runs only when told deterministic. */
  /** The options object, its keys and flags, then TE's dropout rule (forward and backward alike). */
  #checkOptions(optionsIn: ForwardOptions): ForwardOptions {
    const options = checkOptionsObject<ForwardOptions>(
      'options',
      optionsIn,
      'an object of forward options (or undefined)',
    );
    checkKeys('options', options, FORWARD_KEYS, TE_FORWARD_NAMES);
    const deterministic = checkBoolean('deterministic', options.deterministic, false);
    checkBoolean('keepFp8Output', options.keepFp8Output, false);
    if (this.config.dropout > 0 && !deterministic) {
      throw new UnsupportedError(
        'te.DotProductAttention',
        `attentionDropout=${this.config.dropout} is not implemented (attnlab has no seeded dropout); ` +
          'pass deterministic: true to run without dropout, as TE does at inference, or set attentionDropout: 0',
      );
    }
    return options;
  }

  /** The layout's tensors against the configured N, K, H and Hv, named as the caller knows them. */
  #checkShapes(q: Tensor, k: Tensor, v: Tensor): void {
    const { N, K, H, Hv } = this.config;
    const check = (argument: string, got: number, want: number, letter: string, option: string) => {
      if (got !== want) {
        throw new InvalidArgumentError(
          argument,
          `${letter}=${want} (${option} of the module)`,
          `${letter}=${got}`,
        );
      }
    };
    check('query', q.shape[2], N, 'N', 'numAttentionHeads');
    check('query', q.shape[3], H, 'H', 'headDim');
    check('key', k.shape[2], K, 'K', 'numGqaGroups');
    check('key', k.shape[3], H, 'H', 'headDim');
    check('value', v.shape[3], Hv, 'Hv', 'headDim');
  }
}

/** One call's arguments, and the list of the copies it makes (freed by freeingCopies when it returns). */
interface Call {
  readonly query: Tensor;
  readonly key: Tensor | null | undefined;
  readonly value: Tensor | null | undefined;
  readonly options: ForwardOptions;
  readonly made: Tensor[];
}

function freeingCopies<R>(fn: (made: Tensor[]) => R): R {
  const made: Tensor[] = [];
  try {
    return fn(made);
  } finally {
    for (const t of made) t.dispose();
  }
}

function gpuCapability() {
  return cudaAvailable().ok ? getCudaContext().properties.computeCapability : null;
}

export { SequenceDescriptor };
