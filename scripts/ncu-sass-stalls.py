#!/usr/bin/env python3
"""Where a kernel's warps wait, from ncu's per-instruction source page.

    ncu -i REPORT.ncu-rep --page source --csv --print-source sass > sass.csv
    python3 scripts/ncu-sass-stalls.py sass.csv [kernel name, '' for the first] [top N]

Prints, for one kernel of the CSV (the first, or the one named): the warp-stall samples by reason; by opcode
(HGMMA, WARPGROUP.DEPBAR — a wgmma wait —, BAR, MUFU, LDGSTS, UBLKRED, …); by stretch of code between two
waits (a wgmma wait, a barrier, an mbarrier wait), in address order, with the HGMMA shapes each issues — the
phases of a loop; and the N instructions with the most samples, each with its address, SASS, samples and its
two largest reasons. A sample is one warp seen
at one instruction at a sampling tick, stalled or issuing: the share of samples at an instruction is the
share of warp time spent there.
"""
import csv
import re
import sys
from collections import Counter, defaultdict


def kernels(path):
    """(name, header, rows) for each kernel section of the CSV."""
    name, header, rows, out = None, None, [], []
    for r in csv.reader(open(path, newline='')):
        if not r:
            continue
        if r[0] == 'Kernel Name':
            if name is not None:
                out.append((name, header, rows))
            name, header, rows = r[1], None, []
        elif r[0] == 'Address':
            header = r
        elif header is not None:
            rows.append(r)
    if name is not None:
        out.append((name, header, rows))
    return out


def opcode(sass):
    """The opcode of a SASS line, without its predicate and modifiers past the first ('HGMMA', 'BAR')."""
    text = re.sub(r'^\s*@!?U?P\w+\s+', '', sass.strip())
    if not text:
        return '?'
    parts = text.split(' ')[0].split('.')
    # A wgmma wait (WARPGROUP.DEPBAR) and a wgmma fence (WARPGROUP.ARRIVE) are different things.
    return '.'.join(parts[:2]) if parts[0] in ('WARPGROUP', 'SYNCS', 'BAR') else parts[0]


def main():
    path = sys.argv[1]
    want = sys.argv[2] if len(sys.argv) > 2 and sys.argv[2] else None
    top = int(sys.argv[3]) if len(sys.argv) > 3 else 40
    found = [k for k in kernels(path) if want is None or k[0] == want]
    if not found:
        sys.exit(f'no kernel {want!r} in {path}')
    name, header, rows = found[0]
    col = {h: i for i, h in enumerate(header)}
    samples_at = col['Warp Stall Sampling (All Samples)']
    reasons = [h for h in header if h.startswith('stall_') and '(Not Issued)' not in h]

    def num(r, h):
        v = r[col[h]].replace(',', '')
        return float(v) if v not in ('', 'N/A') else 0.0

    total = sum(num(r, header[samples_at]) for r in rows) or 1.0
    by_reason = Counter()
    by_op = Counter()
    op_reasons = defaultdict(Counter)
    for r in rows:
        op = opcode(r[1])
        s = num(r, header[samples_at])
        by_op[op] += s
        for h in reasons:
            v = num(r, h)
            by_reason[h] += v
            op_reasons[op][h] += v
    print(f'# {name}: {len(rows)} SASS instructions, {int(total)} samples')
    print('\n## samples by reason')
    for h, v in by_reason.most_common():
        if v:
            print(f'{h[6:]:<22} {100 * v / total:5.1f}%')
    print('\n## samples by opcode (and its two largest reasons)')
    for op, v in by_op.most_common(25):
        two = ', '.join(f'{h[6:]} {100 * c / total:.1f}%' for h, c in op_reasons[op].most_common(2) if c)
        print(f'{op:<22} {100 * v / total:5.1f}%   {two}')
    print('\n## the code between waits, in address order (segments with at least 1% of the samples)')
    print('# each segment ends at a wgmma wait (WARPGROUP.DEPBAR), a barrier (BAR) or an mbarrier wait (SYNCS);')
    print('# its samples include the wait itself; "issues" counts the HGMMA shapes issued inside it')
    seg, seg_start = [], None
    for r in rows:
        if seg_start is None:
            seg_start = r[0]
        seg.append(r)
        op = opcode(r[1])
        if op in ('WARPGROUP.DEPBAR', 'BAR.SYNC', 'BAR.RED', 'SYNCS.PHASECHK') or r is rows[-1]:
            s = sum(num(x, header[samples_at]) for x in seg)
            if s / total >= 0.01:
                ops = Counter()
                for x in seg:
                    ops[opcode(x[1])] += num(x, header[samples_at])
                hgmma = Counter(re.search(r'HGMMA\.(\w+)', x[1]).group(1) for x in seg if 'HGMMA' in x[1])
                tops = ', '.join(f'{o} {100 * c / total:.1f}%' for o, c in ops.most_common(4) if c)
                issues = ' '.join(f'{k}×{v}' for k, v in hgmma.items())
                end = r[1].strip()[:40]
                print(f'{seg_start[-5:]}–{r[0][-5:]} {100 * s / total:5.1f}% {len(seg):4d} instr, ends "{end}"'
                      f'{"  issues " + issues if issues else ""}\n      {tops}')
            seg, seg_start = [], None

    print(f'\n## the {top} instructions with the most samples')
    ranked = sorted(rows, key=lambda r: -num(r, header[samples_at]))[:top]
    for r in ranked:
        s = num(r, header[samples_at])
        two = sorted(((num(r, h), h) for h in reasons), reverse=True)[:2]
        why = ', '.join(f'{h[6:]} {int(c)}' for c, h in two if c)
        print(f'{r[0][-5:]} {100 * s / total:5.2f}%  {r[1].strip()[:70]:<70} {why}')


if __name__ == '__main__':
    main()
