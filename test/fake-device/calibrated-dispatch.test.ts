/**
 * The calibrated dispatch table without a GPU: shape classes, the timing rule (stand-in backends and
 * a stand-in clock), the cache file (keyed by GPU and versions, written atomically, a bad file read as
 * none), device classes, and the registry's three steps (calibrated, recorded, model) on the stand-in
 * CUDA device of test/fake-device/fake-cuda.ts, including ATTNLAB_TUNE=auto calibrating on first sight.
 */
import assert from 'node:assert/strict';
import { existsSync, mkdtempSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import { attention } from '../../src/api/attention.js';
import { attentionBackward } from '../../src/api/backward.js';
import { validateAttention } from '../../src/api/validate.js';
import { validateBackward } from '../../src/api/validate-backward.js';
import { NO_PLAN, unsupported } from '../../src/backends/backend.js';
import { backwardDecision, chooseBackwardBackend } from '../../src/backends/backward-registry.js';
import {
  type CalibrationKey,
  type Contender,
  calibrate,
  calibrationFile,
  loadCalibration,
  operationOf,
  saveCalibration,
  shapeClass,
} from '../../src/backends/calibrated-dispatch-table.js';
import { bandwidthClass, deviceMatch, nearestTables } from '../../src/backends/device-dispatch-table.js';
import type { AttentionOptions, AttentionProblem } from '../../src/backends/problem.js';
import { autoDecision, calibratedDecision } from '../../src/backends/registry.js';
import {
  currentCalibration,
  currentDeviceClass,
  reloadCalibration,
} from '../../src/backends/tuning-registry.js';
import { runTune } from '../../src/bench/tune.js';
import { reloadConfig } from '../../src/config.js';
import { randomNormal } from '../../src/tensor/random.js';
import { Tensor } from '../../src/tensor/tensor.js';
import { useFakeCudaStack } from './fake-cuda.js';

const { skip } = useFakeCudaStack('attnlab-calibrated-');

/** The dispatch reads only sizes and flags: zero-filled inputs (random ones of B=4 T=8192 took seconds each). */
function problem(B: number, T: number, H: number, options: AttentionOptions = {}): AttentionProblem {
  const q = Tensor.zeros([B, T, 2, H], 'bfloat16');
  return validateAttention(q, q, q, options);
}

/** `p` as if its inputs were on the GPU: the dispatch reads only sizes and flags. */
const onCuda = (p: AttentionProblem): AttentionProblem => ({ ...p, device: 'cuda' });

const key = (driver = 'CUDA 13.0'): CalibrationKey => ({
  gpu: 'NVIDIA H100 80GB HBM3',
  uuid: '00112233',
  computeCapability: '9.0',
  multiprocessors: 132,
  memoryBandwidthGBs: 3352,
  driver,
  cudnn: '9.19.0',
  nvrtc: '13.0',
  attnlab: '0.1.0',
});

describe('shape classes', () => {
  it('put problems of the same kernels and octaves together, and split what changes the choice', () => {
    const base = shapeClass('forward', problem(1, 64, 32));
    assert.equal(shapeClass('forward', problem(1, 60, 32)), base, 'T=60 and 64: the same octave');
    assert.notEqual(shapeClass('forward', problem(1, 128, 32)), base, 'another octave of T');
    assert.notEqual(shapeClass('forward', problem(1, 64, 64)), base, 'another head dim');
    assert.notEqual(shapeClass('forward', problem(1, 64, 32, { isCausal: true })), base, 'causal');
    assert.notEqual(shapeClass('forward', problem(4, 64, 32)), base, 'four times the heads a launch');
    assert.notEqual(shapeClass('backward', problem(1, 64, 32)), base, 'another operation');
    assert.match(base, /^forward bfloat16 H32 Hv32 full dense G1 T2\^6 S2\^6 BN2\^1$/);
  });

  it('count a decode step by its cached tokens and batch', () => {
    const step = problem(2, 1, 32);
    assert.equal(operationOf(step, false), 'decode');
    assert.equal(operationOf(step, true), 'backward');
    assert.equal(operationOf(problem(2, 8, 32), false), 'forward');
    assert.match(shapeClass('decode', step), /^decode .* N2 B2\^1 tokens2\^1$/);
  });
});

describe('calibration', () => {
  /** A backend whose calls take `ms` each, on a clock that moves by `wallMs` per call. */
  const standIn = (name: string, ms: number[], clock: { t: number }, wallMs = 10) => {
    let calls = 0;
    const contender: Contender = {
      name,
      timeOnce: () => {
        clock.t += wallMs;
        return ms[calls++ % ms.length];
      },
    };
    return { contender, calls: () => calls };
  };

  it('orders the backends by their median time and skips one that fails, with why', () => {
    const clock = { t: 0 };
    const cudnn = standIn('cudnn', [1.2, 1.1, 9.0, 1.15], clock);
    const flash = standIn('flash', [1.0, 1.05, 1.0], clock);
    const broken: Contender = {
      name: 'naive',
      timeOnce: () => {
        throw new Error('out of memory');
      },
    };
    const entry = calibrate([cudnn.contender, broken, flash.contender], {
      budgetMs: 300,
      now: () => clock.t,
    });
    assert.deepEqual(entry.order, ['flash', 'cudnn']);
    assert.equal(entry.ms.flash, 1.0);
    assert.ok(entry.ms.cudnn < 2, 'one slow call does not move the median');
    assert.deepEqual(entry.skipped, { naive: 'out of memory' });
  });

  it('keeps within the budget: an equal share per backend, at least 3 timed calls, at most maxCalls', () => {
    const clock = { t: 0 };
    const a = standIn('a', [1], clock, 10);
    const b = standIn('b', [2], clock, 10);
    calibrate([a.contender, b.contender], { budgetMs: 100, now: () => clock.t });
    // 50 ms each at 10 ms a call: the warm-up and 4 timed calls.
    assert.equal(a.calls(), 5);
    assert.equal(b.calls(), 5);
    assert.ok(clock.t <= 100, `${clock.t} ms`);
    const slow = standIn('slow', [1], clock, 1000);
    calibrate([slow.contender], { budgetMs: 10, now: () => clock.t });
    assert.equal(slow.calls(), 4, 'a call longer than the budget: warm-up and 3 timed calls');
    const fast = standIn('fast', [1], clock, 0);
    calibrate([fast.contender], { budgetMs: 10, maxCalls: 7, now: () => clock.t });
    assert.equal(fast.calls(), 8);
  });
});

describe('the calibrated file', () => {
  const dir = mkdtempSync(join(tmpdir(), 'attnlab-calibration-'));

  it('is one file per GPU and versions, saved atomically and read back', () => {
    const file = calibrationFile(dir, key());
    assert.match(file, /NVIDIA-H100-80GB-HBM3-[0-9a-f]{16}\.json$/);
    assert.notEqual(calibrationFile(dir, key('CUDA 13.1')), file, 'a new driver starts a new file');
    const entry = {
      order: ['flash'],
      ms: { flash: 1 },
      skipped: {},
      measured: 'B=1',
      at: '2026-12-06T00:00:00Z',
    };
    saveCalibration(file, { format: 1, key: key(), entries: { c: entry } });
    assert.deepEqual(loadCalibration(file, key()).entries, { c: entry });
    assert.deepEqual(
      readdirSync(dir).filter((f) => f.endsWith('.tmp')),
      [],
      'no temporary file left',
    );
  });

  it('counts a missing, unreadable, foreign or malformed file as empty', () => {
    const file = join(dir, 'x.json');
    assert.deepEqual(loadCalibration(file, key()).entries, {}, 'missing');
    writeFileSync(file, '{ not json');
    assert.deepEqual(loadCalibration(file, key()).entries, {}, 'unreadable');
    writeFileSync(
      file,
      JSON.stringify({ format: 1, key: key('CUDA 12.0'), entries: { c: { order: ['a'], ms: {} } } }),
    );
    assert.deepEqual(loadCalibration(file, key()).entries, {}, 'another key');
    writeFileSync(file, JSON.stringify({ format: 1, key: key(), entries: { c: { order: 'flash' } } }));
    assert.deepEqual(loadCalibration(file, key()).entries, {}, 'malformed entry');
  });
});

describe('device classes', () => {
  const gpu = (name: string, cc: string, sms: number | null, gbs: number | null) => ({
    gpu: name,
    computeCapability: cc,
    multiprocessors: sms,
    memoryBandwidthGBs: gbs,
    cudnn: null,
  });
  const h100 = gpu('NVIDIA H100 80GB HBM3', '9.0', 132, 3352);

  it('match by architecture, then SM count and bandwidth class, then name', () => {
    assert.equal(bandwidthClass(3352), 1.5);
    assert.equal(bandwidthClass(4916), 2.5);
    assert.equal(bandwidthClass(null), null);
    assert.equal(deviceMatch(gpu('NVIDIA H200', '9.0', 132, 4916), h100), 1);
    assert.equal(deviceMatch(gpu('NVIDIA H100 SXM5', '9.0', 132, 3350), h100), 2);
    assert.equal(deviceMatch(h100, h100), 3);
    assert.equal(deviceMatch(gpu('NVIDIA A100', '8.0', 108, 2039), h100), 0);
  });

  it('take only the nearest tables: a table of this GPU hides one of its architecture', () => {
    const tables = [
      { device: gpu('NVIDIA H200', '9.0', 132, 4916), id: 'h200' },
      { device: h100, id: 'h100' },
      { device: gpu('NVIDIA L4', '8.9', 58, 300), id: 'l4' },
    ];
    assert.deepEqual(
      nearestTables(tables, h100).tables.map((t) => t.id),
      ['h100'],
    );
    assert.deepEqual(
      nearestTables(tables, gpu('NVIDIA H800', '9.0', 132, 3352)).tables.map((t) => t.id),
      ['h100'],
      'same class',
    );
    assert.deepEqual(nearestTables(tables, gpu('NVIDIA A10', '8.6', 72, 600)), { tables: [], match: 0 });
  });
});

describe('auto on a stand-in GPU: calibrated, then recorded, then the model', { skip }, () => {
  const long = () => onCuda(problem(4, 8192, 128));

  it('follows the recorded Hopper table where nothing was calibrated', () => {
    const device = currentDeviceClass();
    assert.equal(device.computeCapability, '9.0', 'the stand-in is an sm_90 GPU');
    const decision = autoDecision(long());
    assert.equal(decision?.source, 'recorded');
    assert.match(decision!.why, /recorded on NVIDIA H200, same architecture \(sm_90\)/);
    assert.equal(autoDecision(onCuda(problem(1, 64, 32)))?.source, 'model', 'a short case: no record');
    assert.equal(autoDecision(problem(1, 64, 32)), null, 'a CPU problem');
  });

  it('remembers a decision per shape until the settings or a calibrated table change', () => {
    const first = autoDecision(long());
    assert.equal(autoDecision(long()), first, 'the same shape: the remembered decision');
    assert.notEqual(autoDecision(onCuda(problem(4, 4096, 128))), first, 'another length');
    reloadCalibration();
    const again = autoDecision(long());
    assert.notEqual(again, first, 'a calibrated table read again: decided again');
    assert.deepEqual(again, first);
  });

  it('takes a calibrated entry first, unless ATTNLAB_TUNE=0', () => {
    const { file, table } = currentCalibration();
    const shape = shapeClass('forward', long());
    const entry = {
      order: ['cudnn', 'flash'],
      ms: { cudnn: 1, flash: 2 },
      skipped: {},
      measured: 'B=4',
      at: 'now',
    };
    saveCalibration(file, { ...table, entries: { [shape]: entry } });
    // The table is read once per process; reloadCalibration reads the file again.
    assert.equal(autoDecision(long())?.source, 'recorded', 'not read yet');
    reloadCalibration();
    const decision = autoDecision(long());
    assert.equal(decision?.source, 'calibrated');
    assert.deepEqual(decision?.order, ['cudnn', 'flash']);
    assert.match(decision!.why, /^calibrated on this GPU: cudnn 1\.000 ms < flash 2\.000 ms \(B=4, now\)$/);
    process.env.ATTNLAB_TUNE = '0';
    reloadConfig();
    assert.equal(autoDecision(long())?.source, 'recorded');
    delete process.env.ATTNLAB_TUNE;
    reloadConfig();
  });

  it('attnlab tune calibrates its cases, saves each, and auto follows them', () => {
    const c = { operation: 'forward', B: 1, T: 256, S: 256, N: 2, K: 2, H: 64, causal: false } as const;
    const { file, cases } = runTune({
      cases: [c, { ...c, operation: 'backward' }],
      budgetMs: 5,
      reset: true,
    });
    assert.equal(cases.length, 2);
    const [forward, backward] = cases;
    const order = forward.entry?.order ?? [];
    assert.ok(order.includes('cudnn') && order.includes('flash'), order.join(', '));
    assert.match(forward.shapeClass, /^forward bfloat16 H64/);
    assert.match(backward.shapeClass, /^backward bfloat16 H64/);
    const onDisk = JSON.parse(readFileSync(file, 'utf8'));
    assert.deepEqual(Object.keys(onDisk.entries).sort(), [backward.shapeClass, forward.shapeClass].sort());
    const p = onCuda(problem(1, 256, 64));
    assert.equal(autoDecision(p)?.source, 'calibrated');
    assert.deepEqual(autoDecision(p)?.order, forward.entry!.order);
  });

  it("the backward: attnlab tune times cudnn's and flash's, and auto's backward follows the entry, else the model", () => {
    const c = { operation: 'backward', B: 1, T: 256, S: 256, N: 2, K: 2, H: 64, causal: true } as const;
    const { cases } = runTune({ cases: [c], budgetMs: 5 });
    const timed = cases[0].entry;
    assert.ok(timed, cases[0].note);
    assert.deepEqual([...timed.order].sort(), ['cudnn', 'flash'], JSON.stringify(timed));
    const input = (seed: number) => randomNormal([1, 256, 2, 64], { seed, dtype: 'bfloat16' }).to('cuda');
    const [q, k, v, dOut] = [1, 2, 3, 4].map(input);
    const forward = attention(q, k, v, { isCausal: true, returnLogSumExp: true });
    const p = validateBackward(q, k, v, forward.output, forward.logSumExp, dOut, { isCausal: true });
    const shape = shapeClass('backward', p);
    assert.equal(shape, cases[0].shapeClass, 'the tuned class is the call’s');
    // The model's order is cudnn first; a calibrated entry that ranks flash first is what auto runs.
    const { file, table } = currentCalibration();
    const entry = {
      order: ['flash', 'cudnn'],
      ms: { flash: 1, cudnn: 2 },
      skipped: {},
      measured: 'B=1',
      at: 'now',
    };
    saveCalibration(file, { ...table, entries: { ...table.entries, [shape]: entry } });
    reloadCalibration();
    const decision = backwardDecision(p);
    assert.equal(decision?.source, 'calibrated');
    assert.match(decision!.why, /^calibrated on this GPU: flash 1\.000 ms < cudnn 2\.000 ms/);
    assert.equal(chooseBackwardBackend(p).backend.name, 'flash');
    const ran = attentionBackward(q, k, v, forward.output, forward.logSumExp!, dOut, { isCausal: true });
    assert.equal(ran.backend, 'flash');
    for (const t of [ran.dQuery, ran.dKey, ran.dValue]) t.dispose();
    process.env.ATTNLAB_TUNE = '0';
    reloadConfig();
    try {
      assert.equal(backwardDecision(p)?.source, 'model');
      assert.equal(chooseBackwardBackend(p).backend.name, 'cudnn');
    } finally {
      delete process.env.ATTNLAB_TUNE;
      reloadConfig();
    }
  });

  it('ATTNLAB_TUNE=auto times the backends that take a new class once, saves it, and follows it', () => {
    process.env.ATTNLAB_TUNE = 'auto';
    process.env.ATTNLAB_TUNE_BUDGET_MS = '5';
    reloadConfig();
    try {
      const runs: Record<string, number> = { a: 0, b: 0, c: 0 };
      const standIn = (name: 'a' | 'b' | 'c', ok: boolean) => ({
        name,
        device: 'cuda' as const,
        plan: () => (ok ? NO_PLAN : unsupported('not this one')),
        run: () => {
          runs[name]++;
          return { output: { dispose() {} }, variant: name };
        },
      });
      const table = [standIn('a', true), standIn('b', false), standIn('c', true)];
      const p = onCuda(problem(2, 512, 64, { isCausal: true }));
      const first = calibratedDecision('forward', p, table);
      assert.equal(first?.source, 'calibrated');
      assert.match(first!.why, /^calibrated now on this GPU/);
      assert.deepEqual([...first!.order].sort(), ['a', 'c'], 'only the backends that take it');
      assert.equal(runs.b, 0);
      assert.ok(runs.a >= 4 && runs.c >= 4, JSON.stringify(runs));
      const { file, table: saved } = currentCalibration();
      assert.ok(existsSync(file));
      const onDisk = JSON.parse(readFileSync(file, 'utf8'));
      assert.deepEqual(onDisk.entries[shapeClass('forward', p)].order, first!.order);
      assert.ok(saved.entries[shapeClass('forward', p)]);
      const before = { ...runs };
      const again = calibratedDecision('forward', p, table);
      assert.match(again!.why, /^calibrated on this GPU/);
      assert.deepEqual(runs, before, 'a class seen before is not timed again');
      // One backend alone: nothing to choose, nothing timed.
      const single = calibratedDecision('forward', onCuda(problem(2, 256, 64)), [standIn('a', true)]);
      assert.equal(single, null);
    } finally {
      delete process.env.ATTNLAB_TUNE;
      delete process.env.ATTNLAB_TUNE_BUDGET_MS;
      reloadConfig();
    }
  });
});
