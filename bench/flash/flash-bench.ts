/**
 * Times attnlab's CUDA flash kernel against PyTorch's FlashAttention-2 backend in one run:
 * B=4, T=S=8192, N=16, bf16, H ∈ {64, 128, 256}, causal and not; for each shape every tile
 * configuration given with --tiles ('table' = the tile table's choice). CUDA events around each
 * call, 5 warm-up calls, median of 30. Writes a JSON and prints a table.
 *
 *   node --import tsx bench/flash/flash-bench.ts --out results.json [--heads 64,128,256]
 *        [--tiles table,128x64x4,64:128x128x4] [--torch] [--memory] [--f32]
 * --tiles: 'H:tiles' entries apply to that head dim only. --torch runs bench/flash/torch_flash.py
 * (python3). --memory adds peak device memory of naive, flash and cudnn across T (B=1, N=16, H=128).
 */
import { execFileSync } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { attention } from '../../src/api/attention.js';
import { validateAttention } from '../../src/api/validate.js';
import { getCudaContext, synchronize, targetArch } from '../../src/backends/cuda/context.js';
import { flashKernel } from '../../src/backends/cuda/flash/backend.js';
import { flashVariant } from '../../src/backends/cuda/flash/variant.js';
import { kernelAttributes } from '../../src/backends/cuda/launch.js';
import { memoryStats, resetPeakMemory } from '../../src/backends/cuda/memory.js';
import { attentionFlops } from '../../src/backends/problem.js';
import { CudaEventTimer } from '../../src/bench/cuda-timer.js';
import { median } from '../../src/bench/stats.js';
import { Tensor } from '../../src/tensor/tensor.js';

const args = process.argv.slice(2);
const flag = (name: string, fallback: string) => {
  const i = args.indexOf(`--${name}`);
  return i >= 0 ? args[i + 1] : fallback;
};
const heads = flag('heads', '64,128,256').split(',').map(Number);
const tilesList = flag('tiles', 'table').split(',');
const out = flag('out', 'flash-bench.json');
const [B, T, N] = [4, 8192, 16];

/** Uniform bf16 in [−2, 2) from a xorshift: 200M values in seconds, where Box–Muller takes minutes. */
function randomBf16(shape: number[], seed: number): Tensor {
  const n = shape.reduce((a, b) => a * b, 1);
  const bits = new Uint16Array(n);
  const f32 = new Float32Array(1);
  const u32 = new Uint32Array(f32.buffer);
  let x = seed >>> 0 || 1;
  for (let i = 0; i < n; i++) {
    x ^= x << 13;
    x ^= x >>> 17;
    x ^= x << 5;
    f32[0] = ((x >>> 0) / 2 ** 32) * 4 - 2;
    bits[i] = u32[0] >>> 16;
  }
  return Tensor.fromRaw(bits, shape, 'bfloat16').to('cuda');
}

interface Row {
  H: number;
  causal: boolean;
  tiles: string;
  variant: string;
  registers: number;
  spillBytes: number;
  ms: number;
  tflops: number;
  torchMs?: number;
  torchTflops?: number;
  ratio?: number;
}

getCudaContext();
const timer = new CudaEventTimer(30);
const rows: Row[] = [];
for (const H of heads) {
  const [q, k, v] = [1, 2, 3].map((s) => randomBf16([B, T, N, H], s * 7919 + H));
  for (const causal of [false, true]) {
    for (const entry of tilesList) {
      const [only, tiles] = entry.includes(':')
        ? [Number(entry.split(':')[0]), entry.split(':')[1]]
        : [H, entry];
      if (only !== H) continue;
      if (tiles === 'table') delete process.env.ATTNLAB_FLASH_TILES;
      else process.env.ATTNLAB_FLASH_TILES = tiles;
      let variant = '';
      try {
        const call = () => attention(q, k, v, { isCausal: causal, implementation: 'flash' });
        for (let i = 0; i < 5; i++) {
          const r = call();
          variant = r.variant;
          r.output.dispose();
        }
        for (let i = 0; i < 30; i++) timer.time(call).output.dispose();
        const ms = median(timer.read());
        const problem = validateAttention(q, k, v, { isCausal: causal, implementation: 'flash' });
        const attrs = kernelAttributes(flashKernel(flashVariant(problem, targetArch())));
        const tflops = attentionFlops({ B, N, T, S: T, H, causal }) / (ms * 1e-3) / 1e12;
        rows.push({
          H,
          causal,
          tiles,
          variant,
          registers: attrs.registers,
          spillBytes: attrs.localBytes,
          ms,
          tflops,
        });
        console.log(
          `H=${H} causal=${causal} ${variant}: ${ms.toFixed(3)} ms ${tflops.toFixed(1)} TFLOP/s regs ${attrs.registers} local ${attrs.localBytes}`,
        );
      } catch (error) {
        console.log(
          `H=${H} causal=${causal} tiles ${tiles}: failed: ${error instanceof Error ? error.message.slice(0, 300) : error}`,
        );
        timer.read();
      }
    }
  }
  for (const t of [q, k, v]) t.dispose();
}
delete process.env.ATTNLAB_FLASH_TILES;

let torch: {
  torch: string;
  device: string;
  rows: Array<{ H: number; causal: boolean; ms: number; tflops: number }>;
} | null = null;
if (args.includes('--torch')) {
  const shapes = heads.flatMap((H) => [false, true].map((causal) => ({ B, T, N, H, causal })));
  const script = join(dirname(fileURLToPath(import.meta.url)), 'torch_flash.py');
  const text = execFileSync(process.env.PYTHON ?? 'python3', [script, JSON.stringify(shapes)], {
    encoding: 'utf8',
  });
  torch = JSON.parse(text.trim().split('\n').at(-1)!);
  for (const row of rows) {
    const peer = torch!.rows.find((r) => r.H === row.H && r.causal === row.causal);
    if (!peer) continue;
    row.torchMs = peer.ms;
    row.torchTflops = peer.tflops;
    row.ratio = row.tflops / peer.tflops;
  }
}

console.log('\n| H | causal | variant | regs | local B | ms | TFLOP/s | torch FA2 TFLOP/s | ratio |');
console.log('|---|---|---|---|---|---|---|---|---|');
for (const r of rows) {
  const peer = r.torchTflops === undefined ? '–' : r.torchTflops.toFixed(1);
  const ratio = r.ratio === undefined ? '–' : `${r.ratio.toFixed(2)}×`;
  console.log(
    `| ${r.H} | ${r.causal} | ${r.variant} | ${r.registers} | ${r.spillBytes} | ${r.ms.toFixed(3)} | ${r.tflops.toFixed(1)} | ${peer} | ${ratio} |`,
  );
}
// The float32 (FMA) kernel at a smaller shape, for the record: it is the correctness path for
// float32 inputs, not a tensor-core kernel.
const f32Rows: Array<{ shape: string; causal: boolean; variant: string; ms: number; tflops: number }> = [];
if (args.includes('--f32')) {
  const [Bf, Tf, Nf, Hf] = [1, 4096, 16, 128];
  const [q, k, v] = [1, 2, 3].map((s) =>
    randomBf16([Bf, Tf, Nf, Hf], s).toHost().astype('float32').to('cuda'),
  );
  for (const causal of [false, true]) {
    const call = () => attention(q, k, v, { isCausal: causal, implementation: 'flash' });
    let variant = '';
    for (let i = 0; i < 3; i++) {
      const r = call();
      variant = r.variant;
      r.output.dispose();
    }
    for (let i = 0; i < 20; i++) timer.time(call).output.dispose();
    const ms = median(timer.read());
    const tflops = attentionFlops({ B: Bf, N: Nf, T: Tf, S: Tf, H: Hf, causal }) / (ms * 1e-3) / 1e12;
    f32Rows.push({ shape: `B=${Bf} T=S=${Tf} N=${Nf} H=${Hf} float32`, causal, variant, ms, tflops });
    console.log(`float32 causal=${causal} ${variant}: ${ms.toFixed(3)} ms ${tflops.toFixed(2)} TFLOP/s`);
  }
}

interface MemoryRow {
  impl: string;
  T: number;
  peakBytes: number | null;
  note?: string;
}
const memory: MemoryRow[] = [];
if (args.includes('--memory')) {
  // Growth of the pool's peak over the live inputs during one call: what the call itself needed.
  for (const Tm of [1024, 2048, 4096, 8192]) {
    const [q, k, v] = [1, 2, 3].map((s) => randomBf16([1, Tm, N, 128], s));
    for (const impl of ['naive', 'flash', 'cudnn'] as const) {
      try {
        attention(q, k, v, { implementation: impl }).output.dispose(); // plans and kernels built
        synchronize();
        resetPeakMemory();
        const before = memoryStats().currentBytes;
        const r = attention(q, k, v, { implementation: impl });
        synchronize();
        memory.push({ impl, T: Tm, peakBytes: memoryStats().peakBytes - before });
        r.output.dispose();
      } catch (error) {
        memory.push({
          impl,
          T: Tm,
          peakBytes: null,
          note: error instanceof Error ? error.message.slice(0, 200) : String(error),
        });
      }
    }
    for (const t of [q, k, v]) t.dispose();
  }
  console.log(
    '\n| T | naive | flash | cudnn |  (peak device memory above the inputs, MiB; B=1, N=16, H=128 bf16)',
  );
  console.log('|---|---|---|---|');
  for (const Tm of [1024, 2048, 4096, 8192]) {
    const cell = (impl: string) => {
      const row = memory.find((m) => m.impl === impl && m.T === Tm);
      return row?.peakBytes == null ? `n/a (${row?.note ?? ''})` : (row.peakBytes / 2 ** 20).toFixed(1);
    };
    console.log(`| ${Tm} | ${cell('naive')} | ${cell('flash')} | ${cell('cudnn')} |`);
  }
}

const { properties } = getCudaContext();
writeFileSync(
  out,
  `${JSON.stringify(
    {
      command: `node --import tsx bench/flash/flash-bench.ts ${args.join(' ')}`,
      date: new Date().toISOString(),
      device: properties.name,
      shape: { B, T, S: T, N, dtype: 'bfloat16' },
      timing: "CUDA events around each call on attnlab's stream; 5 warm-up calls; median of 30",
      torch: torch ? { version: torch.torch, device: torch.device } : null,
      rows,
      f32: f32Rows,
      memory,
    },
    null,
    2,
  )}\n`,
);
console.log(`wrote ${out}`);
