/**
 * Session 11: why `auto` read 3078 / 2975 GB/s at B=64 S=16k K=1 dense where `flash` read 4094 / 4113 with
 * the same kernel (bench/results/2026-12-02-s11-final). Host time per call of each (50 calls enqueued with
 * no wait, after a warm-up), and the device time of the same 50 (one CUDA event pair around them), dense
 * and block 64: a call whose host time exceeds its device time leaves the GPU idle between calls.
 *   node --import tsx bench/s11/auto-host.ts
 */
import { attention } from '../../src/api/attention.js';
import { getCudaContext } from '../../src/backends/cuda/context.js';
import { CudaEventTimer } from '../../src/bench/cuda-timer.js';
import { deviceRandom, pageTable } from '../decode/device-timing.js';

const [B, S, N, H] = [64, 16384, 32, 128];
getCudaContext();
const q = deviceRandom([B, 1, N, H], 1);
const k = deviceRandom([B, S, 1, H], 2);
const v = deviceRandom([B, S, 1, H], 3);
const table = pageTable(B, S, 64, 1);
const pk = deviceRandom([B * (S / 64), 64, 1, H], 4);
const pv = deviceRandom([B * (S / 64), 64, 1, H], 5);
const lengths = Array(B).fill(S);
const cases = {
  'dense auto': () => attention(q, k, v, {}),
  'dense flash': () => attention(q, k, v, { implementation: 'flash' }),
  'paged64 auto': () => attention(q, pk, pv, { blockTable: table, keyValueSeqLengths: lengths }),
  'paged64 flash': () =>
    attention(q, pk, pv, { blockTable: table, keyValueSeqLengths: lengths, implementation: 'flash' }),
};
for (const round of [1, 2])
  for (const [name, call] of Object.entries(cases)) {
    for (let i = 0; i < 20; i++) call().output.dispose();
    const timer = new CudaEventTimer(1);
    let host = 0;
    let variant = '';
    const device = timer.time(() => {
      const t0 = performance.now();
      let last = call();
      for (let i = 1; i < 50; i++) {
        last.output.dispose();
        last = call();
      }
      host = (performance.now() - t0) / 50;
      variant = `${last.backend}: ${last.variant}`;
      return last.output;
    });
    device.dispose();
    const ms = timer.read()[0] / 50;
    timer.dispose();
    const gbs = (2 * (2 * B * S * H + 2 * B * N * H)) / (ms * 1e-3) / 1e9;
    console.log(
      `round ${round} ${name.padEnd(14)} host ${(host * 1000).toFixed(1)} µs/call, device ${(ms * 1000).toFixed(1)} µs/call ` +
        `(${gbs.toFixed(0)} GB/s)  ${variant}`,
    );
  }
