/**
 * NCCL through koffi: the calls context-parallel attention needs (point-to-point send/receive between
 * the ranks of a ring) and the setup around them. Every call returning ncclResult_t is wrapped by
 * `checked()`, so a failure is a DeviceError naming the call and ncclGetErrorString's text.
 *
 * Marshalling (as in driver.ts): communicators and streams are BigInt handles, out-parameters
 * one-element typed arrays. `ncclUniqueId` is a struct of 128 bytes that ncclCommInitRank takes BY
 * VALUE (nccl.h: `ncclResult_t ncclCommInitRank(ncclComm_t*, int nranks, ncclUniqueId commId, int
 * rank)`): it is declared as a koffi struct and passed as one, never as a pointer, which would put
 * 8 bytes of address where NCCL reads 128 bytes of id.
 *
 * NVLink multicast (NVLS) stays off: NCCL_NVLS_ENABLE=0 is set in this process before NCCL is loaded
 * (NCCL reads it when a communicator is made), so NCCL never creates multicast objects
 * (cuMulticastCreate), which the lent multi-GPU machines do not allow.
 */
import koffi from 'koffi';
import { checked } from './driver.js';
import { loadLibrary } from './libraries.js';

/** sizeof(ncclUniqueId): NCCL_UNIQUE_ID_BYTES in nccl.h. */
export const NCCL_UNIQUE_ID_BYTES = 128;

/** ncclDataType_t values used here: shards travel as raw bytes. */
export const NCCL_DATA_TYPE = { int8: 0, uint8: 1 } as const;

/** The 128 opaque bytes of an ncclUniqueId, as koffi passes the struct by value. */
export interface NcclUniqueId {
  internal: Uint8Array;
}

let uniqueIdType: unknown;

/**
 * koffi's type of the by-value struct, declared on first use: koffi's type names are global to the
 * process, and declaring it at import would clash when a module graph is loaded twice (the layer test).
 */
export function ncclUniqueIdType(): unknown {
  uniqueIdType ??= koffi.struct('ncclUniqueId', {
    internal: koffi.array('uint8_t', NCCL_UNIQUE_ID_BYTES, 'Typed'),
  });
  return uniqueIdType;
}

const PROTOTYPES = {
  ncclGetVersion: 'int ncclGetVersion(_Out_ int *version)',
  ncclGetUniqueId: 'int ncclGetUniqueId(_Out_ ncclUniqueId *uniqueId)',
  ncclCommInitRank: 'int ncclCommInitRank(void *comm, int nranks, ncclUniqueId commId, int rank)',
  ncclCommInitAll: 'int ncclCommInitAll(void *comms, int ndev, const int *devlist)',
  ncclCommDestroy: 'int ncclCommDestroy(void *comm)',
  ncclGroupStart: 'int ncclGroupStart()',
  ncclGroupEnd: 'int ncclGroupEnd()',
  ncclSend: 'int ncclSend(uint64_t sendbuff, size_t count, int datatype, int peer, void *comm, void *stream)',
  ncclRecv: 'int ncclRecv(uint64_t recvbuff, size_t count, int datatype, int peer, void *comm, void *stream)',
} as const;

export type NcclFunctionName = keyof typeof PROTOTYPES;
// biome-ignore lint/suspicious/noExplicitAny: koffi functions take JS values of many kinds.
export type Nccl = Record<NcclFunctionName, (...args: any[]) => void> & {
  readonly path: string;
  /** ncclGetVersion's code, e.g. 22703 for 2.27.3 (10000·major + 100·minor + patch since 2.9). */
  readonly version: number;
  /** A fresh ncclUniqueId (ncclGetUniqueId), to pass to ncclCommInitRank by value. */
  uniqueId(): NcclUniqueId;
};

let nccl: Nccl | undefined;

/** The NCCL functions, bound on first use (loads libnccl then). Each throws DeviceError on failure. */
export function nc(): Nccl {
  if (nccl) return nccl;
  process.env.NCCL_NVLS_ENABLE = '0';
  const { lib, path } = loadLibrary('nccl');
  ncclUniqueIdType();
  const errorString = lib.func('const char *ncclGetErrorString(int result)');
  const describe = (status: number): [string, string] => [
    `ncclResult_t ${status}`,
    String(errorString(status) ?? ''),
  ];
  const bound: Record<string, unknown> = { path };
  for (const [name, prototype] of Object.entries(PROTOTYPES)) {
    bound[name] = checked('NCCL', name, lib.func(prototype), describe);
  }
  const n = bound as Nccl;
  const version = new Int32Array(1);
  n.ncclGetVersion(version);
  Object.assign(bound, {
    version: version[0],
    uniqueId(): NcclUniqueId {
      const id = { internal: new Uint8Array(NCCL_UNIQUE_ID_BYTES) };
      n.ncclGetUniqueId(id);
      return id;
    },
  });
  nccl = n;
  return nccl;
}

/** 22703 → "2.27.3" (NCCL ≥ 2.9's encoding; older ones used 1000·major + 100·minor + patch). */
export function formatNcclVersion(code: number): string {
  const major = code >= 10000 ? Math.floor(code / 10000) : Math.floor(code / 1000);
  const rest = code >= 10000 ? code % 10000 : code % 1000;
  return `${major}.${Math.floor(rest / 100)}.${rest % 100}`;
}
