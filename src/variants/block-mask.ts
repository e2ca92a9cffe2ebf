/**
 * createBlockMask: a mask modifier classified per (batch, head, query block, key block) as empty,
 * partial or full, so the kernels skip empty blocks and drop the per-element mask on full ones.
 */

import { checkInteger, checkKeys, checkOptionsObject, describeValue } from '../arguments.js';
import { InvalidArgumentError } from '../errors.js';
import type { Device } from '../tensor/storage.js';
import { Tensor } from '../tensor/tensor.js';
import { compileModifiers } from './compile.js';
import { children, type Expr } from './expression.js';
import { isModifier, type MaskMod, maskMod as makeMaskMod } from './modifiers.js';
import { BLOCK_EMPTY, BLOCK_FULL, BLOCK_PARTIAL, type BlockMask } from './types.js';

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

/**
 * Evaluates `mask` once per element and stores one byte per block: 0 empty, 1 partial, 2 full.
 * A mask that does not read b (h) is stored once for every batch (head).
 *
 * @example
 * const docs = maskMod('docIds[b, q] == docIds[b, kv] && kv <= q', { docIds });
 * const blockMask = createBlockMask(docs, { B: 1, N: 8, T: 4096, S: 4096 });
 * attention(q, k, v, { maskMod: docs, blockMask });
 */
export function createBlockMask(mask: MaskMod | string, optionsIn: BlockMaskOptions): BlockMask {
  const m = typeof mask === 'string' ? makeMaskMod(mask) : mask;
  if (!isModifier(m, 'maskMod'))
    throw new InvalidArgumentError(
      'maskMod',
      'a maskMod(...) modifier or an expression string',
      describeValue(mask),
    );
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
  const captureDevice = m.captures[0]?.tensor.device;
  const device = options.device ?? captureDevice ?? 'cpu';
  if (device !== 'cpu' && device !== 'cuda')
    throw new InvalidArgumentError(
      'createBlockMask options.device',
      "'cpu' or 'cuda'",
      describeValue(device),
    );
  const compiled = compileModifiers(undefined, m, { B, N, T, S }, captureDevice ?? device);
  const keep = compiled.maskMod;
  if (!keep) throw new Error('unreachable: a compiled maskMod evaluates');
  const Bm = readsVariable(m.tree, 'b') ? B : 1;
  const Nm = readsVariable(m.tree, 'h') ? N : 1;
  const qBlocks = Math.ceil(T / blockQ);
  const kvBlocks = Math.ceil(S / blockKV);
  const kinds = new Uint8Array(Bm * Nm * qBlocks * kvBlocks);
  let at = 0;
  for (let b = 0; b < Bm; b++) {
    for (let h = 0; h < Nm; h++) {
      for (let qb = 0; qb < qBlocks; qb++) {
        for (let kb = 0; kb < kvBlocks; kb++) {
          let kept = 0;
          let total = 0;
          for (let q = qb * blockQ; q < Math.min(T, (qb + 1) * blockQ); q++) {
            for (let kv = kb * blockKV; kv < Math.min(S, (kb + 1) * blockKV); kv++) {
              total++;
              if (keep(b, h, q, kv)) kept++;
            }
          }
          kinds[at++] = kept === 0 ? BLOCK_EMPTY : kept === total ? BLOCK_FULL : BLOCK_PARTIAL;
        }
      }
    }
  }
  const host = Tensor.fromRaw(kinds, [Bm, Nm, qBlocks, kvBlocks], 'bool');
  const result = new MadeBlockMask({
    B,
    N,
    T,
    S,
    blockQ,
    blockKV,
    Bm,
    Nm,
    qBlocks,
    kvBlocks,
    kinds: device === 'cpu' ? host : host.to(device),
    maskKey: compiled.maskKey,
    device,
  });
  MADE.add(result);
  return result;
}
