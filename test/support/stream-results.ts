/**
 * Preloaded by the GPU shards (scripts/gpu-lib.sh: `node --import tsx --import ./test/support/stream-results.ts
 * --test …`): after every test, one turn of the event loop, so that the reporter writes that test's result
 * as it ends. The GPU tests are synchronous (FFI calls, float64 oracles); without a turn, node's reporter
 * writes nothing until the file's last test ends, and a shard cut at its cap logs only "TAP version 13", with
 * nothing to say which of its tests passed. Costs ~10 µs a test.
 */
import { afterEach } from 'node:test';

afterEach(() => new Promise<void>((resolve) => setImmediate(resolve)));
