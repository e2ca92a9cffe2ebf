/**
 * When a tensor's storage is freed: by `dispose()`, at the end of the `tidy` scope that created it,
 * or — only as a safety net — when the garbage collector finds its storage unreachable.
 *
 * The unit is the storage, not the tensor: `reshape` makes another tensor over the same storage, so
 * disposing any view frees the storage of all of them, and the GC net waits until every view is gone
 * (a net registered on the first tensor would free the buffer under a live reshape of it).
 *
 * Host storage is counted here (bytes and blocks held by live tensors), so that memoryStats() can
 * show a host loop staying flat as it shows the device pool.
 */
import type { Storage } from './storage.js';

interface HostRecord {
  readonly bytes: number;
  released: boolean;
}

let hostBytes = 0;
let hostBlocks = 0;
const hostRecords = new WeakMap<Storage, HostRecord>();

/**
 * The GC net. It runs only when the event loop turns and the collector has run: a synchronous loop
 * that never disposes grows until it ends (30,000 undisposed cudnn calls held 15 GiB on the H200).
 */
const net = new FinalizationRegistry<HostRecord | Extract<Storage, { kind: 'device' | 'webgpu' }>['buffer']>(
  (held) => {
    if ('release' in held) held.release();
    else forgetHost(held);
  },
);

function forgetHost(record: HostRecord): void {
  if (record.released) return;
  record.released = true;
  hostBytes -= record.bytes;
  hostBlocks--;
}

/** The scopes of tidy(), innermost last: each holds the storages created while it was innermost. */
const scopes: Set<Storage>[] = [];

/** Called once per new storage (not for views): counts it, arms the GC net, enters the scope. */
export function adoptStorage(storage: Storage): void {
  if (storage.kind === 'host') {
    const record: HostRecord = { bytes: storage.data.byteLength, released: false };
    hostRecords.set(storage, record);
    hostBytes += record.bytes;
    hostBlocks++;
    net.register(storage, record, storage);
  } else {
    net.register(storage, storage.buffer, storage);
  }
  scopes.at(-1)?.add(storage);
}

/** Frees a storage now (idempotent): device blocks go back to the pool, host bytes stop counting. */
export function releaseStorage(storage: Storage): void {
  net.unregister(storage);
  for (const scope of scopes) scope.delete(storage);
  if (storage.kind !== 'host') storage.buffer.release();
  else {
    const record = hostRecords.get(storage);
    if (record) forgetHost(record);
  }
}

export function isReleased(storage: Storage): boolean {
  if (storage.kind !== 'host') return storage.buffer.released;
  return hostRecords.get(storage)?.released ?? false;
}

/** Host bytes and blocks (storages) held by tensors that are neither disposed nor collected. */
export function hostMemoryStats(): { readonly hostBytes: number; readonly hostBlocks: number } {
  return { hostBytes, hostBlocks };
}

export function openScope(): void {
  scopes.push(new Set());
}

/**
 * Ends the innermost scope: frees every storage it created except those in `survivors`, which move
 * to the enclosing scope (and are freed there unless it returns them too).
 */
export function closeScope(survivors: ReadonlySet<Storage>): void {
  const scope = scopes.pop();
  if (!scope) return;
  const parent = scopes.at(-1);
  for (const storage of scope) {
    if (survivors.has(storage)) parent?.add(storage);
    else releaseStorage(storage);
  }
}

/** Takes a storage out of every open scope: it lives until disposed (or collected). */
export function keepStorage(storage: Storage): void {
  for (const scope of scopes) scope.delete(storage);
}

export function scopeDepth(): number {
  return scopes.length;
}
