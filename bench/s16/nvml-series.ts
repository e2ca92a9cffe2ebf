/**
 * How NVML's power counters move (session 16, call 2): reads the violation and energy counters of attnlab's GPU
 * every ~0.5 ms for 0.6 s while flash attention runs back to back, and prints each reading where a counter
 * changed (host ms, referenceTime µs, violation ns, energy mJ). Says how often each counter updates and whether
 * any goes backwards, which decides how short a window gpu-power.ts can measure (test/gpu/gpu-power.test.ts's
 * bench row of ~1 ms got no window in call 1).
 *   node --import tsx bench/s16/nvml-series.ts
 */
import { attention } from '../../src/api/attention.js';
import { getCudaContext, synchronize } from '../../src/backends/cuda/context.js';
import { nvmlDevice, readPowerCounters } from '../../src/backends/cuda/ffi/nvml.js';
import { gpuUuid } from '../../src/bench/gpu-uuid.js';
import { randomNormal } from '../../src/tensor/random.js';

const uuid = gpuUuid(getCudaContext().properties.ordinal);
if (!uuid) throw new Error('no UUID');
const device = nvmlDevice(uuid);
const [q, k, v] = [0, 1, 2].map((seed) =>
  randomNormal([4, 2048, 16, 128], { seed, dtype: 'bfloat16' }).to('cuda'),
);
attention(q, k, v, { implementation: 'flash' }).output.dispose(); // compiles, cold
synchronize();
const t0 = performance.now();
let last = readPowerCounters(device);
console.log('ms refUs violationNs energyMj');
console.log(`0.000 ${last.referenceUs} ${last.powerViolationNs} ${last.energyMj}`);
let reads = 0;
let backwards = 0;
while (performance.now() - t0 < 600) {
  attention(q, k, v, { implementation: 'flash' }).output.dispose();
  const now = readPowerCounters(device);
  reads++;
  if (
    now.powerViolationNs < last.powerViolationNs ||
    now.energyMj < last.energyMj ||
    now.referenceUs < last.referenceUs
  )
    backwards++;
  if (now.powerViolationNs !== last.powerViolationNs || now.energyMj !== last.energyMj)
    console.log(
      `${(performance.now() - t0).toFixed(3)} ${now.referenceUs} ${now.powerViolationNs} ${now.energyMj}`,
    );
  last = now;
}
synchronize();
console.log(`reads ${reads}, backwards ${backwards}`);
