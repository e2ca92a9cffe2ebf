/**
 * NVRTC through koffi: CUDA C++ source → CUBIN at run time. Calls go through `checked()` like the
 * driver's, so a failing status becomes a DeviceError naming the call; a failed *compile* is not a
 * device error and is turned into a CompileError by compile.ts, which has the source and the log.
 */
import koffi from 'koffi';
import { DeviceError } from '../../../errors.js';
import { checked } from './driver.js';
import { loadLibrary } from './libraries.js';

/** nvrtcResult for a program that did not compile (the log says why). */
export const NVRTC_ERROR_COMPILATION = 6;

const PROTOTYPES = {
  nvrtcVersion: 'int nvrtcVersion(void *major, void *minor)',
  nvrtcCreateProgram:
    'int nvrtcCreateProgram(void *prog, const char *src, const char *name, int numHeaders, ' +
    'const char **headers, const char **includeNames)',
  nvrtcDestroyProgram: 'int nvrtcDestroyProgram(void *prog)',
  nvrtcAddNameExpression: 'int nvrtcAddNameExpression(void *prog, const char *nameExpression)',
  nvrtcGetLoweredName: 'int nvrtcGetLoweredName(void *prog, const char *nameExpression, void *loweredName)',
  nvrtcGetProgramLogSize: 'int nvrtcGetProgramLogSize(void *prog, void *size)',
  nvrtcGetProgramLog: 'int nvrtcGetProgramLog(void *prog, void *log)',
  nvrtcGetCUBINSize: 'int nvrtcGetCUBINSize(void *prog, void *size)',
  nvrtcGetCUBIN: 'int nvrtcGetCUBIN(void *prog, void *cubin)',
} as const;

type NvrtcName = keyof typeof PROTOTYPES;

export interface Nvrtc extends Record<NvrtcName, (...args: unknown[]) => void> {
  /**
   * nvrtcCompileProgram, unchecked: returns the status, because a compile error is the user's
   * (CompileError with the log), while any other status is still thrown as a DeviceError.
   */
  compile(prog: bigint, options: readonly string[]): number;
  readonly path: string;
  /** e.g. "13.0". */
  readonly version: string;
}

let nvrtc: Nvrtc | undefined;

/** The NVRTC functions, bound on first use. */
export function nv(): Nvrtc {
  if (nvrtc) return nvrtc;
  const { lib, path } = loadLibrary('nvrtc');
  const errorString = lib.func('const char *nvrtcGetErrorString(int result)');
  const describe = (status: number): [string, string] => [
    String(errorString(status)),
    `nvrtcResult ${status}`,
  ];
  const bound: Record<string, unknown> = { path };
  for (const [name, prototype] of Object.entries(PROTOTYPES)) {
    bound[name] = checked('NVRTC', name, lib.func(prototype), describe);
  }
  const compileProgram = lib.func(
    'int nvrtcCompileProgram(void *prog, int numOptions, const char **options)',
  );
  bound.compile = (prog: bigint, options: readonly string[]): number => {
    const status = compileProgram(prog, options.length, [...options]) as number;
    if (status !== 0 && status !== NVRTC_ERROR_COMPILATION) {
      throw new DeviceError('NVRTC', 'nvrtcCompileProgram', ...describe(status));
    }
    return status;
  };
  const major = new Int32Array(1);
  const minor = new Int32Array(1);
  (bound.nvrtcVersion as Nvrtc['nvrtcVersion'])(major, minor);
  bound.version = `${major[0]}.${minor[0]}`;
  nvrtc = bound as unknown as Nvrtc;
  return nvrtc;
}

/** Reads a NUL-terminated C string that NVRTC returned through a `const char **` out-parameter. */
export function decodeCString(address: bigint): string {
  return address === 0n ? '' : koffi.decode.string(address);
}
