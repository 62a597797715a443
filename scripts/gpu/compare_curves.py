#!/usr/bin/env python3
"""Compares two `ljperf train --log-json` loss curves (e.g. GPU against CPU).

Prints, for every logged iteration (every --log-interval-th, plus the first and the last), the
value `ljperf train` prints there: the mean loss over the iterations since the previous logged
one (Megatron-LM's convention for "lm loss"). Then the worst relative difference of those logged
values, and, for reference, the worst relative difference of single iterations.

Usage: compare_curves.py RUN.jsonl REFERENCE.jsonl [--log-interval 10] [--goal 0.02]
Exit status: 0 when every logged value is within --goal of the reference, 1 otherwise, 2 on
unreadable input.
"""
import argparse
import json
import sys


def load(path):
    out = {}
    try:
        with open(path) as f:
            for n, line in enumerate(f, 1):
                line = line.strip()
                if not line:
                    continue
                r = json.loads(line)
                if "loss" in r and "iteration" in r:
                    out[int(r["iteration"])] = float(r["loss"])
    except (OSError, ValueError) as e:
        sys.exit(f"compare_curves: {path}: {e}")
    if not out:
        sys.exit(f"compare_curves: {path}: no records with 'iteration' and 'loss'")
    return out


def logged(curve, interval, last):
    """iteration -> mean loss since the previous logged iteration (as train prints it)."""
    out, acc, n = {}, 0.0, 0
    for i in range(1, last + 1):
        if i not in curve:
            return out
        acc += curve[i]
        n += 1
        if i % interval == 0 or i == 1 or i == last:
            out[i] = acc / n
            acc, n = 0.0, 0
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("run")
    ap.add_argument("reference")
    ap.add_argument("--log-interval", type=int, default=10)
    ap.add_argument("--goal", type=float, default=0.02)
    a = ap.parse_args()
    run, ref = load(a.run), load(a.reference)
    last = min(max(run), max(ref))
    lr, lc = logged(run, a.log_interval, last), logged(ref, a.log_interval, last)
    common = sorted(set(lr) & set(lc))
    worst_logged = max((abs(lr[i] - lc[i]) / abs(lc[i]), i) for i in common)
    singles = sorted(set(run) & set(ref))
    worst_single = max((abs(run[i] - ref[i]) / abs(ref[i]), i) for i in singles)
    print(f"{'iteration':>9}  {'run':>8}  {'reference':>9}  {'diff':>7}")
    for i in common:
        print(f"{i:9d}  {lr[i]:8.4f}  {lc[i]:9.4f}  {100 * (lr[i] - lc[i]) / lc[i]:+6.2f}%")
    ok = worst_logged[0] <= a.goal
    print(f"logged values (mean over each interval of {a.log_interval}): {len(common)} compared, worst "
          f"{100 * worst_logged[0]:.2f}% at iteration {worst_logged[1]} (goal <= {100 * a.goal:.0f}%): "
          f"{'PASS' if ok else 'FAIL'}")
    print(f"single iterations: {len(singles)} compared, worst {100 * worst_single[0]:.2f}% at iteration "
          f"{worst_single[1]}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
