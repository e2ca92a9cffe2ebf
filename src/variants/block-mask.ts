/**
 * createBlockMask: a mask modifier classified per (batch, head, query block, key block) as empty,
 * partial or full, so the kernels skip empty blocks and drop the per-element mask on full ones.
 */

import { checkInteger, checkKeys, checkOptionsObject, describeValue } from '../arguments.js';
import { InvalidArgumentError } from '../errors.js';
import type { Device } from '../tensor/storage.js';
import type { Tensor } from '../tensor/tensor.js';
import { compileModifiers } from './compile.js';
import { children, type Expr } from './expression.js';
import { isModifier, type MaskMod, maskMod as makeMaskMod } from './modifiers.js';
import { BLOCK_EMPTY, BLOCK_FULL, BLOCK_PARTIAL, type BlockMask, type CompiledModifiers } from './types.js';

export interface BlockMaskOptions {
  B: number;
  N: number;
  T: number;
  S: number;
  /** Query rows per block; default 128 (the kernels' widest query tile). */
  blockQ?: number;
  /** Keys per block; default 128. */
  blockKV?: number;
  /** Where the block mask lives; default the captured tensors' device, else 'cpu'. */
  device?: Device;
}

/** Block masks createBlockMask made: a copy or a Proxy of one is refused (its kinds could not be trusted). */
const MADE = new WeakSet<object>();

/** A class instance, so option snapshots keep it as it is (arguments.ts copies only plain objects). */
class MadeBlockMask implements BlockMask {
  readonly B!: number;
  readonly N!: number;
  readonly T!: number;
  readonly S!: number;
  readonly blockQ!: number;
  readonly blockKV!: number;
  readonly Bm!: number;
  readonly Nm!: number;
  readonly qBlocks!: number;
  readonly kvBlocks!: number;
  readonly kinds!: Tensor;
  readonly maskKey!: string;
  readonly device!: Device;
  constructor(fields: BlockMask) {
    Object.assign(this, fields);
    Object.freeze(this);
  }

  toString(): string {
    return `a BlockMask of ${this.blockQ}×${this.blockKV} blocks for B=${this.B} N=${this.N} T=${this.T} S=${this.S}`;
  }
}

export function isBlockMask(value: unknown): value is BlockMask {
  return typeof value === 'object' && value !== null && MADE.has(value);
}

/** Whether the expression reads the variable `name` anywhere. */
export function readsVariable(e: Expr, name: 'b' | 'h' | 'q' | 'kv'): boolean {
  return (e.kind === 'variable' && e.name === name) || children(e).some((c) => readsVariable(c, name));
}

/** A checked createBlockMask request: the mask compiled alone, its sizes and where it is evaluated. */
export interface BlockMaskRequest {
  readonly mask: MaskMod;
  readonly compiled: CompiledModifiers;
  readonly B: number;
  readonly N: number;
  readonly T: number;
  readonly S: number;
  readonly blockQ: number;
  readonly blockKV: number;
  /** 1 when the mask does not read b, else B; Nm likewise with h. */
  readonly Bm: number;
  readonly Nm: number;
  readonly device: Device;
}

/** createBlockMask's arguments checked, the mask compiled (the GPU kernel takes its source). */
export function checkBlockMaskRequest(mask: unknown, optionsIn: unknown): BlockMaskRequest {
  const m = typeof mask === 'string' ? makeMaskMod(mask) : mask;
  if (!isModifier(m, 'maskMod'))
    throw new InvalidArgumentError(
      'maskMod',
      'a maskMod(...) modifier or an expression string',
      describeValue(mask),
    );
  const modifier = m as MaskMod;
  const options = checkOptionsObject<BlockMaskOptions>(
    'createBlockMask options',
    optionsIn,
    'an object { B, N, T, S, blockQ?, blockKV?, device? }',
  );
  checkKeys('createBlockMask options', options, ['B', 'N', 'T', 'S', 'blockQ', 'blockKV', 'device'], {});
  const size = (letter: 'B' | 'N' | 'T' | 'S') =>
    checkInteger(letter, options[letter], 1, 2 ** 31 - 1, 'a positive integer');
  const [B, N, T, S] = [size('B'), size('N'), size('T'), size('S')];
  const blockQ = checkInteger('blockQ', options.blockQ ?? 128, 1, 2 ** 16, 'a positive integer');
  const blockKV = checkInteger('blockKV', options.blockKV ?? 128, 1, 2 ** 16, 'a positive integer');
  const captureDevice = modifier.captures[0]?.tensor.device;
  const device = options.device ?? captureDevice ?? 'cpu';
  if (device !== 'cpu' && device !== 'cuda')
    throw new InvalidArgumentError(
      'createBlockMask options.device',
      "'cpu' or 'cuda'",
      describeValue(device),
    );
  // Every capture on the mask's device (compileModifiers says which one is not).
  const compiled = compileModifiers(undefined, modifier, { B, N, T, S }, device);
  return {
    mask: modifier,
    compiled,
    B,
    N,
    T,
    S,
    blockQ,
    blockKV,
    Bm: readsVariable(modifier.tree, 'b') ? B : 1,
    Nm: readsVariable(modifier.tree, 'h') ? N : 1,
    device,
  };
}

/** The kinds [Bm, Nm, qBlocks, kvBlocks] by evaluating the mask on the host at every element. */
export function classifyOnHost(r: BlockMaskRequest): Uint8Array {
  const keep = r.compiled.maskMod;
  if (!keep) throw new Error('unreachable: a compiled maskMod evaluates');
  const { Bm, Nm, T, S, blockQ, blockKV } = r;
  const qBlocks = Math.ceil(T / blockQ);
  const kvBlocks = Math.ceil(S / blockKV);
  const kinds = new Uint8Array(Bm * Nm * qBlocks * kvBlocks);
  let at = 0;
  for (let b = 0; b < Bm; b++) {
    for (let h = 0; h < Nm; h++) {
      for (let qb = 0; qb < qBlocks; qb++) {
        for (let kb = 0; kb < kvBlocks; kb++) {
          let kept = false;
          let dropped = false;
          // Stops at the first element of each kind: then the block is partial whatever follows.
          for (let q = qb * blockQ; q < Math.min(T, (qb + 1) * blockQ) && !(kept && dropped); q++) {
            for (let kv = kb * blockKV; kv < Math.min(S, (kb + 1) * blockKV); kv++) {
              if (keep(b, h, q, kv)) kept = true;
              else dropped = true;
              if (kept && dropped) break;
            }
          }
          kinds[at++] = !kept ? BLOCK_EMPTY : dropped ? BLOCK_PARTIAL : BLOCK_FULL;
        }
      }
    }
  }
  return kinds;
}

/** The BlockMask of a request and its kinds tensor (host or device). */
export function makeBlockMask(r: BlockMaskRequest, kinds: Tensor): BlockMask {
  const made = new MadeBlockMask({
    B: r.B,
    N: r.N,
    T: r.T,
    S: r.S,
    blockQ: r.blockQ,
    blockKV: r.blockKV,
    Bm: r.Bm,
    Nm: r.Nm,
    qBlocks: Math.ceil(r.T / r.blockQ),
    kvBlocks: Math.ceil(r.S / r.blockKV),
    kinds,
    maskKey: r.compiled.maskKey,
    device: r.device,
  });
  MADE.add(made);
  return made;
}
