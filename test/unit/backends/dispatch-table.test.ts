/**
 * The measured dispatch table (src/backends/dispatch-table.ts) without a GPU: its cases are what the
 * results file it cites says; the measured case speaks only for its own GPU, dtype, head dim,
 * causality and plain long sequences; backends come fastest first, a flash measurement counts only
 * for the kernel measured, and the registry's order fills in the rest.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { deviceOfFile, recordedGbs, tablesFromResults } from '../../../scripts/dispatch-tables.js';
import { validateAttention } from '../../../src/api/validate.js';
import { DECODE_DISPATCH_TABLES, measuredDecodeOrder } from '../../../src/backends/decode-dispatch-table.js';
import type { DeviceClass } from '../../../src/backends/device-dispatch-table.js';
import {
  autoDispatchSummary,
  DISPATCH_TABLES,
  type DispatchTable,
  H200_DISPATCH,
  MIN_MEASURED_LENGTH,
  measuredOrder,
  orderByMeasurement,
} from '../../../src/backends/dispatch-table.js';
import type { AttentionOptions, AttentionProblem } from '../../../src/backends/problem.js';
import { loadResults } from '../../../src/results/files.js';
import type { FloatDType } from '../../../src/tensor/dtype.js';
import { Tensor } from '../../../src/tensor/tensor.js';

function problem(
  H: number,
  options: AttentionOptions = {},
  dtype: FloatDType = 'bfloat16',
  T = 2048,
  Hv = H,
) {
  // The dispatch reads only sizes and flags: zero-filled inputs cost nothing to make.
  const q = Tensor.zeros([1, T, 1, H], dtype);
  const v = Tensor.zeros([1, T, 1, Hv], dtype);
  return validateAttention(q, q, v, options);
}

/** A GPU as dispatch keys it: the H200 of the records, and others by name and compute capability. */
const gpuClass = (gpu: string, computeCapability = '9.0'): DeviceClass => ({
  gpu,
  computeCapability,
  multiprocessors: 132,
  memoryBandwidthGBs: null,
  cudnn: '9.19.0',
});
const H200 = gpuClass('NVIDIA H200');
const H100 = { ...gpuClass('NVIDIA H100 80GB HBM3'), memoryBandwidthGBs: 3352 };
const A100 = gpuClass('NVIDIA A100-SXM4-80GB', '8.0');
const h200 = (flashKernel: 'wgmma' | 'mma' = 'wgmma', device = H200) => ({
  device,
  flashKernel: () => flashKernel,
});
const synthetic = (source: string) => ({
  source,
  provenance: { source, gpu: 'GPU X', commit: null, suite: 'forward', date: null },
  device: gpuClass('GPU X', '9.0'),
});

describe('measured dispatch table', () => {
  it("holds each cited file's GPU as a device class and its provenance, for the decode table too", () => {
    for (const table of DISPATCH_TABLES) {
      assert.equal(table.provenance.source, table.source);
      assert.ok(table.provenance.commit && table.provenance.date, table.source);
    }
    for (const table of DECODE_DISPATCH_TABLES)
      for (const c of table.cases)
        for (const timing of Object.values(c.timing))
          assert.deepEqual(deviceOfFile(timing!.source), table.device, timing!.source);
  });

  it('holds exactly what each cited results file measured', () => {
    for (const source of new Set(DISPATCH_TABLES.map((t) => t.source))) {
      const cited = DISPATCH_TABLES.filter((t) => t.source === source);
      assert.deepEqual(tablesFromResults(loadResults(source), source), cited, source);
    }
  });

  it('orders the backends fastest first, per case, from a table', () => {
    const table: DispatchTable = {
      ...synthetic('synthetic'),
      device: gpuClass('GPU X', '8.9'),
      flashKernel: 'wgmma',
      shape: { B: 1, T: 8192, S: 8192, N: 1 },
      cases: [
        { dtype: 'bfloat16', H: 128, causal: false, tflops: { cudnn: 500, flash: 600, naive: 50 } },
        { dtype: 'bfloat16', H: 128, causal: true, tflops: { cudnn: 500, flash: 400 } },
      ],
    };
    const gpuX = { device: gpuClass('GPU X', '8.9'), flashKernel: () => 'wgmma' as const };
    assert.deepEqual(measuredOrder(problem(128), gpuX, [table])?.order, ['flash', 'cudnn', 'naive']);
    assert.deepEqual(measuredOrder(problem(128, { isCausal: true }), gpuX, [table])?.order, [
      'cudnn',
      'flash',
    ]);
    // The flash measurement is the Hopper kernel's: with the mma.sync kernel it does not count.
    const mma = { device: gpuClass('GPU X', '8.9'), flashKernel: () => 'mma' as const };
    assert.deepEqual(measuredOrder(problem(128), mma, [table])?.order, ['cudnn', 'naive']);
    assert.equal(measuredOrder(problem(128), h200(), [table]), null, 'another architecture');
    // Another GPU of the architecture takes the table (an L4 beside an RTX 4090: both sm_89).
    const l4 = { device: gpuClass('NVIDIA L4', '8.9'), flashKernel: () => 'wgmma' as const };
    assert.equal(measuredOrder(problem(128), l4, [table])?.match, 1);
  });

  it('speaks only for the measured case: plain, long, same dtype and head dims', () => {
    assert.ok(measuredOrder(problem(128), h200()));
    assert.ok(measuredOrder(problem(64, { isCausal: true, keyValueSeqLengths: [1500] }), h200()));
    const bias = Tensor.zeros([1, 1, 2048, 2048], 'bfloat16');
    const mask = Tensor.zeros([1, 1, 2048, 2048], 'bool');
    const outside: Array<[string, ReturnType<typeof problem>]> = [
      ['bias', problem(128, { bias })],
      ['mask', problem(128, { mask })],
      ['window', problem(128, { localWindowSize: [256, 0] })],
      ['short', problem(128, {}, 'bfloat16', MIN_MEASURED_LENGTH - 8)],
      ['unmeasured head dim', problem(96)],
      ['H ≠ Hv', problem(128, {}, 'bfloat16', 2048, 64)],
      ['unmeasured dtype', problem(128, {}, 'float32')],
    ];
    for (const [name, p] of outside) assert.equal(measuredOrder(p, h200()), null, name);
    // The H100 is Hopper too: the H200's table speaks for it; an Ampere GPU has no table.
    assert.equal(measuredOrder(problem(128), h200('wgmma', H100))?.table.device.gpu, 'NVIDIA H200');
    assert.equal(measuredOrder(problem(128), h200('mma', A100)), null);
  });

  it("follows the H200's record at each measured length: cudnn below 8k at H=128, the Hopper kernel from 8k", () => {
    const fastest = (p: AttentionProblem, kernel: 'wgmma' | 'mma' = 'wgmma') =>
      measuredOrder(p, h200(kernel))?.order[0];
    const headline = H200_DISPATCH.find((t) => t.shape.T === 8192)!;
    for (const table of H200_DISPATCH.filter((t) => t.shape.T <= 8192)) {
      for (const c of table.cases) {
        if (c.H !== 128 && table !== headline) continue;
        const p = problem(c.H, { isCausal: c.causal }, 'bfloat16', table.shape.T);
        const { flash, cudnn } = c.tflops;
        const what = `T=${table.shape.T} H=${c.H}${c.causal ? ' causal' : ''}`;
        assert.equal(fastest(p), flash! > cudnn! ? 'flash' : 'cudnn', what);
        assert.equal(fastest(p, 'mma'), 'cudnn', `${what}, flash on mma.sync`);
      }
    }
    // The record itself: short sequences to cudnn, the headline shape to flash (H200_SOURCE).
    assert.equal(fastest(problem(128, {}, 'bfloat16', 1024)), 'cudnn');
    assert.equal(fastest(problem(128, {}, 'bfloat16', 8192)), 'flash');
    // H=192 (the h192 record): the Hopper kernel's D=192 tile leads cudnn, causal or not.
    assert.equal(fastest(problem(192, {}, 'bfloat16', 8192)), 'flash');
    assert.equal(fastest(problem(192, { isCausal: true }, 'bfloat16', 8192)), 'flash');
  });

  it('takes the measured length nearest to the case (in octaves of √(T·S)), per head dim', () => {
    const table = (T: number, flash: number, cudnn: number, H = 128): DispatchTable => ({
      ...synthetic(`synthetic ${T}`),
      flashKernel: 'wgmma',
      shape: { B: 1, T, S: T, N: 1 },
      cases: [{ dtype: 'bfloat16', H, causal: false, tflops: { flash, cudnn } }],
    });
    const tables = [table(1024, 400, 500), table(8192, 600, 500), table(4096, 300, 200, 64)];
    const gpuX = { device: gpuClass('GPU X'), flashKernel: () => 'wgmma' as const };
    const from = (T: number, H = 128) => measuredOrder(problem(H, {}, 'bfloat16', T), gpuX, tables);
    assert.equal(from(1024)?.table.shape.T, 1024);
    assert.equal(from(2048)?.order[0], 'cudnn', '1 octave from 1k, 2 from 8k');
    assert.equal(from(4096)?.order[0], 'flash', '2 octaves from 1k, 1 from 8k');
    assert.equal(from(16384)?.table.shape.T, 8192);
    assert.equal(from(1024, 64)?.table.shape.T, 4096, 'the only length measured at H=64');
    // √(T·S): a short query over a long cache sits between the two.
    const q = Tensor.zeros([1, 1024, 1, 128], 'bfloat16');
    const kv = Tensor.zeros([1, 8192, 1, 128], 'bfloat16');
    const p = validateAttention(q, kv, kv, {});
    assert.equal(
      measuredOrder(p, gpuX, tables)?.table.shape.T,
      1024,
      '√(1k·8k) = 2.9k: 1.5 octaves each way, first wins',
    );
  });

  it('sums up for `attnlab info` what auto follows on a GPU: runs of lengths per case, or none', () => {
    const table = (T: number, flash: number, cudnn: number): DispatchTable => ({
      ...synthetic('synthetic.json'),
      flashKernel: 'wgmma',
      shape: { B: 1, T, S: T, N: 1 },
      cases: [{ dtype: 'bfloat16', H: 128, causal: true, tflops: { flash, cudnn } }],
    });
    const tables = [
      table(8192, 600, 500),
      table(1024, 400, 500),
      table(2048, 450, 500),
      table(32768, 700, 600),
    ];
    assert.equal(
      autoDispatchSummary(gpuClass('GPU X'), ['cudnn', 'flash'], tables),
      'recorded on this GPU (GPU X) (flash = the Hopper kernel; synthetic.json): bfloat16 H=128 causal: ' +
        'cudnn at T=S 1024–2048, flash at T=S 8192–32768; other cases: model: registry order (cudnn, flash)',
    );
    assert.match(
      autoDispatchSummary(gpuClass('GPU Y'), ['cudnn', 'flash'], tables),
      /^recorded on GPU X, same architecture \(sm_90\) \(flash/,
    );
    assert.match(
      autoDispatchSummary(gpuClass('GPU Z', '8.6'), ['cudnn', 'flash'], tables),
      /^model: registry order \(cudnn, flash\): no recorded benchmark for GPU Z's architecture \(sm_86\) \(recorded: GPU X \(sm_90\)\)$/,
    );
    assert.match(
      autoDispatchSummary(null, ['cudnn'], tables),
      /no recorded benchmark for this machine \(no GPU\)/,
    );
    assert.match(
      autoDispatchSummary(H100, ['cudnn']),
      /^recorded on NVIDIA H200, same architecture \(sm_90\).*H=128: cudnn at T=S 1024–2048, flash at T=S 4096–32768/,
    );
  });

  it('puts the measured backends first and keeps the rest in the registry order', () => {
    const table = [{ name: 'cudnn' }, { name: 'flash' }, { name: 'naive' }];
    const names = (order: string[]) => orderByMeasurement(table, order).map((b) => b.name);
    assert.deepEqual(names(['flash', 'cudnn']), ['flash', 'cudnn', 'naive']);
    assert.deepEqual(names(['naive']), ['naive', 'cudnn', 'flash']);
    assert.deepEqual(names(['cudnn']), ['cudnn', 'flash', 'naive']);
    assert.deepEqual(names([]), ['cudnn', 'flash', 'naive']);
  });
});

describe('measured paged-decode table', () => {
  /** The fields the decode table reads: a paged decode step (B, one token, N, K, H) over `lengths`. */
  const step = (
    c: { B: number; N: number; K: number; H: number },
    blockSize: number,
    lengths: number[],
    extra = {},
  ) =>
    ({
      ...c,
      T: 1,
      S: Math.max(...lengths),
      Hv: c.H,
      dtype: 'bfloat16',
      device: 'cuda',
      // A table with room for one more block (a serving system's fixed-width table).
      paged: { blockSize, maxBlocksPerSeq: Math.ceil(Math.max(...lengths) / blockSize) + 1 },
      packed: null,
      bias: null,
      mask: null,
      window: null,
      causal: true,
      alignment: 'bottom_right',
      keyValueSeqLengths: Int32Array.from(lengths),
      implementation: undefined,
      ...extra,
    }) as unknown as AttentionProblem;
  const h200Gpu = H200;

  it('holds exactly what the files it cites recorded', () => {
    for (const table of DECODE_DISPATCH_TABLES)
      for (const c of table.cases)
        for (const [impl, timing] of Object.entries(c.timing))
          assert.equal(
            recordedGbs(c, impl, timing!),
            c.gbs[impl as 'flash' | 'cudnn'],
            `${impl} B=${c.B} S=${c.S} K=${c.K}`,
          );
  });

  it("follows the H200's record: at K=8 and 4 cudnn on dense caches and on most paged ones (flash at block 16 K=8, at B=8 S=128k paged), flash for MQA (paged and dense) and paged B=1", () => {
    const gqa = { B: 64, N: 32, K: 8, H: 128 };
    const first = (p: AttentionProblem) => measuredDecodeOrder(p, h200Gpu)?.order[0];
    // At block 64 cuDNN ahead but for B=8 S=128k (flash 4538 / 4500 against 4480 / 4413 at K=8 / 4); at
    // block 16 (a 16-row page a box) flash ahead at K=8 and at B=8 K=4, cuDNN at B=64 and 128 K=4.
    const first16 = (K: number, B: number, S: number) => first(step({ ...gqa, K, B }, 16, Array(B).fill(S)));
    const first64 = (K: number, B: number, S: number) => first(step({ ...gqa, K, B }, 64, Array(B).fill(S)));
    for (const [B, S] of [
      [64, 16384],
      [8, 131072],
      [128, 8192],
    ]) {
      assert.equal(first16(8, B, S), 'flash', `K=8 B=${B} block 16`);
      assert.equal(first16(4, B, S), B === 8 ? 'flash' : 'cudnn', `K=4 B=${B} block 16`);
      for (const K of [8, 4])
        assert.equal(first64(K, B, S), B === 8 ? 'flash' : 'cudnn', `K=${K} B=${B} block 64`);
    }
    for (const blockSize of [16, 64]) {
      assert.equal(
        first(step({ ...gqa, K: 1, B: 1 }, blockSize, [32768])),
        'cudnn',
        `MQA B=1 S=32k block ${blockSize}`,
      );
      assert.equal(
        first(step({ ...gqa, K: 1 }, blockSize, Array(64).fill(16384))),
        'flash',
        `MQA block ${blockSize}`,
      );
      assert.equal(first(step({ ...gqa, B: 1 }, blockSize, [2048])), 'flash', `B=1 S=2k block ${blockSize}`);
      assert.equal(
        first(step({ ...gqa, B: 1 }, blockSize, [32768])),
        'flash',
        `B=1 S=32k block ${blockSize}`,
      );
    }
    // Ragged lengths count by the tokens held: 64 sequences of 12k–20k are the measured size.
    const ragged = Array.from({ length: 64 }, (_, b) => 12000 + 125 * b);
    assert.equal(first(step(gqa, 64, ragged)), 'cudnn');
    // A dense cache: cudnn wherever it was measured at K=8 and 4 (1M tokens; B=1 S=32k), with or
    // without lengths, flash at K=1 (its TMA kernel); B=1 S=2k was within the run's noise
    // and is not recorded (the registry's order).
    const dense = (c: typeof gqa, S: number, extra = {}) =>
      step(c, 16, Array(c.B).fill(S), { paged: null, keyValueSeqLengths: null, S, ...extra });
    for (const K of [8, 4]) assert.equal(first(dense({ ...gqa, K }, 16384)), 'cudnn', `dense K=${K}`);
    assert.equal(first(dense({ ...gqa, K: 1 }, 16384)), 'flash', 'dense K=1');
    assert.equal(first(dense({ ...gqa, K: 1, B: 1 }, 32768)), 'cudnn', 'dense K=1 B=1 S=32k');
    assert.equal(first(dense({ ...gqa, B: 1 }, 32768)), 'cudnn', 'dense B=1 S=32k');
    assert.equal(first(step(gqa, 16, ragged, { paged: null })), 'cudnn', 'dense with lengths');
    assert.equal(measuredDecodeOrder(dense({ ...gqa, B: 1 }, 2048), h200Gpu), null, 'dense B=1 S=2k');
  });

  it('speaks only for a decode step like the one measured', () => {
    const gqa = { B: 64, N: 32, K: 8, H: 128 };
    const full = Array(64).fill(16384);
    const outside: Array<[string, AttentionProblem]> = [
      ['B=1 S=8k (between the measured 2k and 32k)', step({ ...gqa, B: 1 }, 64, [8192])],
      ['a quarter of the measured tokens', step(gqa, 16, Array(64).fill(4096))],
      ['K=2 (not measured)', step({ ...gqa, K: 2 }, 16, full)],
      ['block size 32 (not measured)', step(gqa, 32, full)],
      ['H=64', step({ ...gqa, H: 64 }, 16, full)],
      ['2 new tokens', step(gqa, 16, full, { T: 2 })],
      ['a window', step(gqa, 16, full, { window: { left: 128, right: 0 } })],
      ['top-left causal', step(gqa, 16, full, { alignment: 'top_left' })],
      ['float16', step(gqa, 16, full, { dtype: 'float16' })],
      ['a packed query', step(gqa, 16, full, { packed: { querySeqOffsets: new Int32Array(65) } })],
      ['a dense cache, 2 new tokens', step(gqa, 16, full, { paged: null, T: 2 })],
      // KVCache's table is tight: it widens as the cache grows, and each width is a new cuDNN graph.
      ['a tight table', step(gqa, 16, full, { paged: { blockSize: 16, maxBlocksPerSeq: 1024 } })],
    ];
    for (const [name, p] of outside) assert.equal(measuredDecodeOrder(p, h200Gpu), null, name);
    assert.equal(measuredDecodeOrder(step(gqa, 16, full), A100), null, 'another architecture');
    assert.equal(measuredDecodeOrder(step(gqa, 16, full), H100)?.match, 1, 'the H100: same architecture');
  });

  it('carries to another bandwidth class of the architecture: flash first where the record has it within 2%', () => {
    const dense = (B: number, S: number, K: number) =>
      step({ B, N: 32, K, H: 128 }, 16, Array(B).fill(S), { paged: null, keyValueSeqLengths: null, S });
    // B=64 S=16k K=8 dense: cudnn 4565 against flash 4516 on the H200 (1.1%): flash on the H100.
    assert.equal(measuredDecodeOrder(dense(64, 16384, 8), H200)?.order[0], 'cudnn');
    const h100 = measuredDecodeOrder(dense(64, 16384, 8), H100);
    assert.deepEqual(h100?.order, ['flash', 'cudnn']);
    assert.equal(h100?.transferred, true);
    // B=1 S=32k K=1 dense: cudnn 832 against flash 664 (25%): cudnn stays first.
    assert.equal(measuredDecodeOrder(dense(1, 32768, 1), H100)?.order[0], 'cudnn');
    // Where flash leads already nothing changes.
    assert.equal(measuredDecodeOrder(dense(64, 16384, 1), H100)?.transferred, false);
  });
});
