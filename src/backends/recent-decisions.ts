/**
 * The last few `auto` decisions of plain problems (no lengths, no modifiers), found by comparing fields instead
 * of building a shape-class string (~1 KB of allocation a call): registry.ts and backward-registry.ts keep one
 * each. Everything is forgotten when the settings or the calibrated table change.
 */
import { config } from '../config.js';
import { calibrationGeneration } from './tuning-registry.js';

/** What of a problem both decisions read; `extra` is the operation's own field (the backward's determinism). */
export interface DecisionCase {
  readonly dtype: string;
  readonly B: number;
  readonly T: number;
  readonly S: number;
  readonly N: number;
  readonly K: number;
  readonly H: number;
  readonly Hv: number;
  readonly causal: boolean;
  readonly alignment: string;
  readonly window: unknown;
  readonly bias: unknown;
  readonly mask: unknown;
}

interface Entry<D> {
  readonly device: number;
  readonly of: DecisionCase;
  readonly extra: unknown;
  readonly decision: D;
}

const KEPT = 4;

/** `D`: the registry's decision (registry.ts's AutoDecision). */
export class RecentDecisions<D> {
  private readonly entries: Entry<D>[] = [];
  private settings: unknown = null;
  private generation = -1;

  /**
   * Forgets every entry when the settings or the calibrated table changed since the last call; true then (the
   * caller forgets what else it keeps by the same rule).
   */
  refresh(): boolean {
    const settings = config();
    const generation = calibrationGeneration();
    if (settings === this.settings && generation === this.generation) return false;
    this.entries.length = 0;
    this.settings = settings;
    this.generation = generation;
    return true;
  }

  find(p: DecisionCase, device: number, extra?: unknown): D | undefined {
    for (const e of this.entries)
      if (e.device === device && e.extra === extra && sameCase(e.of, p)) return e.decision;
    return undefined;
  }

  remember(p: DecisionCase, device: number, decision: D, extra?: unknown): void {
    const of: DecisionCase = {
      dtype: p.dtype,
      B: p.B,
      T: p.T,
      S: p.S,
      N: p.N,
      K: p.K,
      H: p.H,
      Hv: p.Hv,
      causal: p.causal,
      alignment: p.alignment,
      window: !!p.window,
      bias: !!p.bias,
      mask: !!p.mask,
    };
    this.entries.unshift({ device, of, extra, decision });
    if (this.entries.length > KEPT) this.entries.pop();
  }
}

function sameCase(a: DecisionCase, p: DecisionCase): boolean {
  return (
    a.dtype === p.dtype &&
    a.B === p.B &&
    a.T === p.T &&
    a.S === p.S &&
    a.N === p.N &&
    a.K === p.K &&
    a.H === p.H &&
    a.Hv === p.Hv &&
    a.causal === p.causal &&
    a.alignment === p.alignment &&
    a.window === !!p.window &&
    a.bias === !!p.bias &&
    a.mask === !!p.mask
  );
}
