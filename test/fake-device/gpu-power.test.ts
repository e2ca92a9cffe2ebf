/**
 * The GPU's power state beside bench rows (src/bench/gpu-power.ts, src/backends/cuda/ffi/nvml.ts): the window
 * between two counter readings, and NVML through koffi against a stand-in libnvidia-ml (test/fake-device/nvml-fake.c)
 * beside the stand-in driver (cudnn-fake.c), on a machine without a GPU: the device found by its UUID, the
 * power limit, the counters read as NVML writes them, NVML's failures as DeviceError with its text.
 */
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import { fileURLToPath } from 'node:url';
import koffi from 'koffi';
import { enforcedPowerLimitWatts, nvmlDevice, readPowerCounters } from '../../src/backends/cuda/ffi/nvml.js';
import { gpuPowerProbe, POWER_MIN_WINDOW_MS, powerBetween } from '../../src/bench/gpu-power.js';
import { describeMachine } from '../../src/bench/machine.js';
import { collectInfo } from '../../src/cli/info.js';
import { reloadConfig } from '../../src/config.js';
import { DeviceError } from '../../src/errors.js';

const dir = mkdtempSync(join(tmpdir(), 'attnlab-fake-nvml-'));
const here = (name: string) => fileURLToPath(new URL(name, import.meta.url));
const build = (source: string, name: string) =>
  spawnSync('cc', ['-shared', '-fPIC', '-O1', '-o', join(dir, name), here(source), '-lm'], {
    encoding: 'utf8',
  });
const built = [build('./cudnn-fake.c', 'libcuda.so.1'), build('./nvml-fake.c', 'libnvidia-ml.so.1')];
const skip = built.every((b) => b.status === 0)
  ? false
  : `no C compiler: ${built.map((b) => b.error?.message ?? b.stderr).join(' ')}`;
process.env.ATTNLAB_LIBCUDA = join(dir, 'libcuda.so.1');
process.env.ATTNLAB_NVML = dir;
delete process.env.ATTNLAB_DISABLE_CUDA;
reloadConfig();

const counters = (referenceUs: number, powerViolationNs: number, energyMj: number) => ({
  referenceUs: BigInt(referenceUs),
  powerViolationNs: BigInt(powerViolationNs),
  energyMj: BigInt(energyMj),
});

describe('power window between two NVML readings', () => {
  it("takes the capped share over NVML's reference clock and the mean power over the host's time", () => {
    const w = powerBetween(counters(1e6, 0, 0), counters(1.5e6, 1e8, 350_000), 520, 700);
    assert.deepEqual(w, { cappedPercent: 20, meanWatts: 700, sampledMs: 500, limitWatts: 700 });
  });
  it('clamps the share to 100%', () => {
    assert.equal(powerBetween(counters(0, 0, 0), counters(1000, 5e6, 0), 300, 700)?.cappedPercent, 100);
  });
  it('gives nothing for a window under two refreshes, without a refresh, or with a counter gone backwards', () => {
    assert.equal(powerBetween(counters(0, 0, 0), counters(1e5, 1e6, 10), 1.2, 700), null, 'a ~1 ms row');
    assert.equal(powerBetween(counters(7, 0, 0), counters(7, 2e8, 10), 400, 700), null, 'no refresh');
    assert.equal(powerBetween(counters(9, 0, 0), counters(7, 0, 0), 400, 700), null, 'reference clock back');
    assert.equal(powerBetween(counters(0, 10, 0), counters(1000, 5, 0), 400, 700), null);
    assert.equal(powerBetween(counters(0, 0, 10), counters(1000, 0, 5), 400, 700), null);
  });
});

describe('NVML through koffi (stand-in library)', { skip }, () => {
  it('finds the device by its UUID, reads the limit and the counters as nvml.h lays them out', () => {
    const device = nvmlDevice('GPU-00010203-0405-0607-0809-0a0b0c0d0e0f');
    assert.equal(device, 0xd00dn);
    assert.equal(enforcedPowerLimitWatts(device), 700);
    const a = readPowerCounters(device);
    const b = readPowerCounters(device);
    assert.equal(b.referenceUs - a.referenceUs, 10_000n, 'referenceTime, µs: the first u64');
    assert.equal(b.powerViolationNs - a.powerViolationNs, 2_500_000n, 'violationTime, ns: the second');
    assert.equal(b.energyMj - a.energyMj, 7000n);
  });
  it("turns NVML's failures into DeviceError with its text", () => {
    assert.throws(
      () => nvmlDevice('GPU-ffffffff-0000-0000-0000-000000000000'),
      (e: unknown) =>
        e instanceof DeviceError &&
        /nvmlDeviceGetHandleByUUID/.test(e.message) &&
        /Not Found/.test(e.message),
    );
  });
  it("probes attnlab's device once: the limit in the machine record, a window over the calls", () => {
    const probe = gpuPowerProbe();
    assert.ok(probe, 'the stand-in answers');
    assert.equal(probe.limitWatts, 700);
    assert.equal(probe.start()(), null, 'a window under POWER_MIN_WINDOW_MS of host time: no reading');
    const end = probe.start();
    Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, POWER_MIN_WINDOW_MS + 5);
    const window = end();
    assert.ok(window);
    assert.equal(window.cappedPercent, 25, '2.5 ms of every 10 ms');
    assert.equal(window.limitWatts, 700);
    assert.ok(window.meanWatts > 0);
    assert.equal(gpuPowerProbe(), probe, 'made once');
    assert.equal(describeMachine().gpu?.powerLimitWatts, 700);
    assert.match(collectInfo()['power limit'], /^700 W \(NVML/, '`attnlab info` says it');
    // A counter that stops answering mid-run leaves the row without a window, and never throws.
    const stop = probe.start();
    koffi.load(join(dir, 'libnvidia-ml.so.1')).func('void fake_set_violation_unsupported(int)')(1);
    assert.equal(stop(), null);
  });
});
