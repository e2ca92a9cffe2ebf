/**
 * The four kinds of error attnlab throws. Each is a class a caller can catch with `instanceof`;
 * none ends the process.
 */

/** Base class of every error attnlab throws on purpose. */
export class AttnlabError extends Error {
  override readonly name: string = 'AttnlabError';
}

/** Bad input: names the argument, what was expected and what came. */
export class InvalidArgumentError extends AttnlabError {
  override readonly name = 'InvalidArgumentError';
  constructor(
    readonly argument: string,
    readonly expected: string,
    readonly received: string,
  ) {
    super(`${argument}: expected ${expected}, got ${received}`);
  }
}

/** A valid request that a backend (or this machine) cannot run: names the backend and why. */
export class UnsupportedError extends AttnlabError {
  override readonly name = 'UnsupportedError';
  constructor(
    readonly backend: string,
    readonly reason: string,
  ) {
    super(`${backend} cannot run this case: ${reason}`);
  }
}

/** A failure reported by a GPU library: the status name, its text and the call that failed. */
export class DeviceError extends AttnlabError {
  override readonly name = 'DeviceError';
  constructor(
    readonly library: string,
    readonly call: string,
    readonly status: string,
    detail: string,
  ) {
    super(`${library} ${call} failed with ${status}${detail ? `: ${detail}` : ''}`);
  }
}

/** A KV cache's pool has no free block for what an append needs: says how many were asked and free. */
export class CacheFullError extends AttnlabError {
  override readonly name = 'CacheFullError';
  constructor(
    readonly neededBlocks: number,
    readonly freeBlocks: number,
    readonly totalBlocks: number,
  ) {
    super(
      `KV cache full: the append needs ${neededBlocks} more blocks, ${freeBlocks} of ${totalBlocks} are free ` +
        '(free finished sequences, or make the cache with more numBlocks)',
    );
  }
}

/** The GPU (or, for a host tensor, the process) has not enough free memory for an allocation. */
export class OutOfMemoryError extends AttnlabError {
  override readonly name = 'OutOfMemoryError';
  constructor(
    readonly requestedBytes: number,
    readonly freeBytes: number,
    readonly totalBytes: number,
    readonly device: 'cuda' | 'cpu' = 'cuda',
    detail = '',
  ) {
    super(
      `${device === 'cuda' ? 'GPU' : 'host'} out of memory: asked for ${formatBytes(requestedBytes)}` +
        `${detail ? ` (${detail})` : ''}, ${formatBytes(freeBytes)} free of ${formatBytes(totalBytes)}`,
    );
  }
}

/** A library that attnlab needs could not be loaded: says which and where it looked. */
export class LibraryNotFoundError extends AttnlabError {
  override readonly name = 'LibraryNotFoundError';
  constructor(
    readonly library: string,
    readonly searched: readonly string[],
    readonly hint: string,
  ) {
    super(`${library} not found; looked in: ${searched.join(', ') || '(nowhere)'}. ${hint}`);
  }
}

/** A kernel failed to compile: the compiler log, the options and the source lines around the error. */
export class CompileError extends AttnlabError {
  override readonly name = 'CompileError';
  constructor(
    readonly kernel: string,
    readonly log: string,
    readonly options: readonly string[],
    readonly excerpt: string,
  ) {
    super(`compiling ${kernel} failed (options: ${options.join(' ')})\n${log}\n${excerpt}`);
  }
}

export function formatBytes(bytes: number): string {
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let value = bytes;
  let unit = 0;
  while (value >= 1024 && unit < units.length - 1) {
    value /= 1024;
    unit++;
  }
  return `${unit === 0 ? value : value.toFixed(2)} ${units[unit]}`;
}
