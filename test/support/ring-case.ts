/** One contextParallelAttention case of the CPU and GPU ring suites: shapes and attention options. */
import type { AttentionOptions } from '../../src/backends/problem.js';

export interface RingCase {
  readonly name: string;
  readonly B: number;
  readonly T: number;
  readonly S: number;
  readonly N: number;
  readonly K: number;
  readonly options: AttentionOptions;
}
