/**
 * The NCCL transport: one rank per GPU of this host, all driven by this one Node process (see
 * api/ring-group.ts for why). The communicators come from ncclCommInitAll over the group's devices.
 * A shift is, inside one ncclGroupStart/End, an ncclSend to rank r+1 and an ncclRecv from rank r−1
 * on every rank's communication stream (its context's side stream), fenced by events: the
 * communication stream first waits for what the rank's compute stream has enqueued so far, and the
 * compute stream waits for the exchange before the step that reads it. Shards travel as bytes
 * (ncclUint8), so any dtype goes.
 */
import { InvalidArgumentError } from '../../../errors.js';
import type { Tensor } from '../../../tensor/tensor.js';
import type { RingTransport, RingTransportFactory } from '../../ring-backend.js';
import { CU_EVENT_DISABLE_TIMING, checked, cu, outBigInt, outInt } from '../ffi/driver.js';
import { loadLibrary } from '../ffi/libraries.js';
import { NCCL_DATA_TYPE, nc } from '../ffi/nccl.js';
import { deviceContext, onDevice } from '../runtime/context.js';
import { deviceLike } from './loopback.js';

/** CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL: which device a pointer's memory is on. */
const CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL = 9;
let pointerAttribute: ((...args: unknown[]) => void) | undefined;

/** The device ordinal of a device pointer (cuPointerGetAttribute, bound here: only this file needs it). */
function deviceOfPointer(ptr: bigint): number {
  pointerAttribute ??= checked(
    'CUDA driver',
    'cuPointerGetAttribute',
    loadLibrary('cuda').lib.func('int cuPointerGetAttribute(void *data, int attribute, uint64_t ptr)'),
    (status: number): [string, string] => [`CUresult ${status}`, ''],
  );
  const fn = pointerAttribute;
  return outInt((s) => fn(s, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, ptr));
}

interface RankState {
  readonly device: number;
  readonly comm: bigint;
  readonly computed: bigint;
  readonly exchanged: bigint;
}

/** Communicators and fences for `devices` (rank r on devices[r]); throws DeviceError from NCCL. */
export function ncclTransports(devices: readonly number[]): RingTransportFactory {
  const P = devices.length;
  for (const device of devices) deviceContext(device); // validates each ordinal, makes its context
  const comms = new BigUint64Array(P);
  nc().ncclCommInitAll(comms, P, Int32Array.from(devices));
  const ranks: RankState[] = devices.map((device, r) =>
    onDevice(device, () => ({
      device,
      comm: comms[r],
      computed: outBigInt((s) => cu().cuEventCreate(s, CU_EVENT_DISABLE_TIMING)),
      exchanged: outBigInt((s) => cu().cuEventCreate(s, CU_EVENT_DISABLE_TIMING)),
    })),
  );
  let destroyed = false;
  const transport: RingTransport = {
    size: P,
    onRank: (rank, fn) => onDevice(ranks[rank].device, fn),
    like: (rank, t) => onDevice(ranks[rank].device, () => deviceLike(t)),
    shift(send, recv) {
      const d = cu();
      const n = nc();
      ranks.forEach((rank) => {
        const { stream, sideStream } = deviceContext(rank.device);
        onDevice(rank.device, () => {
          d.cuEventRecord(rank.computed, stream);
          d.cuStreamWaitEvent(sideStream, rank.computed, 0);
        });
      });
      n.ncclGroupStart();
      try {
        ranks.forEach((rank, r) => {
          const { sideStream } = deviceContext(rank.device);
          const to = (r + 1) % P;
          const from = (r - 1 + P) % P;
          send[r].forEach((t, i) => {
            n.ncclSend(t.buffer.ptr, t.byteLength, NCCL_DATA_TYPE.uint8, to, rank.comm, sideStream);
            n.ncclRecv(
              recv[r][i].buffer.ptr,
              recv[r][i].byteLength,
              NCCL_DATA_TYPE.uint8,
              from,
              rank.comm,
              sideStream,
            );
          });
        });
      } finally {
        n.ncclGroupEnd();
      }
      for (const rank of ranks)
        onDevice(rank.device, () => d.cuEventRecord(rank.exchanged, deviceContext(rank.device).sideStream));
    },
    wait() {
      for (const rank of ranks)
        onDevice(rank.device, () =>
          cu().cuStreamWaitEvent(deviceContext(rank.device).stream, rank.exchanged, 0),
        );
    },
    checkShard(argument, r, t: Tensor) {
      if (t.size === 0) return;
      const on = deviceOfPointer(t.buffer.ptr);
      if (on !== ranks[r].device)
        throw new InvalidArgumentError(
          argument,
          `a shard on CUDA device ${ranks[r].device} (rank ${r} of the NCCL group)`,
          `a tensor on device ${on}`,
        );
    },
  };
  return {
    transport(device) {
      if (destroyed) throw new InvalidArgumentError('options.group', 'a live RingGroup', 'a destroyed one');
      if (device !== 'cuda')
        throw new InvalidArgumentError('query[0].device', 'cuda (an NCCL group runs on GPUs)', device);
      return transport;
    },
    destroy() {
      if (destroyed) return;
      destroyed = true;
      for (const rank of ranks) {
        onDevice(rank.device, () => {
          cu().cuCtxSynchronize();
          cu().cuEventDestroy_v2(rank.computed);
          cu().cuEventDestroy_v2(rank.exchanged);
        });
        nc().ncclCommDestroy(rank.comm);
      }
    },
  };
}
