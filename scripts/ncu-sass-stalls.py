#!/usr/bin/env python3
"""Where a kernel's warps wait, from ncu's per-instruction source page.

    ncu -i REPORT.ncu-rep --page source --csv --print-source sass > sass.csv
    python3 scripts/ncu-sass-stalls.py sass.csv [kernel name, '' for the first] [top N]

Prints, for one kernel of the CSV (the first, or the one named): the warp-stall samples by reason; by opcode
(HGMMA, WARPGROUP.DEPBAR — a wgmma wait —, BAR, MUFU, LDGSTS, UBLKRED, …); and the N instructions with the
most samples, each with its address, SASS, samples and its two largest reasons. A sample is one warp seen
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
    print(f'\n## the {top} instructions with the most samples')
    ranked = sorted(rows, key=lambda r: -num(r, header[samples_at]))[:top]
    for r in ranked:
        s = num(r, header[samples_at])
        two = sorted(((num(r, h), h) for h in reasons), reverse=True)[:2]
        why = ', '.join(f'{h[6:]} {int(c)}' for c, h in two if c)
        print(f'{r[0][-5:]} {100 * s / total:5.2f}%  {r[1].strip()[:70]:<70} {why}')


if __name__ == '__main__':
    main()
