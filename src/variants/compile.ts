/**
 * A call's score and mask modifiers → CompiledModifiers: captures placed in kernel slots, the CUDA
 * device functions, their hash, and the CPU evaluators of the same programs.
 */

import { InvalidArgumentError } from '../errors.js';
import type { Device } from '../tensor/storage.js';
import { generateCuda, MAX_CAPTURES, type SlottedProgram } from './cuda.js';
import { children, type Expr } from './expression.js';
import type { MaskMod, ScoreMod } from './modifiers.js';
import { backward, evaluate, type HostCapture, lower, type Point, type Program } from './program.js';
import type { CaptureDescriptor, CompiledModifiers } from './types.js';

/** FNV-1a, 64 bits, as 16 hex digits: stable across runs and platforms, no Node built-in (the browser entry). */
export function hashText(text: string): string {
  let h = 0xcbf29ce484222325n;
  const bytes = new TextEncoder().encode(text);
  for (const byte of bytes) h = BigInt.asUintN(64, (h ^ BigInt(byte)) * 0x100000001b3n);
  return h.toString(16).padStart(16, '0');
}

/** Row-major strides with 0 on size-1 dimensions, padded to 4. */
export function captureStrides(shape: readonly number[]): [number, number, number, number] {
  const strides: [number, number, number, number] = [0, 0, 0, 0];
  let stride = 1;
  for (let d = shape.length - 1; d >= 0; d--) {
    strides[d] = shape[d] === 1 ? 0 : stride;
    stride *= shape[d];
  }
  return strides;
}

/** A number per captured tensor object, for maskKey: the same expression over other tensors is another mask. */
const tensorIds = new WeakMap<object, number>();
let nextTensorId = 1;
function tensorId(t: object): number {
  let id = tensorIds.get(t);
  if (id === undefined) {
    id = nextTensorId++;
    tensorIds.set(t, id);
  }
  return id;
}

/**
 * What a BlockMask is tied to: the mask's function in its own capture slots (so the key does not change
 * with a score modifier beside it) and the identity of each tensor it reads (docIds of another batch make
 * another mask, whose empty blocks differ).
 */
function maskIdentity(mask: MaskMod, program: SlottedProgram): string {
  const own = { ...program, slots: program.slots.map((_, i) => i) };
  const tensors = mask.captures.map((c) => tensorId(c.tensor)).join('.');
  return `${hashText(generateCuda(null, own, new Set(), false))}${tensors ? `-${tensors}` : ''}`;
}

export interface ModifierSizes {
  readonly B: number;
  readonly N: number;
  readonly T: number;
  readonly S: number;
}

const RANGE = { b: 'B', h: 'N', q: 'T', kv: 'S' } as const;

/**
 * A read indexed by a bare b, h, q or kv runs over that letter's range: its dimension must hold it (or be 1,
 * broadcast). Other index expressions are the caller's to keep in range (the CPU evaluator checks each).
 */
function checkReads(
  what: string,
  tree: Expr,
  captures: readonly CaptureDescriptor[],
  slots: readonly number[],
  sizes: ModifierSizes,
): void {
  const visit = (e: Expr): void => {
    if (e.kind === 'read') {
      const c = captures[slots[e.capture]];
      e.indices.forEach((index, d) => {
        if (index.kind !== 'variable' || index.name === 'score') return;
        const letter = RANGE[index.name];
        const size = c.tensor.shape[d];
        if (size !== 1 && size < sizes[letter]) {
          throw new InvalidArgumentError(
            `${what} captures.${c.name}`,
            `dimension ${d} (indexed by ${index.name}) of size ${letter}=${sizes[letter]} or 1`,
            `[${c.tensor.shape.join(', ')}]`,
          );
        }
      });
    }
    children(e).forEach(visit);
  };
  visit(tree);
}

// A call with modifiers compiles them at validation; the lowered programs and the generated source depend only
// on the expressions and the capture layout, not on the tensors, so they are kept: lowering, generating and
// hashing took ~100-240 µs a call, more than the rest of a call's host time.
const lowered = new WeakMap<Expr, Program>();
function lowerOnce(tree: Expr): Program {
  let program = lowered.get(tree);
  if (!program) {
    program = lower(tree);
    lowered.set(tree, program);
  }
  return program;
}
const treeIds = new WeakMap<Expr, number>();
let nextTreeId = 0;
function treeId(tree: Expr): number {
  let id = treeIds.get(tree);
  if (id === undefined) {
    id = nextTreeId++;
    treeIds.set(tree, id);
  }
  return id;
}
/**
 * ATTNLAB_FOLD_SCORE_FACTORS=1 (config.ts declares and checks it on the CUDA path): read from the environment
 * here, not through config(), because this module is part of the browser entry (attnlab/webgpu, through
 * validation) and config.ts imports Node built-ins that a browser bundle cannot resolve.
 */
function foldScoreFactors(): boolean {
  const env = (globalThis as { process?: { env?: Record<string, string | undefined> } }).process?.env;
  return env?.ATTNLAB_FOLD_SCORE_FACTORS === '1';
}

/** Generated source and its key by expressions, slots, capture types and learned slots (bounded: cleared when full). */
const generated = new Map<string, { readonly cudaSource: string; readonly key: string }>();
const GENERATED_ENTRIES = 256;

export function compileModifiers(
  score: ScoreMod | undefined,
  mask: MaskMod | undefined,
  sizes: ModifierSizes,
  device: Device,
): CompiledModifiers {
  const captures: CaptureDescriptor[] = [];
  const place = (m: ScoreMod | MaskMod): number[] =>
    m.captures.map((c) => {
      const what = `${m.kind} '${m.name}' captures.${c.name}`;
      if (c.tensor.disposed) throw new InvalidArgumentError(what, 'a live Tensor', 'a disposed Tensor');
      if (c.tensor.device !== device)
        throw new InvalidArgumentError(`${what}.device`, `${device} (the query's)`, c.tensor.device);
      const same = captures.findIndex((d) => d.name === c.name);
      if (same >= 0) {
        if (captures[same].tensor !== c.tensor) {
          throw new InvalidArgumentError(
            what,
            `the same tensor as the other modifier's '${c.name}'`,
            'another tensor',
          );
        }
        return same;
      }
      captures.push({
        name: c.name,
        tensor: c.tensor,
        dtype: c.tensor.dtype as 'int32' | 'float32',
        needsGrad: c.learned,
        strides: captureStrides(c.tensor.shape),
      });
      return captures.length - 1;
    });
  const slotted = (m: ScoreMod | MaskMod | undefined): SlottedProgram | null => {
    if (!m) return null;
    const slots = place(m);
    checkReads(`${m.kind} '${m.name}'`, m.tree, captures, slots, sizes);
    return {
      program: lowerOnce(m.tree),
      slots,
      captureTypes: m.captures.map((c) => (c.tensor.dtype === 'int32' ? 'int' : 'float')),
      label: `${m.name}: ${m.expression.replace(/\s+/g, ' ')}`,
    };
  };
  const scoreProgram = slotted(score);
  const maskProgram = slotted(mask);
  if (captures.length > MAX_CAPTURES) {
    throw new InvalidArgumentError(
      'scoreMod/maskMod captures',
      `at most ${MAX_CAPTURES} tensors in all`,
      String(captures.length),
    );
  }
  const learnedSlots = new Set(captures.flatMap((c, i) => (c.needsGrad ? [i] : [])));
  const hasCaptureGrads = learnedSlots.size > 0;
  const learnedLocal = (p: SlottedProgram) =>
    new Set(p.slots.flatMap((slot, i) => (learnedSlots.has(slot) ? [i] : [])));
  const learnedInScore = scoreProgram ? learnedLocal(scoreProgram) : new Set<number>();
  const part = (m: ScoreMod | MaskMod | undefined, p: SlottedProgram | null) =>
    m && p ? `${treeId(m.tree)}:${p.slots.join(',')}:${p.captureTypes.join(',')}` : '-';
  const fold = foldScoreFactors();
  const signature = `${part(score, scoreProgram)}|${part(mask, maskProgram)}|${[...learnedInScore].join(',')}|${hasCaptureGrads}|${fold}`;
  let source = generated.get(signature);
  if (!source) {
    const text = generateCuda(scoreProgram, maskProgram, learnedInScore, hasCaptureGrads, fold);
    source = { cudaSource: text, key: hashText(text) };
    if (generated.size >= GENERATED_ENTRIES) generated.clear();
    generated.set(signature, source);
  }
  const { cudaSource } = source;
  const maskKey = mask && maskProgram ? maskIdentity(mask, maskProgram) : '';

  let host: HostCapture[] | null = null;
  const hostCaptures = (): HostCapture[] => {
    host ??= captures.map((c) => ({
      name: c.name,
      data: c.tensor.toHost().data as Int32Array | Float32Array,
      shape: c.tensor.shape,
      strides: c.strides,
    }));
    return host;
  };
  const local = (p: SlottedProgram): HostCapture[] => {
    const all = hostCaptures();
    return p.slots.map((slot) => all[slot]);
  };
  const compiled: {
    -readonly [K in keyof CompiledModifiers]: CompiledModifiers[K];
  } = {
    key: source.key,
    maskKey,
    cudaSource,
    captures,
    hasScoreMod: scoreProgram !== null,
    hasMaskMod: maskProgram !== null,
    hasCaptureGrads,
    label: [scoreProgram && `scoreMod ${scoreProgram.label}`, maskProgram && `maskMod ${maskProgram.label}`]
      .filter(Boolean)
      .join('; '),
  };
  const at: Point = { b: 0, h: 0, q: 0, kv: 0, score: 0 };
  // Field by field: the evaluators run once per (q, kv) pair, and an object per call is garbage per pair.
  const setPoint = (s: number, b: number, h: number, q: number, kv: number) => {
    at.score = s;
    at.b = b;
    at.h = h;
    at.q = q;
    at.kv = kv;
  };
  if (scoreProgram && score) {
    const what = `scoreMod '${score.name}'`;
    const p: Program = scoreProgram.program;
    const values = new Float64Array(p.instrs.length);
    const adjoints = new Float64Array(p.instrs.length);
    const learned = learnedLocal(scoreProgram);
    compiled.scoreMod = (s, b, h, q, kv) => {
      setPoint(s, b, h, q, kv);
      return evaluate(what, p, local(scoreProgram), at, values);
    };
    compiled.scoreModGrad = (s, g, b, h, q, kv, captureGrads) => {
      setPoint(s, b, h, q, kv);
      const caps = local(scoreProgram);
      evaluate(what, p, caps, at, values);
      const grads = scoreProgram.slots.map((slot) => captureGrads[slot] ?? EMPTY);
      return backward(what, p, caps, learned, at, values, adjoints, g, grads);
    };
  }
  if (maskProgram && mask) {
    const what = `maskMod '${mask.name}'`;
    const p = maskProgram.program;
    const values = new Float64Array(p.instrs.length);
    compiled.maskMod = (b, h, q, kv) => {
      setPoint(0, b, h, q, kv);
      return evaluate(what, p, local(maskProgram), at, values) !== 0;
    };
  }
  return Object.freeze(compiled);
}

const EMPTY = new Float64Array(0);
