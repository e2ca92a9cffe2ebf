"""Model of deterministic mode's ordered dQ adds on the wgmma backward loops (src/kernels/hopper/bwd_dq_order.cuh),
no GPU needed:

    python3 benchmarks/harnesses/backward-dq-order-model.py check [configs]     (default 3000)
    python3 benchmarks/harnesses/backward-dq-order-model.py time [B T N SMs]    (default 4 8192 16 132)

check: random T, S, padding lengths, windows, causal alignments, GQA groups and SM counts; blocks start in the
grid's linear order as SMs free up and move at random speeds. Asserts that every query block receives the adds
of exactly the key blocks that see it, in the kernel's order, and that the grid never deadlocks — the kernel's
own rules (key_block_range, dq_place, dq_first_adder, the release at the next step's barrier) in Python.

time: the makespan of the B·N heads' key blocks with and without the ordering (one block per SM, each step one
unit: its dQ adds issued 3/4 of the way through, the previous step's release at its barrier half way; a block's
K/V load and dK/dV store about two steps), non-causal and causal: the deterministic slowdown the waits alone
would cost, before the adds' completion waits.
"""
import random
import sys

BNK, BMQ = 128, 64


def key_range(kn0, t_len, s_len, diag, causal, window, left, right):
    """bwd_common.cuh key_block_range: the query blocks [mb_lo, mb_lo + blocks) that see keys [kn0, kn0 + BNK)."""
    kn_last = min(kn0 + BNK, s_len) - 1
    lo, hi = 0, t_len
    if causal:
        lo = max(lo, kn0 - diag)
    if window:
        lo = max(lo, kn0 - diag - right)
        hi = min(hi, kn_last - diag + left + 1)
    if kn0 >= s_len:
        hi = lo
    mb_lo = lo // BMQ
    return mb_lo, ((hi + BMQ - 1) // BMQ - mb_lo) if hi > lo else 0


class Head:
    """One (batch, KV head): its key blocks' ranges and the kernel's order."""

    def __init__(self, S, t_len, s_len, causal, window, left, right, bottom):
        self.nx = -(-S // BNK)
        self.desc = causal or window
        diag = s_len - t_len if bottom else 0
        self.args = (t_len, s_len, diag, causal, window, left, right)
        self.ranges = [key_range(j * BNK, *self.args) for j in range(self.nx)]

    def place(self, j):
        return self.nx - 1 - j if self.desc else j

    def first_adder(self, j, mb):
        if self.place(j) == 0:
            return True
        lo, blocks = key_range((j + 1 if self.desc else j - 1) * BNK, *self.args)
        return blocks == 0 or mb < lo or mb >= lo + blocks

    def launch_order(self, ordered=True):
        """key_block_order: ascending, or last first where the ordered adds are descending."""
        return [self.nx - 1 - i if ordered and self.desc else i for i in range(self.nx)]


def run(heads, group, slots, ordered=True, speed=None, add_at=0.75, release_at=0.5, fixed=2.0):
    """Blocks of every head in the grid's launch order, `slots` at once. Returns the makespan and
    the adds each (head, query head, query block) received, in order."""
    # key_block_order: heads in pairs, key block by key block.
    queue = []
    for pair in range(0, len(heads), 2):
        members = list(range(pair, min(pair + 2, len(heads))))
        orders = [heads[h].launch_order(ordered) for h in members]
        for i in range(max(len(o) for o in orders)):
            queue += [(h, o[i]) for h, o in zip(members, orders) if i < len(o)]
    sem, added = {}, {}
    active, t, done_time, dt = [], 0.0, 0.0, 0.25
    while queue or active:
        while queue and len(active) < slots:
            h, j = queue.pop(0)
            mb_lo, blocks = heads[h].ranges[j]
            active.append({"h": h, "j": j, "s": 0, "steps": blocks * group, "phase": -fixed, "pending": None})
        for b in list(active):
            head = heads[b["h"]]
            mb_lo, blocks = head.ranges[b["j"]]
            if b["s"] >= b["steps"]:
                if b["pending"] is not None:
                    sem[b["pending"]] = head.place(b["j"]) + 1
                active.remove(b)
                done_time = max(done_time, t)
                continue
            step = speed() if speed else 1.0
            key = (b["h"], b["s"] // blocks, mb_lo + b["s"] % blocks)
            before = b["phase"]
            after = before + dt / step
            if before < release_at <= after and b["pending"] is not None:
                sem[b["pending"]] = head.place(b["j"]) + 1
                b["pending"] = None
            if before < add_at <= after:
                turn = head.first_adder(b["j"], key[2]) or sem.get(key, 0) == head.place(b["j"])
                if ordered and not turn:
                    continue  # waits at the adds
                added.setdefault(key, []).append(b["j"])
            b["phase"] = after
            if after >= 1.0:
                b["phase"], b["pending"], b["s"] = 0.0, key, b["s"] + 1
        t += dt
        if t > 1e7:
            raise RuntimeError("no progress: deadlock")
    return done_time, added


def check(configs):
    rng = random.Random(7)
    for _ in range(configs):
        T, S = rng.randint(1, 1500), rng.randint(1, 2500)
        causal, window, bottom = rng.random() < 0.5, rng.random() < 0.3, rng.random() < 0.5
        left, right = rng.randint(0, 600), rng.randint(0, 600)
        group = rng.randint(1, 3)
        heads = []
        for _ in range(rng.randint(1, 3)):
            t_len = rng.randint(0, T) if rng.random() < 0.3 else T
            s_len = rng.randint(0, S) if rng.random() < 0.3 else S
            heads.append(Head(S, t_len, s_len, causal, window, left, right, bottom))
        _, added = run(heads, group, rng.randint(1, 6), speed=lambda: rng.choice([0.5, 1.0, 1.0, 2.0]), fixed=0.0)
        for (h, n, mb), js in added.items():
            head = heads[h]
            want = [j for j in range(head.nx) if head.ranges[j][1] > 0 and head.ranges[j][0] <= mb < sum(head.ranges[j])]
            assert js == sorted(want, key=head.place), ((h, n, mb), js, want)
    print(f"{configs} configurations: every query block's adds in the order, no deadlock")


def time(B, T, N, sms):
    for causal in (False, True):
        heads = [Head(T, T, T, causal, False, 0, 0, False) for _ in range(B * N)]
        plain, _ = run(heads, 1, sms, ordered=False)
        ordered, _ = run(heads, 1, sms, ordered=True)
        print(f"B={B} T=S={T} N={N} {sms} SMs causal={causal}: makespan {plain:.0f} → {ordered:.0f} steps ordered "
              f"({plain / ordered:.3f}× the unordered speed)")


if __name__ == "__main__":
    mode = sys.argv[1] if len(sys.argv) > 1 else "check"
    if mode == "check":
        check(int(sys.argv[2]) if len(sys.argv) > 2 else 3000)
    else:
        time(*(int(a) for a in (sys.argv[2:6] if len(sys.argv) == 6 else ["4", "8192", "16", "132"])))
