/**
 * `fn` under ATTNLAB_LAUNCH_GRAPH=`value` (unset where undefined), the variable unset and the config
 * re-read after: the stand-in and GPU tests of the launch-graph routes (runtime/launch-graph.ts) switch
 * them per call this way.
 */
import { reloadConfig } from '../../src/config.js';

export function withLaunchGraph<R>(value: string | undefined, fn: () => R): R {
  if (value === undefined) delete process.env.ATTNLAB_LAUNCH_GRAPH;
  else process.env.ATTNLAB_LAUNCH_GRAPH = value;
  reloadConfig();
  try {
    return fn();
  } finally {
    delete process.env.ATTNLAB_LAUNCH_GRAPH;
    reloadConfig();
  }
}
