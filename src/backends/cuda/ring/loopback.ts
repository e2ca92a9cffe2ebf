/**
 * The loopback transport on one GPU: P virtual ranks share the device, and the ring's exchange is a
 * device-to-device copy per shard on the context's side stream, fenced by events exactly as the
 * NCCL transport fences ncclSend/ncclRecv on a communication stream: the side stream waits for
 * everything enqueued so far on the compute stream, and the compute stream waits for the copies
 * before the step that reads them. The side stream is joined back before contextParallelAttention
 * returns (the last wait), as context.ts asks of every user of it.
 */
import { itemSize } from '../../../tensor/dtype.js';
import { Tensor } from '../../../tensor/tensor.js';
import type { RingTransport } from '../../ring-backend.js';
import { CU_EVENT_DISABLE_TIMING, cu, outBigInt } from '../ffi/driver.js';
import { getCudaContext } from '../runtime/context.js';
import { allocDevice } from '../runtime/memory.js';

let events: { computed: bigint; exchanged: bigint } | undefined;

/** Two ordering-only events, made once per process (the loopback is used from one thread). */
function fences(): { computed: bigint; exchanged: bigint } {
  if (!events) {
    const make = () => outBigInt((s) => cu().cuEventCreate(s, CU_EVENT_DISABLE_TIMING));
    events = { computed: make(), exchanged: make() };
  }
  return events;
}

/** A tensor like `t` on the current device, contents undefined. */
export function deviceLike(t: Tensor): Tensor {
  return Tensor.fromDeviceBuffer(allocDevice(t.size * itemSize(t.dtype)), t.shape, t.dtype);
}

export function cudaLoopback(size: number): RingTransport {
  return {
    size,
    onRank: (_rank, fn) => fn(),
    like: (_rank, t) => deviceLike(t),
    shift(send, recv) {
      const { stream, sideStream } = getCudaContext();
      const d = cu();
      const { computed, exchanged } = fences();
      d.cuEventRecord(computed, stream);
      d.cuStreamWaitEvent(sideStream, computed, 0);
      for (let r = 0; r < size; r++) {
        const from = send[(r - 1 + size) % size];
        recv[r].forEach((t, i) => {
          if (t.byteLength > 0)
            d.cuMemcpyDtoDAsync_v2(t.buffer.ptr, from[i].buffer.ptr, t.byteLength, sideStream);
        });
      }
      d.cuEventRecord(exchanged, sideStream);
    },
    wait() {
      cu().cuStreamWaitEvent(getCudaContext().stream, fences().exchanged, 0);
    },
  };
}
