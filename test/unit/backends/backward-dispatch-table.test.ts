/**
 * The recorded backward table (src/backends/backward-dispatch-table.ts) without a GPU: its numbers are what
 * the files it cites say; a case speaks only for its architecture, dtype, head dim, causality, plain long
 * sequences and the non-deterministic loop; backends come fastest first, and where no case speaks the model
 * (cudnn, flash, naive) decides, saying so.
 */
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { describe, it } from 'node:test';
import { validateAttention } from '../../../src/api/validate.js';
import {
  BACKWARD_DISPATCH_TABLES,
  type BackwardDispatchTable,
  backwardDispatchSummary,
  H100_BACKWARD,
  H200_BACKWARD,
  H200_BACKWARD_FLASH_SOURCE,
  measuredBackwardOrder,
} from '../../../src/backends/backward-dispatch-table.js';
import { backwardModelWords, recordedBackwardDecision } from '../../../src/backends/backward-registry.js';
import type { DeviceClass } from '../../../src/backends/device-dispatch-table.js';
import type { AttentionOptions } from '../../../src/backends/problem.js';
import type { FloatDType } from '../../../src/tensor/dtype.js';
import { Tensor } from '../../../src/tensor/tensor.js';

function problem(
  H: number,
  options: AttentionOptions = {},
  { dtype = 'bfloat16' as FloatDType, T = 8192, deterministic = false, Hv = H } = {},
) {
  // The lookup reads only sizes and flags: zero-filled inputs cost nothing to make.
  const q = Tensor.zeros([1, T, 1, H], dtype);
  const v = Tensor.zeros([1, T, 1, Hv], dtype);
  return { ...validateAttention(q, q, v, options), deterministic };
}

const gpu = (
  name: string,
  computeCapability = '9.0',
  memoryBandwidthGBs: number | null = null,
): DeviceClass => ({
  gpu: name,
  computeCapability,
  multiprocessors: 132,
  memoryBandwidthGBs,
  cudnn: '9.19.0',
});
const H100 = gpu('NVIDIA H100 80GB HBM3', '9.0', 3352);
const H200 = gpu('NVIDIA H200', '9.0', 4916);
const A100 = gpu('NVIDIA A100-SXM4-80GB', '8.0');

/** `causal=<c> <spec>  <ms> ms  <tflops> TFLOP/s` rows of a loops file, by "c spec". */
function loopsRows(file: string): Map<string, number> {
  const rows = new Map<string, number>();
  for (const line of readFileSync(file, 'utf8').split('\n')) {
    const m = /^causal=(true|false) (\S+)\s+[\d.]+ ms\s+([\d.]+) TFLOP\/s/.exec(line);
    if (m) rows.set(`${m[1]} ${m[2]}`, Number(m[3]));
  }
  return rows;
}

/** attnlab's rows of a bench results file, by "<backend> <H> <causal>". */
function benchRows(file: string): Map<string, number> {
  const rows = new Map<string, number>();
  const data = JSON.parse(readFileSync(file, 'utf8')) as {
    rows: Array<{ label: string; H: number; causal: boolean; tflops: number }>;
  };
  for (const r of data.rows) {
    const m = /^attnlab (\w+) /.exec(r.label);
    if (m) rows.set(`${m[1]} ${r.H} ${r.causal}`, Math.round(r.tflops * 10) / 10);
  }
  return rows;
}

describe('the recorded backward table', () => {
  it("the H100's numbers are its loops files' rows: the default loop at each head dim and cudnn", () => {
    // The flash loop each file timed as the default: lean wgmma at H=128 (then behind its switch), wgmma-ws at H=64.
    const loopOf: Record<number, string> = { 128: 'wgmma+lean', 64: 'wgmma-ws' };
    for (const c of H100_BACKWARD.cases) {
      const rows = loopsRows(c.source);
      assert.equal(c.tflops.cudnn, rows.get(`${c.causal} cudnn`), `${c.source} cudnn ${c.causal}`);
      assert.equal(c.tflops.flash, rows.get(`${c.causal} ${loopOf[c.H]}`), `${c.source} flash ${c.causal}`);
      const header = readFileSync(c.source, 'utf8').split('\n')[0];
      assert.equal(header, `# B=4 T=S=8192 N=16 H=${c.H} bf16`, c.source);
    }
  });

  it("the H200's numbers are its bench files' attnlab rows", () => {
    const flash = benchRows(H200_BACKWARD_FLASH_SOURCE);
    for (const c of H200_BACKWARD.cases) {
      assert.equal(c.tflops.cudnn, benchRows(c.source).get(`cudnn ${c.H} ${c.causal}`));
      assert.equal(c.tflops.flash, flash.get(`flash ${c.H} ${c.causal}`));
    }
  });

  it('on an H100: cudnn first at every measured case, from the H100 record', () => {
    for (const H of [64, 128])
      for (const isCausal of [false, true]) {
        const found = measuredBackwardOrder(problem(H, { isCausal }), H100);
        assert.ok(found, `H=${H} causal ${isCausal}`);
        assert.deepEqual(found.order, ['cudnn', 'flash']);
        assert.equal(found.table, H100_BACKWARD);
        assert.equal(found.match, 3);
        const decision = recordedBackwardDecision(problem(H, { isCausal }), H100);
        assert.equal(decision.source, 'recorded');
        assert.match(
          decision.why,
          /^recorded on this GPU \(NVIDIA H100 80GB HBM3\): cudnn [\d.]+ > flash [\d.]+ TFLOP\/s backward/,
        );
      }
  });

  it('on an H200 its own record hides the H100 one: H=128 recorded, H=64 the model', () => {
    assert.equal(measuredBackwardOrder(problem(128), H200)?.table, H200_BACKWARD);
    assert.equal(measuredBackwardOrder(problem(64), H200), null);
    const decision = recordedBackwardDecision(problem(64), H200);
    assert.equal(decision.source, 'model');
    assert.deepEqual(decision.order, ['cudnn', 'flash', 'naive']);
    assert.equal(decision.why, backwardModelWords());
  });

  it('another Hopper GPU takes the first table of its architecture; another architecture none', () => {
    const gh200 = gpu('NVIDIA GH200 480GB', '9.0', 4000);
    const found = measuredBackwardOrder(problem(128, { isCausal: true }), gh200);
    assert.equal(found?.match, 1);
    assert.match(
      recordedBackwardDecision(problem(128), gh200).why,
      /^recorded on NVIDIA H100 80GB HBM3, same architecture \(sm_90\)/,
    );
    assert.equal(measuredBackwardOrder(problem(128), A100), null);
    assert.equal(recordedBackwardDecision(problem(128), A100).source, 'model');
  });

  it('speaks only for the measured kind of backward', () => {
    const S = 8192;
    const cases: Array<[string, ReturnType<typeof problem>]> = [
      ['H=96', problem(96)],
      ['float16', problem(128, {}, { dtype: 'float16' })],
      ['deterministic', problem(128, {}, { deterministic: true })],
      ['T=512', problem(128, {}, { T: 512 })],
      ['Hv ≠ H', problem(128, {}, { Hv: 64 })],
      ['a window', problem(128, { localWindowSize: [256, 0] })],
      ['lengths', problem(128, { keyValueSeqLengths: [S - 5] })],
      ['a bias', problem(128, { bias: Tensor.zeros([1, 1, S, S], 'bfloat16') })],
    ];
    for (const [what, p] of cases) {
      assert.equal(measuredBackwardOrder(p, H100), null, what);
      assert.equal(recordedBackwardDecision(p, H100).source, 'model', what);
    }
  });

  it('orders by the numbers: a record where flash leads puts flash first', () => {
    const flashFirst: BackwardDispatchTable = {
      ...H100_BACKWARD,
      cases: [{ ...H100_BACKWARD.cases[0], tflops: { cudnn: 400, flash: 450 } }],
    };
    const decision = recordedBackwardDecision(problem(128), H100, [flashFirst]);
    assert.deepEqual(decision.order, ['flash', 'cudnn']);
    assert.match(decision.why, /flash 450 > cudnn 400/);
  });

  it("`attnlab info`'s line: the table that applies, or none", () => {
    const model = backwardModelWords();
    assert.match(
      backwardDispatchSummary(H100, model),
      /^recorded on this GPU \(NVIDIA H100 80GB HBM3\) \(T=S=8192\): bfloat16 H=128: cudnn, bfloat16 H=128 causal: cudnn, bfloat16 H=64: cudnn, bfloat16 H=64 causal: cudnn; other cases: model: registry order \(cudnn, flash, naive\)/,
    );
    assert.match(
      backwardDispatchSummary(A100, model),
      /no recorded backward for this architecture \(recorded: NVIDIA H100 80GB HBM3, NVIDIA H200\)/,
    );
    assert.match(backwardDispatchSummary(null, model), /no GPU/);
    assert.equal(BACKWARD_DISPATCH_TABLES.length, 2);
  });
});
