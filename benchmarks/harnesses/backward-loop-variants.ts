/**
 * Times the fused flash backward's dK/dV loops side by side in one process, on one input set:
 * the mma.sync loop at its default tiles and at others (ATTNLAB_FLASH_BWD_TILES), and the Hopper
 * wgmma loop (ATTNLAB_FLASH_BWD_KERNEL=wgmma), switched by setting the variables and re-reading the
 * config between calls. Rounds alternate the variants so that the H200's power-cap drift falls on all
 * of them alike; each variant's gradients are compared with the first one's on a strided sample
 * (a cross-check at the large shape, not the test: test/gpu/ holds those).
 *
 *   node --import tsx benchmarks/harnesses/backward-loop-variants.ts [--profile] B T N H mma wgmma mma:128x32x8 wgmma+det …
 *
 * `cudnn` times attnlab's cudnn backward in the same rounds (the ratio of the same run); `default` runs the
 * loop and switches attnlab picks for the shape (nothing set), e.g. `default default+det cudnn`.
 *
 * A `+det` suffix runs the variant with `deterministic: true` (on the wgmma loops the dQ adds in a fixed
 * order of key blocks, hopper/bwd_dq_order.cuh; on mma.sync the dK/dV loop without dQ, then the dQ pass);
 * `+detpass` the same on a wgmma loop through the dQ pass (ATTNLAB_FLASH_BWD_DET=pass). A wgmma loop runs
 * lean (v6/v7, docs/internals/backward.md) unless `+nolean` (before any `+det`) asks for
 * ATTNLAB_FLASH_BWD_LEAN=0 (v5's code), e.g. `wgmma+nolean`, `wgmma-ws+nolean+det`; `+lean` names it
 * explicitly. Every other switch is named or off (=0), whatever its default: `+pp` and `+dqkeys` (before
 * any `+det`) run wgmma-ws with dQ split by keys, with the warpgroups' turns or without
 * (ATTNLAB_FLASH_BWD_PINGPONG=1|keys), e.g. `wgmma-ws+pp`; `+flagged` runs wgmma-ws with its producer cleaning
 * only flagged steps (ATTNLAB_FLASH_BWD_WS_FLAGGED=1) and `+dqswz` either wgmma loop with the bank-spreading
 * dQ staging (ATTNLAB_FLASH_BWD_DQ_SWIZZLE=1), `+early` either wgmma loop reading its first row statistics
 * before the waits (ATTNLAB_FLASH_BWD_STATS_EARLY=1), e.g. `wgmma-ws+flagged+pp+dqswz`, `wgmma+early+dqswz`.
 *
 * Past a head dim of 128 the loop runs with ATTNLAB_FLASH_BWD_WIDE=1 set on the command line; `+pair` (before
 * any `+det`) runs its form with both dQ passes in flight (ATTNLAB_FLASH_BWD_WIDE=pair), e.g. `wgmma+pair+det`; `+halves`
 * that with dV, dK over each warpgroup's own queries issued early (=halves).
 *
 * --profile runs each variant's backward once and nothing else (for ncu -k regex:dkdv).
 */
import { attentionVjp } from '../../src/api/backward.js';
import { synchronize } from '../../src/backends/cuda/runtime/context.js';
import { attentionFlops } from '../../src/backends/problem.js';
import { timeOnStream } from '../../src/bench/cuda-timer.js';
import { seededInput } from '../../src/bench/measure.js';
import { reloadConfig } from '../../src/config.js';
import type { Tensor } from '../../src/tensor/tensor.js';

const args = process.argv.slice(2);
const profile = args[0] === '--profile';
const [B, T, N, H] = args.slice(profile ? 1 : 0, profile ? 5 : 4).map(Number);
const specs = args.slice(profile ? 5 : 4);
const ROUNDS = 3;
const CALLS = 6;

/** ATTNLAB_FLASH_BWD_WIDE as the process started (1 takes head dims past 128); `+pair` sets it to pair. */
const wideAtStart = process.env.ATTNLAB_FLASH_BWD_WIDE;

function select(spec: string): void {
  if (spec.includes('+halves')) process.env.ATTNLAB_FLASH_BWD_WIDE = 'halves';
  else if (spec.includes('+pair')) process.env.ATTNLAB_FLASH_BWD_WIDE = 'pair';
  else if (wideAtStart === undefined) delete process.env.ATTNLAB_FLASH_BWD_WIDE;
  else process.env.ATTNLAB_FLASH_BWD_WIDE = wideAtStart;
  const [kernel, tiles] = spec
    .replace(/\+(pair|halves)/, '')
    .replace(/\+(no)?lean/, '')
    .replace(/\+(pp|dqkeys|flagged|dqswz|early)/g, '')
    .replace(/\+det(pass)?$/, '')
    .split(':');
  if (spec.includes('+nolean')) process.env.ATTNLAB_FLASH_BWD_LEAN = '0';
  else delete process.env.ATTNLAB_FLASH_BWD_LEAN;
  // A spec names every switch it runs with: one it leaves out is off (=0), whatever the default. `default`
  // (with any +det) sets none of them: the loop and switches attnlab picks for the shape.
  const shipped = kernel === 'default';
  const set = (name: string, value: string) => {
    if (shipped) delete process.env[name];
    else process.env[name] = value;
  };
  set('ATTNLAB_FLASH_BWD_PINGPONG', spec.includes('+pp') ? '1' : spec.includes('+dqkeys') ? 'keys' : '0');
  for (const [suffix, name] of [
    ['+flagged', 'ATTNLAB_FLASH_BWD_WS_FLAGGED'],
    ['+dqswz', 'ATTNLAB_FLASH_BWD_DQ_SWIZZLE'],
    ['+early', 'ATTNLAB_FLASH_BWD_STATS_EARLY'],
  ] as const) {
    set(name, spec.includes(suffix) ? '1' : '0');
  }
  if (spec.endsWith('+detpass')) process.env.ATTNLAB_FLASH_BWD_DET = 'pass';
  else delete process.env.ATTNLAB_FLASH_BWD_DET;
  if (kernel === 'cudnn' || shipped) delete process.env.ATTNLAB_FLASH_BWD_KERNEL;
  else process.env.ATTNLAB_FLASH_BWD_KERNEL = kernel;
  if (tiles) process.env.ATTNLAB_FLASH_BWD_TILES = tiles;
  else delete process.env.ATTNLAB_FLASH_BWD_TILES;
  reloadConfig();
}

/** bf16 bits → float, every 9973rd element (a prime stride crosses rows, heads and columns). */
function sample(t: Tensor): Float64Array {
  const bits = t.toHost().data as Uint16Array;
  const out = new Float64Array(Math.ceil(bits.length / 9973));
  const f = new Float32Array(1);
  const u = new Uint32Array(f.buffer);
  for (let i = 0, j = 0; i < bits.length; i += 9973, j++) {
    u[0] = bits[i] << 16;
    out[j] = f[0];
  }
  return out;
}

console.log(`# B=${B} T=S=${T} N=${N} H=${H} bf16`);
const shape = [B, T, N, H] as const;
const [q, k, v, dO] = [0, 1, 2, 3].map((i) => seededInput(shape, 17 + i, 'bfloat16').to('cuda'));
for (const causal of [false, true]) {
  const plain = attentionVjp(q, k, v, { implementation: 'flash', isCausal: causal });
  const det = specs.some((s) => /\+det(pass)?$/.test(s))
    ? attentionVjp(q, k, v, { implementation: 'flash', isCausal: causal, deterministic: true })
    : plain;
  const cudnn = specs.includes('cudnn')
    ? attentionVjp(q, k, v, { implementation: 'cudnn', isCausal: causal })
    : plain;
  const vjpOf = (spec: string) => (spec === 'cudnn' ? cudnn : /\+det(pass)?$/.test(spec) ? det : plain);
  const flops = attentionFlops({ B, T, S: T, N, H, causal }) * 2.5;
  const times = new Map<string, number[]>(specs.map((s) => [s, []]));
  const variants = new Map<string, string>();
  const first = new Map<string, Float64Array>();
  const worst = new Map<string, number>();
  for (const spec of specs) {
    select(spec);
    const started = performance.now();
    const g = vjpOf(spec).backward(dO);
    synchronize();
    // Progress, so that a run cut at its cap shows how far it came (the first run compiles its modules).
    console.log(
      `# causal=${causal} ${spec}: first run ${(performance.now() - started).toFixed(0)} ms, compiles included`,
    );
    variants.set(spec, g.variant);
    for (const [name, t] of [
      ['dQ', g.dQuery],
      ['dK', g.dKey],
      ['dV', g.dValue],
    ] as const) {
      const s = sample(t);
      const ref = first.get(name);
      if (!ref) first.set(name, s);
      else {
        let diff = 0;
        let scale = 0;
        for (let i = 0; i < s.length; i++) {
          diff = Math.max(diff, Math.abs(s[i] - ref[i]));
          scale = Math.max(scale, Math.abs(ref[i]));
        }
        worst.set(spec, Math.max(worst.get(spec) ?? 0, diff / (scale || 1)));
      }
      t.dispose();
    }
  }
  if (!profile) {
    for (let round = 0; round < ROUNDS; round++) {
      for (const spec of specs) {
        select(spec);
        const series = timeOnStream(
          () => {
            const g = vjpOf(spec).backward(dO);
            for (const t of [g.dQuery, g.dKey, g.dValue]) t.dispose();
          },
          { iterations: CALLS, warmup: 2 },
        );
        times.get(spec)?.push(...series.times);
      }
    }
  }
  synchronize();
  for (const spec of specs) {
    const all = [...(times.get(spec) ?? [])].sort((a, b) => a - b);
    const ms = all[Math.floor(all.length / 2)];
    const rate = ms ? (flops / (ms * 1e-3) / 1e12).toFixed(1) : '-';
    const diff = (worst.get(spec) ?? 0).toExponential(2);
    console.log(
      `causal=${causal} ${spec.padEnd(14)} ${ms ? ms.toFixed(3) : '-'} ms  ${rate} TFLOP/s  max|Δ|/max=${diff}  ${variants.get(spec)}`,
    );
  }
  for (const f of new Set([plain, det, cudnn])) {
    f.output.dispose();
    f.logSumExp.dispose();
  }
}
