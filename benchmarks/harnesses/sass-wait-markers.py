"""Where the waits sit in a Hopper kernel's SASS: reads `cuobjdump -sass -fun <name>` on
stdin and prints, in order, the synchronisation instructions (WARPGROUP.DEPBAR, BAR, SYNCS, VOTE,
the last HGMMA of each chain) with runs of MUFU.EX2 collapsed, so one can see whether the wait for
P·V (DEPBAR.LE gsb0, 0x0) comes after the softmax's exponentials or before them.

    cuobjdump -sass -fun NAME binary | python3 benchmarks/harnesses/sass-wait-markers.py
"""
import re
import sys

lines = [l for l in sys.stdin if re.search(r"/\*[0-9a-f]{4,}\*/", l)]
marks, mufu = [], []
for i, l in enumerate(lines):
    text = re.sub(r"/\*[0-9a-f]+\*/", "", l).split(";")[0].strip()
    if "MUFU.EX2" in text:
        mufu.append(i)
        continue
    if any(k in text for k in ("DEPBAR", "BAR.SYNC", "BAR.ARV", "VOTE", "SYNCS.ARRIVE")) or (
        "HGMMA" in text and "gsb0" in text
    ):
        if mufu:
            marks.append(f"   MUFU.EX2 x{len(mufu)} [{mufu[0]}..{mufu[-1]}]")
            mufu = []
        marks.append(f"{i:6d} {text[:90]}")
if mufu:
    marks.append(f"   MUFU.EX2 x{len(mufu)} [{mufu[0]}..{mufu[-1]}]")
print(f"{len(lines)} instructions")
print("\n".join(marks[:60]))
