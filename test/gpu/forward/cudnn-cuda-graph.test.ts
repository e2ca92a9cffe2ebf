/**
 * cuDNN's CUDA-graph route (src/backends/cuda/cudnn/cuda-graph.ts) on a GPU: for the suite's cases of each
 * graph feature (GQA, causal alignments, biases, masks, padding, windows, decode, head dims; bfloat16), the
 * same call three times on the same buffers — executed,
 * then populated into a graph and launched, then launched — gives bit-identical outputs and log-sum-exps,
 * and the graph route was taken (where cuDNN refuses it for a plan, the test says which and fails: the
 * route is what brings a repeated cudnn call's host time to a launch). A new scale on the same buffers
 * updates the graph and matches a call with the route off; the backward's plan takes the route too.
 * The outputs' accuracy against the float64 reference is cudnn.test.ts's: identical bits carry it over.
 */
import assert from 'node:assert/strict';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import { attentionBackward } from '../../../src/api/backward.js';
import { validateAttention } from '../../../src/api/validate.js';
import type { CudnnOutput } from '../../../src/backends/cuda/cudnn/backend.js';
import { runCudnnAttention } from '../../../src/backends/cuda/cudnn/backend.js';
import { graphRouteStats } from '../../../src/backends/cuda/cudnn/cuda-graph.js';
import { loadCudnn } from '../../../src/backends/cuda/ffi/cudnn.js';
import { cudaAvailable } from '../../../src/backends/cuda/runtime/context.js';
import type { AttentionProblem } from '../../../src/backends/problem.js';
import { buildInputs, CASES, LONG_CASES } from '../../../src/check/cases.js';
import { reloadConfig } from '../../../src/config.js';
import { UnsupportedError } from '../../../src/errors.js';
import type { Tensor } from '../../../src/tensor/tensor.js';

const cuda = cudaAvailable();
const skip = cuda.ok ? false : `no CUDA device: ${cuda.reason}`;
// Plans go to a fresh folder unless a run names one (scripts/gpu-verify.sh shares its cache between shards).
process.env.ATTNLAB_CACHE_DIR ||= mkdtempSync(join(tmpdir(), 'attnlab-cudnn-graph-'));
reloadConfig();

const ALL_CASES = [...CASES, ...LONG_CASES];
/** One case per graph feature: each new graph is a cuDNN plan to build (0.5–3 s cold). */
const FEATURES = new Set([
  'GQA N=8 K=2',
  'causal T>S bottom-right (first rows see nothing)',
  'bias full (B,N,T,S) + causal',
  'mask (B,1,T,S) with a fully masked row',
  'padding + causal bottom-right + GQA',
  'window [16,0] causal',
  'T=1 S=203 decode step',
  'H=256 causal GQA',
  'H=64 Hv=32 GQA',
  'T=S=384 causal (several tiles)',
]);

function bytes(t: Tensor | undefined): Buffer | null {
  if (t === undefined) return null;
  const host = t.toHost();
  const data = host.data;
  return Buffer.from(data.buffer, data.byteOffset, data.byteLength);
}

/** One call's output and log-sum-exp bytes, its tensors disposed so the next call gets the same blocks. */
function run(p: AttentionProblem): { output: Buffer | null; lse: Buffer | null; variant: string } {
  const r: CudnnOutput = runCudnnAttention(p);
  const out = { output: bytes(r.output), lse: bytes(r.logSumExp), variant: r.variant };
  r.output.dispose();
  r.logSumExp?.dispose();
  return out;
}

function withRoute<T>(on: boolean, fn: () => T): T {
  process.env.ATTNLAB_CUDNN_CUDA_GRAPH = on ? '1' : '0';
  reloadConfig();
  try {
    return fn();
  } finally {
    delete process.env.ATTNLAB_CUDNN_CUDA_GRAPH;
    reloadConfig();
  }
}

describe("cuDNN's CUDA-graph route", { skip }, () => {
  it('is available: cuDNN ≥ 9.5 exports the graph entry points, and every feature case exists', () => {
    assert.equal(ALL_CASES.filter((x) => FEATURES.has(x.name)).length, FEATURES.size);
    const lib = loadCudnn();
    assert.ok(lib.version < 90500 || lib.graphFn !== null, lib.description);
  });

  for (const c of ALL_CASES.filter((x) => FEATURES.has(x.name))) {
    it(`${c.name}: executed, graph-populated and graph-launched calls agree bit for bit`, (t) => {
      const { q, k, v, options } = buildInputs(c, 'bfloat16', 11);
      const p = validateAttention(q.to('cuda'), k.to('cuda'), v.to('cuda'), {
        ...options,
        bias: options.bias?.to('cuda'),
        mask: options.mask?.to('cuda'),
        returnLogSumExp: true,
      });
      let first: ReturnType<typeof run>;
      try {
        first = run(p);
      } catch (error) {
        if (error instanceof UnsupportedError) return t.skip(`cudnn: ${error.message}`);
        throw error;
      }
      const before = { ...graphRouteStats };
      const second = run(p);
      const third = run(p);
      const launched = graphRouteStats.launches - before.launches;
      assert.equal(
        graphRouteStats.refusals,
        before.refusals,
        `${first.variant}: cuDNN refused the graph route (ATTNLAB_DEBUG=1 says why)`,
      );
      assert.ok(launched >= 2, `${first.variant}: ${JSON.stringify({ before, after: graphRouteStats })}`);
      for (const [name, got] of [
        ['populated', second],
        ['launched', third],
      ] as const) {
        assert.ok(got.output?.equals(first.output!), `${name}: output differs from the executed call`);
        if (first.lse) assert.ok(got.lse?.equals(first.lse), `${name}: log-sum-exp differs`);
      }
      for (const x of [p.query, p.key, p.value]) x.dispose();
    });
  }

  it('a new scale on the same buffers updates the graph and matches the route turned off', () => {
    const c = CASES[0];
    const { q, k, v } = buildInputs(c, 'bfloat16', 13);
    const p = validateAttention(q.to('cuda'), k.to('cuda'), v.to('cuda'), {});
    for (let i = 0; i < 3; i++) run(p);
    for (const scale of [0.05, 0.5, 0.05]) {
      const scaled = { ...p, scale };
      const updated = graphRouteStats.updated;
      const viaGraph = run(scaled);
      assert.equal(graphRouteStats.updated, updated + 1, `scale ${scale}`);
      const executed = withRoute(false, () => run(scaled));
      assert.ok(viaGraph.output?.equals(executed.output!), `scale ${scale}`);
    }
    for (const x of [p.query, p.key, p.value]) x.dispose();
  });

  it("the backward's plan takes the route, its gradients identical to execute's", () => {
    const c = CASES.find((x) => x.options?.isCausal) ?? CASES[0];
    const { q, k, v, options } = buildInputs(c, 'bfloat16', 17);
    const [query, key, value] = [q, k, v].map((x) => x.to('cuda'));
    const forward = runCudnnAttention(
      validateAttention(query, key, value, { isCausal: options.isCausal, returnLogSumExp: true }),
    );
    const { q: dOutHost } = buildInputs(c, 'bfloat16', 19);
    const dOut = dOutHost.to('cuda');
    const grads = () => {
      const r = attentionBackward(query, key, value, forward.output, forward.logSumExp!, dOut, {
        isCausal: options.isCausal,
        implementation: 'cudnn',
      });
      const out = [r.dQuery, r.dKey, r.dValue].map((g) => bytes(g)!);
      for (const g of [r.dQuery, r.dKey, r.dValue]) g.dispose();
      return out;
    };
    const executed = withRoute(false, grads);
    const launches = graphRouteStats.launches;
    const viaGraph = [grads(), grads(), grads()];
    assert.ok(graphRouteStats.launches > launches, 'the backward ran as a graph');
    for (const got of viaGraph)
      for (const [i, g] of got.entries()) assert.ok(g.equals(executed[i]), `gradient d${'QKV'[i]} differs`);
  });
});
