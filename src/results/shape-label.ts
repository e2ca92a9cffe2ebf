import type { ProblemSize } from '../backends/problem.js';

/** `B×T×N×H`, with S and K written out only when they differ from T and N: the label of a shape. */
export function shapeLabel(c: ProblemSize): string {
  const seq = c.S === c.T ? `${c.T}` : `${c.T}/${c.S}`;
  const heads = c.K === c.N ? `${c.N}` : `${c.N}/${c.K}`;
  return `${c.B}×${seq}×${heads}×${c.H}`;
}
