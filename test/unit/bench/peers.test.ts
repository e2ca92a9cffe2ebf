/**
 * Peers: a missing JAX or PyTorch is reported and the run goes on; the runner's side of the JSON
 * protocol; and the Python functions computing statistics and errors exactly as attnlab does.
 */
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { chmodSync, mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, it } from 'node:test';
import { fileURLToPath } from 'node:url';
import { maxErrorAgainstOracle } from '../../../src/bench/accuracy.js';
import {
  type PeerRequest,
  parsePeerList,
  peerEnvironment,
  pythonCandidates,
  runPeer,
} from '../../../src/bench/peers.js';
import { runSweeps } from '../../../src/bench/run-bench.js';
import { summarize } from '../../../src/bench/stats.js';
import { reloadConfig } from '../../../src/config.js';
import { Random } from '../../../src/tensor/random.js';

process.env.ATTNLAB_DISABLE_CUDA = '1';
const dir = mkdtempSync(join(tmpdir(), 'attnlab-peers-'));
const peersDir = fileURLToPath(new URL('../../../src/bench/peers/', import.meta.url));

const request: PeerRequest = {
  cases: [{ sweep: 'unit', B: 1, T: 16, S: 16, N: 2, K: 2, H: 8, dtype: 'float32', causal: false }],
  impls: ['xla'],
  warmup: 1,
  repeats: 3,
  min_repeats: 2,
  budget_ms: 10,
  settle_ms: 5,
  seed: 0,
  check_error: true,
  l2_bytes: 1 << 20,
};

afterEach(() => {
  delete process.env.ATTNLAB_PYTHON;
  reloadConfig();
});

describe('peers', () => {
  it('parses peer names and refuses unknown ones', () => {
    assert.deepEqual(parsePeerList('jax, torch,jax'), ['jax', 'torch']);
    assert.throws(() => parsePeerList('jax,tvm'), /--peers: expected a list of jax, torch, got "tvm"/);
  });

  it('ATTNLAB_PYTHON, when set, is the only interpreter tried', () => {
    assert.deepEqual(pythonCandidates({ ATTNLAB_PYTHON: '/x/python' }), ['/x/python']);
    assert.ok(pythonCandidates({}).includes('python3'));
  });

  it("leaves folders holding a libcudnn or libcublas out of the peers' LD_LIBRARY_PATH, keeping the others", () => {
    const withCudnn = mkdtempSync(join(tmpdir(), 'cudnn-'));
    writeFileSync(join(withCudnn, 'libcudnn.so.9'), '');
    const withCublas = mkdtempSync(join(tmpdir(), 'cublas-'));
    writeFileSync(join(withCublas, 'libcublasLt.so.13'), '');
    const env = peerEnvironment({
      LD_LIBRARY_PATH: `/usr/local/nvidia/lib64:${withCudnn}:${withCublas}:/nonexistent`,
    });
    assert.equal(env.LD_LIBRARY_PATH, '/usr/local/nvidia/lib64:/nonexistent');
    assert.equal(env.XLA_PYTHON_CLIENT_PREALLOCATE, 'false');
    assert.equal(peerEnvironment({ LD_LIBRARY_PATH: withCudnn }).LD_LIBRARY_PATH, undefined);
  });

  it('a missing peer is reported with every interpreter tried, and no rows', async () => {
    process.env.ATTNLAB_PYTHON = '/nonexistent/bin/python';
    reloadConfig();
    const run = await runPeer('jax', request);
    assert.equal(run.info.available, false);
    assert.match(run.info.reason ?? '', /no Python with jax and numpy \(tried \/nonexistent\/bin\/python: /);
    assert.deepEqual(run.rows, []);
  });

  it('a sweep with missing peers still measures attnlab and notes each missing peer', async () => {
    process.env.ATTNLAB_PYTHON = '/nonexistent/bin/python';
    reloadConfig();
    const spec = {
      batch: [1],
      seq: [16],
      heads: [2],
      headDim: [8],
      dtype: ['float32' as const],
      causal: [false],
      impl: ['flash' as const],
    };
    const run = await runSweeps([{ name: 'unit', spec }], {
      peers: ['jax', 'torch'],
      measure: { budgetMs: 5, warmup: 1, minRepeats: 2 },
    });
    assert.equal(run.rows.length, 1);
    assert.equal(run.rows[0].status, 'ok');
    assert.deepEqual(
      run.peers.map((p) => [p.name, p.available]),
      [
        ['jax', false],
        ['torch', false],
      ],
    );
    assert.equal(run.notes.filter((n) => /^peer (jax|torch) not run: no Python with/.test(n)).length, 2);
  });

  it('reads progress lines and the JSON answer, and computes work and throughput itself', async () => {
    // A stand-in interpreter: passes the import probe, then answers like a peer script would.
    const row = {
      ...request.cases[0],
      source: 'jax',
      impl: 'xla',
      label: 'jax xla f32',
      status: 'ok',
      timing: {
        method: 'wall-block-until-ready',
        ms: summarize([0.5, 0.5]),
        firstCallMs: 9,
        warmup: 1,
        inputCopies: 1,
      },
    };
    const answer = JSON.stringify({ versions: { jax: '0.0-test' }, rows: [row] });
    const script = join(dir, 'python');
    writeFileSync(
      script,
      `#!/bin/sh\n[ "$1" = "-c" ] && exit 0\ncat >/dev/null\necho 'PROGRESS 0 1 jax xla T=16' >&2\necho 'a warning' >&2\necho '${answer}'\n`,
    );
    chmodSync(script, 0o755);
    process.env.ATTNLAB_PYTHON = script;
    reloadConfig();
    const seen: string[] = [];
    const run = await runPeer(
      'jax',
      request,
      (done, total, label) => seen.push(`${done}/${total} ${label}`),
      100,
    );
    assert.deepEqual(seen, ['0/1 jax xla T=16']);
    assert.equal(run.info.available, true);
    assert.deepEqual(run.info.versions, { jax: '0.0-test' });
    const flops = 4 * 1 * 2 * 16 * 16 * 8;
    assert.equal(run.rows[0].flops, flops);
    assert.ok(Math.abs((run.rows[0].tflops ?? 0) - flops / 0.5e-3 / 1e12) < 1e-18);
    assert.ok(Math.abs((run.rows[0].ceilingPercent ?? 0) - (100 * flops) / 0.5e-3 / 1e12 / 100) < 1e-15);
  });

  it('a peer that crashes is reported with its exit code and last stderr lines', async () => {
    const script = join(dir, 'crashing-python');
    writeFileSync(
      script,
      '#!/bin/sh\n[ "$1" = "-c" ] && exit 0\ncat >/dev/null\necho "Traceback: boom" >&2\nexit 3\n',
    );
    chmodSync(script, 0o755);
    process.env.ATTNLAB_PYTHON = script;
    reloadConfig();
    const run = await runPeer('torch', request);
    assert.equal(run.info.available, false);
    assert.match(run.info.reason ?? '', /torch_peer\.py exited with 3; stderr: Traceback: boom/);
  });
});

describe('peer_common.py agrees with attnlab', () => {
  const probe = spawnSync('python3', ['-c', 'import numpy'], { encoding: 'utf8' });
  const skip =
    probe.status === 0
      ? false
      : `python3 with numpy is not available here (${probe.error?.message ?? probe.stderr.trim()})`;

  it('on percentiles, and on the max error of GQA causal outputs, checked fully and sampled', {
    skip,
  }, () => {
    const rng = new Random(7);
    const samples = Array.from({ length: 37 }, () => rng.nextFloat());
    const draw = (n: number) => Array.from({ length: n }, () => rng.nextNormal());
    // The second shape is past FULL_CHECK_LIMIT: both sides must pick the same rows and (b, n) pairs.
    const cases = [
      [2, 6, 9, 4, 2, 8],
      [2, 64, 1024, 8, 2, 32],
    ].map(([B, T, S, N, K, H]) => ({
      c: { B, T, S, N, K, H, causal: true },
      q: draw(B * T * N * H),
      k: draw(B * S * K * H),
      v: draw(B * S * K * H),
      out: draw(B * T * N * H).map((x) => x * 0.1),
    }));
    const code = `
import json, sys, numpy as np
sys.path.insert(0, ${JSON.stringify(peersDir)})
import peer_common as pc
d = json.load(sys.stdin)
errors = []
for x in d["cases"]:
    c = x["c"]
    shape = lambda n, name: np.array(x[name], dtype=np.float64).reshape(c["B"], n, -1, c["H"])
    errors.append(pc.max_error(c, shape(c["T"], "q"), shape(c["S"], "k"), shape(c["S"], "v"), shape(c["T"], "out")))
print(json.dumps({"summary": pc.summarize(d["samples"]), "errors": errors}))`;
    const result = spawnSync('python3', ['-c', code], {
      input: JSON.stringify({ cases, samples }),
      encoding: 'utf8',
      maxBuffer: 1 << 26,
    });
    assert.equal(result.status, 0, result.stderr);
    const py = JSON.parse(result.stdout);
    const ts = summarize(samples);
    for (const key of ['median', 'p10', 'p90', 'min', 'max', 'mean', 'count'] as const) {
      assert.ok(
        Math.abs(py.summary[key] - ts[key]) < 1e-12,
        `${key}: python ${py.summary[key]} vs ts ${ts[key]}`,
      );
    }
    const f64 = (a: number[]) => ({ data: Float64Array.from(a), dtype: 'float64' as const });
    cases.forEach(({ c, q, k, v, out }, i) => {
      const expected = maxErrorAgainstOracle(
        { ...c, scale: 1 / Math.sqrt(c.H) },
        f64(q),
        f64(k),
        f64(v),
        f64(out),
      );
      const [err, full] = py.errors[i];
      assert.equal(full, expected.full);
      assert.equal(full, i === 0);
      assert.ok(
        Math.abs(err - expected.maxError) < 1e-12,
        `case ${i}: python ${err} vs ts ${expected.maxError}`,
      );
    });
  });
});
