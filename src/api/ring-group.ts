/**
 * RingGroup: the ranks a context-parallel call spans, and how shards move between them.
 *
 * - `RingGroup.loopback(P)`: P virtual ranks on one device (the CPU, or the one GPU), the exchange done
 *   by copies (host copies, or device-to-device copies on a second stream), the schedule and the
 *   merge exactly those of real ranks. It exists so the algorithm is tested without several GPUs.
 * - `RingGroup.nccl(devices)`: one rank per GPU, the exchange by ncclSend/ncclRecv.
 *
 * Process model: ONE Node process drives all the GPUs of the host (ncclCommInitAll, one communicator
 * per device, each rank's work enqueued with its device's context current). Why: attnlab's calls are
 * asynchronous enqueues from a single thread, so one host thread keeps P GPUs busy as long as each
 * step's work per GPU outlasts enqueuing it (a 128k-token causal block is milliseconds; an enqueue
 * is tens of microseconds); the caller keeps one program, one set of tensors and no launcher; and
 * no unique id has to travel between processes. One process per GPU would also work through
 * ncclCommInitRank and is the model to measure against if a host thread turns out to be the limit.
 */
import { checkInteger, describeValue, snapshot } from '../arguments.js';
import { cudaLoopback } from '../backends/cuda/ring/loopback.js';
import { ncclTransports } from '../backends/cuda/ring/nccl-transport.js';
import type { RingTransport, RingTransportFactory } from '../backends/ring-backend.js';
import { InvalidArgumentError } from '../errors.js';
import { Tensor } from '../tensor/tensor.js';

export type RingGroupKind = 'loopback' | 'nccl';

const factories = new WeakMap<RingGroup, RingTransportFactory>();

export class RingGroup {
  #destroyed = false;
  private constructor(
    /** 'loopback' (virtual ranks on one device) or 'nccl' (one rank per GPU). */
    readonly kind: RingGroupKind,
    /** P, the number of ranks. */
    readonly size: number,
    /** The CUDA device of each rank (nccl); empty for loopback. */
    readonly devices: readonly number[],
    factory: RingTransportFactory,
  ) {
    factories.set(this, factory);
  }

  /**
   * P virtual ranks on the device the shards are on, exchanging by copies.
   *
   * @example
   * const group = RingGroup.loopback(4);
   * const out = contextParallelAttention(shardSequence(q, 4), shardSequence(k, 4), shardSequence(v, 4), { group, isCausal: true });
   */
  static loopback(size: number): RingGroup {
    checkInteger('size', size, 1, 1024, 'an integer number of ranks in [1, 1024]');
    const factory: RingTransportFactory = {
      transport: (device) => {
        if (device === 'cpu') return hostLoopback(size);
        return cudaLoopback(size);
      },
      destroy: () => {},
    };
    return new RingGroup('loopback', size, [], factory);
  }

  /**
   * One rank per CUDA device, ranks in the order given (default: devices 0 … count−1 of the host),
   * connected by NCCL (NCCL_NVLS_ENABLE=0: NVLink multicast stays off). `destroy()` frees the
   * communicators.
   */
  static nccl(devices: number | readonly number[]): RingGroup {
    const list = typeof devices === 'number' ? checkCount(devices) : checkDevices(devices);
    return new RingGroup('nccl', list.length, list, ncclTransports(list));
  }

  get destroyed(): boolean {
    return this.#destroyed;
  }

  /** Frees what the group holds (NCCL communicators); using it afterwards is an error. */
  destroy(): void {
    if (this.#destroyed) return;
    this.#destroyed = true;
    factories.get(this)?.destroy();
  }
}

function checkCount(count: number): number[] {
  checkInteger('devices', count, 1, 64, 'a device count in [1, 64] or a list of device ordinals');
  return Array.from({ length: count }, (_, i) => i);
}

function checkDevices(devicesIn: unknown): number[] {
  // Read once: the checks and the group see the same ordinals, whatever a getter or Proxy does.
  const devices = Array.isArray(devicesIn) ? (snapshot('devices', devicesIn) as unknown[]) : devicesIn;
  if (!Array.isArray(devices) || devices.length === 0)
    throw new InvalidArgumentError(
      'devices',
      'a device count or a non-empty list of device ordinals',
      describeValue(devices),
    );
  devices.forEach((d, i) => {
    checkInteger(`devices[${i}]`, d, 0, 63, 'a device ordinal in [0, 63]');
  });
  if (new Set(devices).size !== devices.length)
    throw new InvalidArgumentError('devices', 'distinct device ordinals', `[${devices.join(', ')}]`);
  return [...(devices as number[])];
}

/** `group` as a live RingGroup, or InvalidArgumentError naming options.group. */
export function checkGroup(group: unknown): RingGroup {
  // The constructor is private to TypeScript only: from JavaScript `new RingGroup(…)` makes a group with no
  // transport, which only the two factories give.
  if (!(group instanceof RingGroup) || factories.get(group) === undefined)
    throw new InvalidArgumentError(
      'options.group',
      'a RingGroup (RingGroup.loopback or RingGroup.nccl)',
      group instanceof RingGroup ? 'a RingGroup made with `new`' : describeValue(group),
    );
  if (group.destroyed) throw new InvalidArgumentError('options.group', 'a live RingGroup', 'a destroyed one');
  return group;
}

/** The transport of `group` for shards on `device` (the group checked first). */
export function transportOf(group: unknown, device: 'cpu' | 'cuda'): RingTransport {
  return factories.get(checkGroup(group))!.transport(device);
}

/** Virtual ranks on the host: the exchange copies each shard's bytes to the next rank's buffer. */
function hostLoopback(size: number): RingTransport {
  return {
    size,
    onRank: (_rank, fn) => fn(),
    like: (_rank, t) => Tensor.zeros(t.shape, t.dtype),
    shift(send, recv) {
      for (let r = 0; r < size; r++) {
        const from = send[(r - 1 + size) % size];
        recv[r].forEach((t, i) => {
          (t.data as Uint16Array).set(from[i].data as Uint16Array);
        });
      }
    },
    wait: () => {},
  };
}
