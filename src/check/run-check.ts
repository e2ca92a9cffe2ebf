/**
 * The correctness matrix as a library function: every backend on every available device, every case,
 * each dtype the device runs, against the float64 reference with the same-precision tolerance rule.
 * `attnlab check` prints its rows; the GPU test suites assert on the same rows.
 */
import { attention } from '../api/attention.js';
import { validateAttention } from '../api/validate.js';
import { cudaAvailable } from '../backends/cuda/context.js';
import type { AttentionOptions, Implementation } from '../backends/problem.js';
import { BACKENDS } from '../backends/registry.js';
import type { FloatDType } from '../tensor/dtype.js';
import type { Device } from '../tensor/storage.js';
import type { Tensor } from '../tensor/tensor.js';
import { checkAccuracy, plainLowPrecision } from './accuracy.js';
import { type AttentionCase, buildInputs, CASES } from './cases.js';

export interface CheckRow {
  case: string;
  backend: Implementation;
  device: Device;
  dtype: FloatDType;
  status: 'pass' | 'fail' | 'unsupported';
  error?: number;
  bound?: number;
  detail: string;
  variant?: string;
}

export interface CheckOptions {
  devices?: Device[];
  backends?: Implementation[];
  dtypes?: FloatDType[];
  cases?: readonly AttentionCase[];
  seed?: number;
  onRow?: (row: CheckRow) => void;
}

const DEFAULT_DTYPES: Record<Device, FloatDType[]> = {
  cpu: ['float32'],
  cuda: ['bfloat16', 'float16', 'float32'],
};

function onDevice(options: AttentionOptions, device: Device): AttentionOptions {
  if (device === 'cpu') return options;
  return {
    ...options,
    bias: options.bias?.to(device),
    mask: options.mask?.to(device),
  };
}

export function runCheck(options: CheckOptions = {}): CheckRow[] {
  const devices = options.devices ?? (cudaAvailable().ok ? ['cpu', 'cuda'] : ['cpu']);
  const seed = options.seed ?? Date.now() % 1_000_000;
  const rows: CheckRow[] = [];
  for (const c of options.cases ?? CASES) {
    for (const device of devices) {
      for (const dtype of options.dtypes ?? DEFAULT_DTYPES[device]) {
        const { q, k, v, options: caseOptions } = buildInputs(c, dtype, seed);
        // The oracle sees exactly the rounded inputs the backend sees, widened to float64.
        const wide = (t: Tensor) => t.astype('float64');
        const ref = attention(wide(q), wide(k), wide(v), {
          ...caseOptions,
          bias: caseOptions.bias && wide(caseOptions.bias),
          implementation: 'reference',
        }).output.toFloat64Array();
        const plain = plainLowPrecision(q, k, v, caseOptions, dtype);
        const [dq, dk, dv] = device === 'cpu' ? [q, k, v] : [q.to(device), k.to(device), v.to(device)];
        const deviceOptions = onDevice(caseOptions, device);
        for (const backend of BACKENDS) {
          if (backend.device !== device || backend.name === 'reference') continue;
          if (options.backends && !options.backends.includes(backend.name)) continue;
          const base = { case: c.name, backend: backend.name, device, dtype };
          const support = backend.supports(validateAttention(dq, dk, dv, deviceOptions));
          if (!support.ok) {
            rows.push({ ...base, status: 'unsupported', detail: support.reason });
            options.onRow?.(rows[rows.length - 1]);
            continue;
          }
          const result = attention(dq, dk, dv, { ...deviceOptions, implementation: backend.name });
          const precision = dtype === 'float32' && device === 'cuda' ? 'float32' : dtype;
          const report = checkAccuracy(result.output.toFloat64Array(), ref, plain, precision);
          if (device !== 'cpu') result.output.dispose();
          rows.push({
            ...base,
            status: report.ok ? 'pass' : 'fail',
            error: report.error,
            bound: report.bound,
            detail: report.message,
            variant: result.variant,
          });
          options.onRow?.(rows[rows.length - 1]);
        }
        if (device !== 'cpu') {
          for (const t of [dq, dk, dv, deviceOptions.bias, deviceOptions.mask]) t?.dispose();
        }
      }
    }
  }
  return rows;
}
