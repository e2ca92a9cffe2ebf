/**
 * Diagnoses the cuDNN backend one scenario per child process, so that a crash inside cuDNN stops
 * only its scenario and leaves the last calls on record: attnlab's trace (ATTNLAB_CUDNN_TRACE=1)
 * and cuDNN's own API log (CUDNN_LOGLEVEL_DBG=3). Not a test; a tool for a GPU run.
 *
 * Run: node --import tsx bench/cudnn/cudnn-probe.ts <log folder>
 */
import { spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { attention } from '../../src/api/attention.js';
import { validateAttention } from '../../src/api/validate.js';
import { runCudnnAttention } from '../../src/backends/cuda/cudnn/backend.js';
import type { DescribeOptions } from '../../src/backends/cuda/cudnn/features.js';
import type { AttentionOptions } from '../../src/backends/problem.js';
import { randomNormal } from '../../src/tensor/random.js';

const SCENARIOS: Record<string, [AttentionOptions, DescribeOptions]> = {
  'unified plain': [{}, { graph: 'unified' }],
  'composite plain': [{}, { graph: 'composite' }],
  'composite causal + lse bnt': [{ isCausal: true, returnLogSumExp: true }, { statsLayout: 'bnt' }],
  'composite causal + lse btn': [{ isCausal: true, returnLogSumExp: true }, { statsLayout: 'btn' }],
  'unified + lse btn': [{ returnLogSumExp: true }, { graph: 'unified', statsLayout: 'btn' }],
  'padding + bottom-right causal': [
    {
      isCausal: true,
      causalAlignment: 'bottom_right',
      querySeqLengths: [64, 30],
      keyValueSeqLengths: [96, 50],
    },
    {},
  ],
  'bias + window': [{ localWindowSize: [8, 4] }, {}],
};

function child(name: string): void {
  const [options, how] = SCENARIOS[name];
  const [B, T, S, N, K, H] = [2, 64, 96, 4, 2, 64];
  const host = [
    randomNormal([B, T, N, H], { seed: 1, dtype: 'bfloat16' }),
    randomNormal([B, S, K, H], { seed: 2, dtype: 'bfloat16' }),
    randomNormal([B, S, K, H], { seed: 3, dtype: 'bfloat16' }),
  ];
  const bias = name.startsWith('bias')
    ? randomNormal([1, N, T, S], { seed: 4, dtype: 'bfloat16' })
    : undefined;
  const p = validateAttention(host[0].to('cuda'), host[1].to('cuda'), host[2].to('cuda'), {
    ...options,
    bias: bias?.to('cuda'),
  });
  const r = runCudnnAttention(p, how);
  const got = r.output.toFloat64Array();
  const [q, k, v] = host.map((t) => t.astype('float64'));
  const want = attention(q, k, v, {
    ...options,
    bias: bias?.astype('float64'),
    implementation: 'reference',
    returnLogSumExp: true,
  });
  const w = want.output.toFloat64Array();
  let err = 0;
  for (let i = 0; i < w.length; i++) err = Math.max(err, Math.abs(got[i] - w[i]));
  let lseErr = 0;
  if (r.logSumExp && want.logSumExp) {
    const [a, e] = [r.logSumExp.toFloat64Array(), want.logSumExp.toFloat64Array()];
    for (let i = 0; i < e.length; i++) lseErr = Math.max(lseErr, a[i] === e[i] ? 0 : Math.abs(a[i] - e[i]));
  }
  console.log(
    `RESULT ${name}: O max|err| ${err.toExponential(3)}, lse max|err| ${lseErr.toExponential(3)}, ${r.variant}, plan ${r.planSource} ${r.planSetupMs.toFixed(0)} ms`,
  );
}

if (process.env.ATTNLAB_PROBE) {
  child(process.env.ATTNLAB_PROBE);
} else {
  const logs = process.argv[2] ?? 'probe-logs';
  mkdirSync(logs, { recursive: true });
  for (const name of Object.keys(SCENARIOS)) {
    const log = join(logs, `${name.replace(/[^a-z0-9]+/gi, '-')}.cudnn.log`);
    const env = {
      ...process.env,
      ATTNLAB_PROBE: name,
      ATTNLAB_CUDNN_TRACE: '1',
      CUDNN_LOGLEVEL_DBG: '3',
      CUDNN_LOGDEST_DBG: log,
    };
    const r = spawnSync(process.execPath, ['--import', 'tsx', new URL(import.meta.url).pathname], {
      env,
      encoding: 'utf8',
      timeout: 60_000,
    });
    const result = r.stdout.split('\n').find((l) => l.startsWith('RESULT'));
    console.log(`== ${name}: exit ${r.status} signal ${r.signal} ${result ?? ''}`);
    if (!result) {
      const trace = r.stderr.split('\n').filter((l) => l.trim());
      console.log(`   last trace:\n     ${trace.slice(-8).join('\n     ')}`);
      if (existsSync(log)) {
        const calls = readFileSync(log, 'utf8')
          .split('\n')
          .filter((l) => /function cudnn|Reason|Error|error/.test(l));
        console.log(`   cuDNN log:\n     ${calls.slice(-6).join('\n     ')}`);
      }
    }
  }
}
