/**
 * Several devices in one process (src/backends/cuda/runtime/context.ts) against the stand-in libcuda of
 * test/fake-device/cudnn-fake.c built with two devices: onDevice makes the device's primary context
 * current and getCudaContext() return it, restores the previous one (also on a throw), and the memory
 * pool never hands a block of one device to another.
 */
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import { fileURLToPath } from 'node:url';
import koffi from 'koffi';
import {
  deviceContext,
  deviceCount,
  getCudaContext,
  onDevice,
} from '../../src/backends/cuda/runtime/context.js';
import { memoryStats } from '../../src/backends/cuda/runtime/memory.js';
import { gpuPowerProbe, powerProbeReason } from '../../src/bench/gpu-power.js';
import { describeMachine, gpuUuid } from '../../src/bench/machine.js';
import { reloadConfig } from '../../src/config.js';
import { InvalidArgumentError } from '../../src/errors.js';
import { Tensor } from '../../src/tensor/tensor.js';

const dir = mkdtempSync(join(tmpdir(), 'attnlab-fake-devices-'));
const library = join(dir, 'libcuda.so.1');
const source = fileURLToPath(new URL('./cudnn-fake.c', import.meta.url));
const built = spawnSync(
  'cc',
  ['-shared', '-fPIC', '-O1', '-DFAKE_DEVICE_COUNT=2', '-o', library, source, '-lm'],
  {
    encoding: 'utf8',
  },
);
const skip = built.status === 0 ? false : `no C compiler: ${built.error?.message ?? built.stderr}`;
process.env.ATTNLAB_LIBCUDA = library;
// No NVML here: the machine record goes without a power limit and says nothing of it (gpu-power.ts).
process.env.ATTNLAB_NVML = join(dir, 'no-libnvidia-ml.so.1');
delete process.env.ATTNLAB_DISABLE_CUDA;
reloadConfig();

const current = () => koffi.address(koffi.load(library).func('void *fake_current_context()')());

describe('several devices in one process (stand-in driver with 2 devices)', { skip }, () => {
  it("names each device by its UUID as nvidia-smi writes it, and a results file's machine records device 0's", () => {
    assert.equal(gpuUuid(0), 'GPU-00010203-0405-0607-0809-0a0b0c0d0e0f');
    assert.equal(gpuUuid(1), 'GPU-01020304-0506-0708-090a-0b0c0d0e0f10');
    assert.equal(describeMachine().gpu?.uuid, gpuUuid(0));
    assert.equal(describeMachine().gpu?.powerLimitWatts, undefined, 'no NVML: no power limit');
    assert.equal(gpuPowerProbe(), null);
    assert.match(powerProbeReason(), /libnvidia-ml/);
  });
  it('onDevice switches the current context and getCudaContext(), and switches back', () => {
    assert.equal(deviceCount(), 2);
    const zero = getCudaContext();
    assert.equal(zero.context, 0x1234n);
    const one = onDevice(1, () => {
      assert.equal(current(), 0x1334n);
      return getCudaContext();
    });
    assert.equal(one, deviceContext(1));
    assert.equal(one.context, 0x1334n);
    assert.notEqual(one.stream, zero.stream);
    assert.equal(current(), 0x1234n);
    assert.equal(getCudaContext(), zero);
    assert.throws(() =>
      onDevice(1, () => {
        throw new Error('inside');
      }),
    );
    assert.equal(current(), 0x1234n);
    assert.equal(getCudaContext(), zero);
  });

  it('refuses an ordinal past the count, naming the device', () => {
    assert.throws(
      () => onDevice(2, () => 0),
      (e: unknown) =>
        e instanceof InvalidArgumentError && e.argument === 'device' && /\[0, 2\)/.test(e.message),
    );
  });

  it('keeps a free list per device: a block released on device 1 is reused there, never on device 0', () => {
    const shape = [4096];
    onDevice(1, () => Tensor.zeros(shape).to('cuda').dispose());
    const before = memoryStats();
    Tensor.zeros(shape).to('cuda').dispose(); // device 0: a new block from the driver
    const afterZero = memoryStats();
    assert.equal(afterZero.driverAllocations, before.driverAllocations + 1);
    onDevice(1, () => Tensor.zeros(shape).to('cuda').dispose()); // device 1: its own block again
    const afterOne = memoryStats();
    assert.equal(afterOne.driverAllocations, afterZero.driverAllocations);
    assert.equal(afterOne.cacheHits, afterZero.cacheHits + 1);
  });
});
