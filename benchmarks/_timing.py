"""Timing helpers: spreads over repetitions, log-log slopes, PyMC's own sampling time and a
per-iteration clock (a ``pm.sample`` callback).
"""

from __future__ import annotations

import time

import numpy as np


def spread(times) -> dict:
    t = np.asarray(times, dtype=float)
    return {"median_s": float(np.median(t)), "min_s": float(t.min()), "max_s": float(t.max()),
            "reps": int(t.size)}


def loglog_slope(ns, ts) -> float | None:
    ns, ts = np.asarray(ns, float), np.asarray(ts, float)
    if ns.size < 2:
        return None
    return float(np.polyfit(np.log(ns), np.log(ts), 1)[0])


def sampling_time(idata) -> float:
    """Wall time of pm.sample's sampling loop (tune + draws; step construction excluded)."""
    return float(idata["posterior"].attrs["sampling_time"])


class IterationClock:
    """pm.sample callback recording the wall time, chain and tuning flag of every iteration."""

    def __init__(self):
        self.t, self.chain, self.tuning = [], [], []

    def __call__(self, trace, draw):
        self.t.append(time.perf_counter())
        self.chain.append(draw.chain)
        self.tuning.append(bool(draw.tuning))

    def per_iteration(self) -> float:
        """Median duration of the post-tuning iterations (the interval since the previous
        iteration of the same chain)."""
        t, c, tu = np.array(self.t), np.array(self.chain), np.array(self.tuning)
        ok = (c[1:] == c[:-1]) & ~tu[1:]
        d = np.diff(t)[ok]
        return float(np.median(d)) if d.size else float("nan")
