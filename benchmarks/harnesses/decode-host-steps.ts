/**
 * CPU timing of host steps of one flash decode call that need no GPU (issue 16: a B=1 S=2k paged16
 * call spends ~24 µs above its ~17 µs of kernels, benchmarks/results/h200/decode/2026-12-01-heads-kernel-cudnn-paged; a B=64 S=16k
 * block-16 MQA call takes 585 µs against ~190 of kernels, benchmarks/results/h200/decode/2026-12-01-persistent-kernel-library-calls): validation (also of a
 * 65,600-entry block table), the int32 cache's content compare of such a table, and
 * the DecodeParams marshalling of both launches — as decode.ts does it (bytes written once, copied by
 * each launch) and as it did before (36 field objects, then a field-by-field layout and write per
 * launch, which packStruct reproduces). Best of 5 rounds of 20,000 calls each; no GPU, no CUDA.
 *   node --import tsx benchmarks/harnesses/decode-host-steps.ts
 */
import { validateAttention } from '../../src/api/validate.js';
import { DECODE_PARAM_TYPES, marshalDecodeParams } from '../../src/backends/cuda/flash/decode/decode.js';
import { packStruct, structLayout } from '../../src/backends/cuda/runtime/launch.js';
import { randomNormal } from '../../src/tensor/random.js';
import { sameInts } from '../../src/tensor/same-ints.js';
import { Tensor } from '../../src/tensor/tensor.js';
import { pageTable } from './decode-timing.js';

function best(f: () => unknown, calls = 20_000, rounds = 5): number {
  let least = Number.POSITIVE_INFINITY;
  for (let r = 0; r < rounds; r++) {
    const started = process.hrtime.bigint();
    for (let i = 0; i < calls; i++) f();
    least = Math.min(least, Number(process.hrtime.bigint() - started) / calls / 1000);
  }
  return least;
}

const B = 1,
  S = 2048,
  N = 32,
  K = 8,
  H = 128,
  blockSize = 16,
  blocks = S / blockSize;
const query = randomNormal([B, 1, N, H], { seed: 1, dtype: 'bfloat16' });
const pool = randomNormal([blocks, blockSize, K, H], { seed: 2, dtype: 'bfloat16' });
const options = {
  blockTable: [Array.from({ length: blocks }, (_, i) => i)],
  keyValueSeqLengths: [S],
  isCausal: true,
};
const values = {
  pointers: Array.from({ length: 12 }, (_, i) => 0x7f0000000000n + BigInt(i) * 4096n),
  strides: [N * H, H, K * H, H, K * H, H, N * H, H],
  ints: [B, 1, S, N, K, H, H, N / K, blockSize, blocks, 1, 1 << 29, 1 << 29],
  scaleLog2: Math.LOG2E / Math.sqrt(H),
  flags: 3,
  rowsTotal: B * N,
};
const arena = new Uint8Array(4096);
const before = () => {
  const { pointers, strides, ints, scaleLog2, flags, rowsTotal } = values;
  const all = [pointers, strides, ints, [scaleLog2, flags, rowsTotal]].flat();
  const fields = DECODE_PARAM_TYPES.map((type, i) => ({ type, value: all[i] }));
  structLayout(fields);
  for (let launch = 0; launch < 2; launch++) arena.set(packStruct(fields).bytes, 16);
};
const now = () => {
  const arg = marshalDecodeParams(values);
  if (arg.type !== 'bytes') throw new Error('DecodeParams: bytes expected');
  for (let launch = 0; launch < 2; launch++) arena.set(arg.bytes, 16);
};
// A large table: B=64, S=16k, block 16 (65,600 entries with one spare column), validated and looked up
// every call; head dims of 16 keep the host pool small (the table's cost does not depend on them).
const big = { B: 64, S: 16384, H: 16 };
const bigBlocks = (big.B * big.S) / blockSize;
const bigQuery = randomNormal([big.B, 1, 4, big.H], { seed: 3, dtype: 'bfloat16' });
const bigPool = Tensor.zeros([bigBlocks, blockSize, 1, big.H], 'bfloat16');
const bigTable = pageTable(big.B, big.S, blockSize, 1);
const bigOptions = { blockTable: bigTable, keyValueSeqLengths: Array(big.B).fill(big.S) };
const tableInts = bigTable.toHost().data as Int32Array;
const kept = tableInts.slice();
const elementLoop = (a: Int32Array, b: Int32Array) => {
  if (a.length !== b.length) return false;
  for (let i = 0; i < a.length; i++) if (a[i] !== b[i]) return false;
  return true;
};
const rows: Array<[string, number]> = [
  ['validateAttention (paged, B=1 S=2k)', best(() => validateAttention(query, pool, pool, options))],
  [
    'validateAttention (paged, 65,600 entries)',
    best(() => validateAttention(bigQuery, bigPool, bigPool, bigOptions), 200),
  ],
  ['int32 cache compare, element loop (before)', best(() => elementLoop(tableInts, kept), 200)],
  ['int32 cache compare, sameInts (now)', best(() => sameInts(tableInts, kept), 200)],
  ['DecodeParams, 2 launches: before', best(before)],
  ['DecodeParams, 2 launches: now', best(now)],
];
for (const [name, us] of rows) console.log(`${name.padEnd(44)} ${us.toFixed(2)} µs`);
