/**
 * The GPU's power state beside bench rows on a real GPU (src/bench/gpu-power.ts through the driver's
 * libnvidia-ml): the probe finds attnlab's device by its UUID, the limit is a GPU's, a window over GPU work
 * reads a plausible draw, and a bench row records it. Skips, saying why, without a GPU.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { attention } from '../../../src/api/attention.js';
import { cudaAvailable, synchronize } from '../../../src/backends/cuda/runtime/context.js';
import { gpuPowerProbe, powerProbeReason } from '../../../src/bench/gpu-power.js';
import { describeMachine } from '../../../src/bench/machine.js';
import { measureAttnlabCase } from '../../../src/bench/measure.js';
import { randomNormal } from '../../../src/tensor/random.js';

const cuda = cudaAvailable();
const skip = cuda.ok ? false : `no CUDA device: ${cuda.reason}`;

describe('GPU power state (NVML)', { skip }, () => {
  it("reads the device's limit and a window's draw and capped share", () => {
    const probe = gpuPowerProbe();
    assert.ok(probe, `NVML probe: ${powerProbeReason()}`);
    assert.ok(probe.limitWatts >= 50 && probe.limitWatts <= 2000, `limit ${probe.limitWatts} W`);
    assert.equal(describeMachine().gpu?.powerLimitWatts, probe.limitWatts);
    const [q, k, v] = [0, 1, 2].map((seed) =>
      randomNormal([4, 2048, 16, 128], { seed, dtype: 'bfloat16' }).to('cuda'),
    );
    const end = probe.start();
    const t0 = performance.now();
    while (performance.now() - t0 < 400) attention(q, k, v, { implementation: 'flash' }).output.dispose();
    synchronize();
    const window = end();
    for (const t of [q, k, v]) t.dispose();
    assert.ok(window, 'a window');
    assert.ok(window.cappedPercent >= 0 && window.cappedPercent <= 100, `capped ${window.cappedPercent}%`);
    assert.ok(window.meanWatts > 30 && window.meanWatts < 2 * probe.limitWatts, `${window.meanWatts} W`);
  });
  it('puts the window in a bench row that spans NVML refreshes (~100 ms apart), and none in a ~1 ms one (POWER_MIN_WINDOW_MS)', () => {
    // ~2 ms a call (1.1 TFLOP at ~500 TFLOP/s) × 300: ~0.6 s, five or six refreshes
    const long = measureAttnlabCase(
      { B: 8, T: 4096, S: 4096, N: 16, K: 16, H: 128, dtype: 'bfloat16', causal: false, impl: 'flash' },
      { checkError: false, repeats: 300, minRepeats: 300, budgetMs: 10_000, settleMs: 50 },
    );
    assert.equal(long.status, 'ok', long.reason);
    const power = long.timing?.power;
    assert.ok(power, 'timing.power');
    assert.ok(power.meanWatts > 30, `${power.meanWatts} W`);
    assert.ok(power.sampledMs !== undefined && power.sampledMs >= 100, `sampled ${power.sampledMs} ms`);
    const short = measureAttnlabCase(
      { B: 2, T: 1024, S: 1024, N: 8, K: 8, H: 128, dtype: 'bfloat16', causal: false, impl: 'flash' },
      { checkError: false, repeats: 20, minRepeats: 20, settleMs: 50 },
    );
    assert.equal(short.status, 'ok', short.reason);
    assert.equal(short.timing?.power, undefined, 'under two refreshes: no reading');
  });
});
