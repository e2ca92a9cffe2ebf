/**
 * The NCCL binding (src/backends/cuda/ffi/nccl.ts) against a stand-in libnccl compiled from
 * test/fake-device/nccl-fake.c, on a machine without a GPU: found through ATTNLAB_NCCL, the version
 * decoded, NVLink multicast switched off, the 128-byte ncclUniqueId passed by value (the stand-in
 * accepts only every byte of the id it handed out), send/receive arguments as NCCL reads them, and a
 * failing status turned into a DeviceError with NCCL's text.
 */
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import { fileURLToPath } from 'node:url';
import koffi from 'koffi';
import { libraryCandidates } from '../../src/backends/cuda/ffi/libraries.js';
import {
  formatNcclVersion,
  NCCL_DATA_TYPE,
  NCCL_UNIQUE_ID_BYTES,
  nc,
} from '../../src/backends/cuda/ffi/nccl.js';
import { DeviceError } from '../../src/errors.js';

const dir = mkdtempSync(join(tmpdir(), 'attnlab-fake-nccl-'));
const library = join(dir, 'libnccl.so.2');
const source = fileURLToPath(new URL('./nccl-fake.c', import.meta.url));
const built = spawnSync('cc', ['-shared', '-fPIC', '-O1', '-o', library, source], { encoding: 'utf8' });
const skip = built.status === 0 ? false : `no C compiler: ${built.error?.message ?? built.stderr}`;
// Read at the first NCCL use.
process.env.ATTNLAB_NCCL = dir;
process.env.NCCL_NVLS_ENABLE = '1';

const lastCall = () => JSON.parse(koffi.load(library).func('const char *fake_last_call()')() as string);

describe('NCCL through koffi (stand-in library)', { skip }, () => {
  it('is found through ATTNLAB_NCCL (a folder), reads its version, and turns NVLink multicast off', () => {
    assert.equal(libraryCandidates('nccl', { ATTNLAB_NCCL: dir })[0], library);
    const n = nc();
    assert.equal(n.path, library);
    assert.equal(n.version, 22803);
    assert.equal(formatNcclVersion(n.version), '2.28.3');
    assert.equal(formatNcclVersion(2708), '2.7.8'); // NCCL < 2.9: 1000·major + 100·minor + patch
    assert.equal(process.env.NCCL_NVLS_ENABLE, '0');
  });

  it('passes the 128-byte ncclUniqueId to ncclCommInitRank by value, every byte', () => {
    const n = nc();
    const id = n.uniqueId();
    assert.equal(id.internal.length, NCCL_UNIQUE_ID_BYTES);
    assert.equal(id.internal[127], (127 * 7 + 3) & 0xff);
    const comm = new BigUint64Array(1);
    n.ncclCommInitRank(comm, 2, id, 1);
    assert.equal(comm[0], BigInt(0x1000 + 16 + 2));
    // The last byte changed: the stand-in refuses it, so the whole struct travelled.
    const bad = { internal: Uint8Array.from(id.internal) };
    bad.internal[127] ^= 0xff;
    assert.throws(
      () => n.ncclCommInitRank(comm, 2, bad, 1),
      (e: unknown) =>
        e instanceof DeviceError &&
        e.call === 'ncclCommInitRank' &&
        /invalid argument \(fake\)/.test(e.message),
    );
  });

  it('makes one communicator per device with ncclCommInitAll, and sends/receives inside a group', () => {
    const n = nc();
    const comms = new BigUint64Array(2);
    n.ncclCommInitAll(comms, 2, Int32Array.from([3, 5]));
    assert.deepEqual([...comms], [BigInt(0x2003), BigInt(0x2005)]);
    n.ncclGroupStart();
    n.ncclSend(0x7000n, 4096, NCCL_DATA_TYPE.uint8, 1, comms[0], 0x99n);
    assert.deepEqual(lastCall(), {
      call: 'send',
      buf: 0x7000,
      count: 4096,
      type: 1,
      peer: 1,
      comm: 0x2003,
      stream: 0x99,
      depth: 1,
    });
    n.ncclRecv(0x8000n, 4096, NCCL_DATA_TYPE.uint8, 0, comms[1], 0x98n);
    assert.deepEqual(lastCall(), {
      call: 'recv',
      buf: 0x8000,
      count: 4096,
      type: 1,
      peer: 0,
      comm: 0x2005,
      stream: 0x98,
      depth: 1,
    });
    n.ncclGroupEnd();
    assert.throws(
      () => n.ncclGroupEnd(),
      (e: unknown) => e instanceof DeviceError && e.call === 'ncclGroupEnd',
    );
    for (const c of comms) n.ncclCommDestroy(c);
  });
});
