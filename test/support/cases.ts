import type { AttentionCase } from '../../src/check/cases.js';

export * from '../../src/check/cases.js';

/**
 * Local-window cases several tiles long, which the shared matrix (kept small for the CPU) does not
 * reach: every GPU backend that takes windows runs them.
 */
export const WINDOW_CASES: readonly AttentionCase[] = [
  {
    name: 'T=300 S=330 window [64,0] bottom-right + padding',
    shape: { B: 2, T: 300, S: 330, N: 2, K: 1, H: 64 },
    options: {
      localWindowSize: [64, 0],
      causalAlignment: 'bottom_right',
      querySeqLengths: [300, 257],
      keyValueSeqLengths: [330, 280],
    },
  },
  {
    name: 'T=260 S=400 window [100,30]',
    shape: { B: 1, T: 260, S: 400, N: 2, K: 2, H: 64 },
    options: { localWindowSize: [100, 30] },
  },
];
