/**
 * What the three decode kernels' support checks share (decode.ts, decode-heads.ts, decode-tma.ts), written
 * once and cheap: each runs on every decode call, where the host's ~10–40 µs a call is what a B=1 step
 * waits for (benchmarks/results/h200/decode/2026-12-02-tma-kernel-every-k).
 */
import type { AttentionProblem } from '../../../problem.js';

const majors = new Map<string, number>();

/** 90 for 'sm_90a', 80 for 'sm_80': parsed once per name (a regex each call cost ~0.2 µs). */
export function archMajor(arch: string): number {
  let major = majors.get(arch);
  if (major === undefined) {
    major = Number(/sm_(\d+)/.exec(arch)?.[1] ?? 0);
    majors.set(arch, major);
  }
  return major;
}

/** Whether `p`'s key and value start on 16-byte boundaries, as bulk and tensor copies need (host data: yes). */
export function keyValueAligned(p: AttentionProblem): boolean {
  return p.device !== 'cuda' || (p.key.buffer.ptr % 16n === 0n && p.value.buffer.ptr % 16n === 0n);
}
