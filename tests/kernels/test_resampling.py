"""Particle weights: effective sample size and systematic resampling against known cases."""

import numpy as np
import pytest
from scipy import stats

from pymc_ibp import kernels


def test_effective_sample_size_of_known_weights():
    assert kernels.effective_sample_size(np.zeros(7)) == pytest.approx(7.0)
    assert kernels.effective_sample_size([0.0, -np.inf, -np.inf]) == pytest.approx(1.0)
    # weights 1, 1, 2: (1 + 1 + 2)² / (1 + 1 + 4)
    logw = np.log([1.0, 1.0, 2.0])
    assert kernels.effective_sample_size(logw) == pytest.approx(16 / 6)
    # only differences of log-weights matter, far from 0 in either direction
    assert kernels.effective_sample_size(logw + 1e4) == pytest.approx(16 / 6)
    assert kernels.effective_sample_size(logw - 1e4) == pytest.approx(16 / 6)
    with pytest.raises(ValueError, match="finite"):
        kernels.effective_sample_size([-np.inf, -np.inf])
    with pytest.raises(ValueError, match="NaN"):
        kernels.effective_sample_size([0.0, np.nan])


def test_systematic_resampling_draws_each_particle_floor_or_ceil_of_its_share():
    """Each particle drawn ⌊n w⌋ or ⌈n w⌉ times, zero weights never (also in front, where a
    uniform of 0 would land on them with the cumulative sums' left edge), and n w on average
    (a z-test per particle over 4000 seeds)."""
    rng = np.random.default_rng(0)
    n = 12
    logw = rng.normal(0.0, 1.5, n)
    logw[[0, 1, 7]] = -np.inf
    w = np.exp(logw - logw.max())
    share = n * w / w.sum()
    counts = np.zeros((4000, n))
    for s in range(4000):
        idx = kernels.systematic_resample(np.random.default_rng(s), logw + 300.0)
        assert idx.shape == (n,) and np.all(np.diff(idx) >= 0)
        counts[s] = np.bincount(idx, minlength=n)
    assert np.all(counts >= np.floor(share) - 1e-9) and np.all(counts <= np.ceil(share) + 1e-9)
    assert not counts[:, [0, 1, 7]].any()
    live = share > 0
    se = counts[:, live].std(axis=0, ddof=1) / np.sqrt(counts.shape[0])
    z = (counts[:, live].mean(axis=0) - share[live]) / np.maximum(se, 1e-12)
    assert stats.chi2.sf(np.sum(z**2), z.size) > 1e-3, z

    class Zero:  # a uniform of exactly 0 with leading zero weights
        def random(self):
            return 0.0

    assert kernels.systematic_resample(Zero(), [-np.inf, -np.inf, 0.0, 0.0])[0] == 2
