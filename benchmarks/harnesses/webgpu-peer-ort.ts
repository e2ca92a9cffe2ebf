/**
 * onnxruntime-node's WebGPU execution provider on a one-node graph (com.microsoft
 * MultiHeadAttention: query, key, value as [B, T, N·H], num_heads N, unidirectional for causal),
 * beside attnlab's webgpu forward on the same inputs and shape: issue #44's other peer in Node. The
 * graph is written here as ONNX protobuf bytes (a few messages, no onnx package). onnxruntime-node
 * is not a dependency of attnlab (291 MB installed; its Linux x64 part, the only one this needs, is
 * 47 MB): `--modules <dir>` names a node_modules folder holding onnxruntime-node and
 * onnxruntime-common (scripts/webgpu-peers.sh prepares one), else they are looked up beside the
 * repository's own. ORT's WebGPU EP carries its own Dawn and opens its own device on the same
 * adapter.
 *
 * Each shape is tried from the issue's (B=4 T=S=4096 N=16 H=128 f16) down (B, then N, halved)
 * until ORT runs it; its output is compared with attnlab's before both are timed (wall clock of a
 * run / of a call through onSubmittedWorkDone, median of `--reps` after a warm-up; ORT's run
 * includes copying the inputs in and the output out, reported with the upload-free attnlab figure
 * and a figure for ORT's copy alone). One JSON line a row.
 * Run: node --import tsx benchmarks/harnesses/webgpu-peer-ort.ts [--modules dir] [--reps 5] [--small]
 *   [--dtype float32] [--ep cpu]
 */
import { existsSync, readFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { pathToFileURL } from 'node:url';
import { attention } from '../../src/api/attention.js';
import { problemFlops } from '../../src/backends/problem.js';
import { initWebgpu } from '../../src/backends/webgpu/runtime.js';
import { seededInput } from '../../src/bench/measure.js';
import { config } from '../../src/config.js';
import { encodeValue } from '../../src/tensor/dtype.js';
import { attnlabBeside, maxDifference, median } from './webgpu-peer-attnlab.js';

const args = process.argv.slice(2);
const option = (name: string) => (args.includes(name) ? args[args.indexOf(name) + 1] : undefined);
const reps = Number(option('--reps') ?? 5);
const small = args.includes('--small');
const dtype = option('--dtype') === 'float32' ? 'float32' : 'float16';
const modules = resolve(option('--modules') ?? 'node_modules');
// --ep cpu runs the same graph on ORT's CPU provider: a check of the graph, not a peer.
const ep = option('--ep') ?? 'webgpu';
const row = (fields: Record<string, unknown>) => process.stdout.write(`${JSON.stringify(fields)}\n`);

// ---- ONNX protobuf, the few messages a one-node model needs (onnx.proto3 field numbers) ----
type Field = [number, 'varint', number] | [number, 'bytes', Uint8Array | string];
function varint(value: number): number[] {
  const out: number[] = [];
  let v = value;
  while (v > 127) {
    out.push((v % 128) | 128);
    v = Math.floor(v / 128);
  }
  out.push(v);
  return out;
}
function message(fields: Field[]): Uint8Array {
  const bytes: number[] = [];
  for (const [field, kind, value] of fields) {
    if (kind === 'varint') {
      bytes.push(...varint(field * 8), ...varint(value));
    } else {
      const data = typeof value === 'string' ? new TextEncoder().encode(value) : value;
      bytes.push(...varint(field * 8 + 2), ...varint(data.length), ...data);
    }
  }
  return Uint8Array.from(bytes);
}
/** ValueInfoProto of a tensor: elem_type (FLOAT 1, FLOAT16 10) and its dims. */
function tensorInfo(name: string, elem: number, dims: number[]): Uint8Array {
  const shape = message(dims.map((d) => [1, 'bytes', message([[1, 'varint', d]])] as Field));
  const tensor = message([
    [1, 'varint', elem],
    [2, 'bytes', shape],
  ]);
  return message([
    [1, 'bytes', name],
    [2, 'bytes', message([[1, 'bytes', tensor]])],
  ]);
}
/** An INT attribute (AttributeProto type 2). */
function intAttribute(name: string, value: number): Uint8Array {
  return message([
    [1, 'bytes', name],
    [3, 'varint', value],
    [20, 'varint', 2],
  ]);
}
function mhaModel(B: number, T: number, N: number, H: number, elem: number, causal: boolean): Uint8Array {
  const node = message([
    [1, 'bytes', 'q'],
    [1, 'bytes', 'k'],
    [1, 'bytes', 'v'],
    [2, 'bytes', 'o'],
    [3, 'bytes', 'mha'],
    [4, 'bytes', 'MultiHeadAttention'],
    [5, 'bytes', intAttribute('num_heads', N)],
    ...(causal ? [[5, 'bytes', intAttribute('unidirectional', 1)] as Field] : []),
    [7, 'bytes', 'com.microsoft'],
  ]);
  const graph = message([
    [1, 'bytes', node],
    [2, 'bytes', 'attention'],
    ...(['q', 'k', 'v'] as const).map((n) => [11, 'bytes', tensorInfo(n, elem, [B, T, N * H])] as Field),
    [12, 'bytes', tensorInfo('o', elem, [B, T, N * H])],
  ]);
  return message([
    [1, 'varint', 8],
    [2, 'bytes', 'attnlab'],
    [7, 'bytes', graph],
    [8, 'bytes', message([[2, 'varint', 17]])],
    [
      8,
      'bytes',
      message([
        [1, 'bytes', 'com.microsoft'],
        [2, 'varint', 1],
      ]),
    ],
  ]);
}

// ---- the run ----
const entry = join(modules, 'onnxruntime-node/dist/index.js');
if (!existsSync(entry)) {
  row({ skipped: `onnxruntime-node is not installed under ${modules} (bash scripts/webgpu-peers.sh)` });
  process.exit(0);
}
// biome-ignore lint/suspicious/noExplicitAny: onnxruntime-node is loaded from a path, without its types.
const ortModule: any = await import(pathToFileURL(entry).href);
const ort = ortModule.default ?? ortModule;
const info = await initWebgpu({ experimental: config().webgpuExperimental });
row({
  adapter: info.description || info.vendor,
  ort: JSON.parse(readFileSync(join(modules, 'onnxruntime-node/package.json'), 'utf8')).version,
  backends: ort.listSupportedBackends?.(),
});
const shrink = (x: number) => (small ? Math.max(1, x / 8) : x);
const elem = dtype === 'float16' ? 10 : 1;

for (const causal of [false, true]) {
  for (let [B, N] = [shrink(4), shrink(16)]; B >= 1 && N >= 1; B > 1 ? (B /= 2) : (N /= 2)) {
    const [T, H] = [shrink(4096), 128];
    const shape = { op: 'forward', B, T, S: T, N, K: N, H, dtype, causal };
    const flops = problemFlops({ B, T, S: T, N, H, causal });
    const host = [1, 2, 3].map((seed) => seededInput([B, T, N, H], seed, dtype));
    // [B, T, N, H] row-major is [B, T, N·H]: the same bytes.
    const feeds = Object.fromEntries(
      host.map((t, i) => {
        const values = t.toFloat64Array();
        const data =
          dtype === 'float16'
            ? Uint16Array.from(values, (x) => encodeValue(x, 'float16'))
            : Float32Array.from(values);
        return [['q', 'k', 'v'][i], new ort.Tensor(dtype, data, [B, T, N * H])];
      }),
    );
    let inference: { run(f: unknown): Promise<{ o: { data: ArrayLike<number> } }>; release(): Promise<void> };
    let got: ArrayLike<number>;
    try {
      inference = await ort.InferenceSession.create(mhaModel(B, T, N, H, elem, causal), {
        executionProviders: [ep],
      });
      got = (await inference.run(feeds)).o.data;
    } catch (error) {
      row({ ...shape, impl: `onnxruntime-${ep}`, error: String(error).split('\n')[0] });
      continue;
    }
    const toNumber = (x: number) => (dtype === 'float16' ? decodeHalf(x) : x);
    const values = Float64Array.from({ length: got.length }, (_, i) => toNumber(got[i]));
    const ours = await attnlabBeside(host, causal, reps);
    // Both against the float64 reference where it is cheap (the small shapes).
    let vsReference: { ort: number; attnlab: number } | null = null;
    if (B * N * T * T <= 2 ** 22) {
      const want = attention(host[0], host[1], host[2], {
        isCausal: causal,
        implementation: 'reference',
      }).output.toFloat64Array();
      vsReference = { ort: maxDifference(values, want), attnlab: maxDifference(ours.output, want) };
    }
    const ortTimes: number[] = [];
    for (let r = 0; r < reps; r++) {
      const start = performance.now();
      await inference.run(feeds);
      ortTimes.push(performance.now() - start);
    }
    await inference.release();
    const ortMs = median(ortTimes);
    row({
      ...shape,
      impl: `onnxruntime-${ep}`,
      ms: ortMs,
      tflops: flops / ortMs / 1e9,
      vsAttnlab: maxDifference(values, ours.output),
      vsReference,
    });
    // ORT's run copies the inputs in and the output out: attnlab's figure with the same copies beside it.
    row({
      ...shape,
      impl: 'webgpu',
      variant: ours.variant,
      ms: ours.ms,
      tflops: flops / ours.ms / 1e9,
      msWithCopies: ours.msWithCopies,
      speedupWithCopies: ortMs / ours.msWithCopies,
    });
    break;
  }
}
process.exit(0);

function decodeHalf(bits: number): number {
  const s = bits & 0x8000 ? -1 : 1;
  const e = (bits >> 10) & 0x1f;
  const m = bits & 0x3ff;
  if (e === 0) return s * m * 2 ** -24;
  if (e === 31) return m ? Number.NaN : s * Number.POSITIVE_INFINITY;
  return s * (1 + m / 1024) * 2 ** (e - 15);
}
