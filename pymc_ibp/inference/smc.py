"""Tempered sequential Monte Carlo for the linear-Gaussian IBP model, with its estimate of the
model evidence ``log p(X)`` (:func:`sample_smc`).

The particles move from the prior to the posterior through the tempered targets

.. math:: \\pi_\\tau(Z) \\propto P(Z)\\int p(X\\mid Z, A)^{\\tau}\\,p(A)\\,dA,
    \\qquad 0 = \\tau_0 < \\tau_1 < \\dots < \\tau_T = 1,

(Del Moral, Doucet & Jasra 2006).  A Gaussian likelihood to the power ``τ`` is the same
likelihood with noise ``σx²/τ`` times a constant
(:func:`pymc_ibp.kernels.gaussian.tempered_loglik`), so each particle is moved at each
temperature by the accelerated collapsed Gibbs sweeps and the split–merge, birth–death and
pair-swap moves of :class:`pymc_ibp.AcceleratedGibbs` at that noise, which leave
``π_τ`` invariant.  Each next temperature is the one at which the effective sample size of the
incremental weights is ``ess`` of the particles (bisection), but at most ``growth`` times the
current one: particles that all miss a feature the data want have similar weights, and the
effective sample size alone then lets the temperature jump to 1 past the distributions where
they would find it (an evidence estimate tens of nats low, measured on six block images).
The particles are then resampled (systematic) and moved.  The product of the mean incremental
weights is an unbiased estimate of ``p(X)``; its log is reported per chain (an independent
run), and the spread over chains is its Monte Carlo error.
"""

from __future__ import annotations

import math

import numpy as np
import pymc as pm
import xarray as xr

from pymc_ibp import kernels
from pymc_ibp.distributions.ibp import ibp_draw_core
from pymc_ibp.exceptions import ModelPatternError
from pymc_ibp.matching.linear_gaussian import PATTERN, matched_models
from pymc_ibp.matching.prior_modes import prior_mode
from pymc_ibp.matching.priors import IBPPrior

__all__ = ["sample_smc"]


def _spec(model):
    specs = matched_models(model)
    if len(specs) != 1:
        raise ModelPatternError(
            "pmi.sample_smc needs one pmi.IBP matrix with the linear-Gaussian pattern; found "
            f"{len(specs)}. Needed pattern: {PATTERN}.")
    spec = specs[0]
    if not isinstance(spec.prior, IBPPrior) or spec.z_data is not None:
        raise ModelPatternError(f"pmi.sample_smc needs a free pmi.IBP prior on "
                                f"{spec.z_rv.name!r}.")
    if spec.sharded is not None or spec.missing_mask is not None:
        raise ModelPatternError("pmi.sample_smc needs the data on the driver without missing "
                                "entries.")
    if any(b.offset is not None for b in spec.blocks):
        raise ModelPatternError("pmi.sample_smc does not handle an offset yet; centre the "
                                "data's columns and leave it out, or use pm.sample.")
    others = [rv.name for rv in model.free_RVs if rv is not spec.z_rv and rv not in spec.a_rvs]
    if others:
        raise ModelPatternError(
            f"pmi.sample_smc integrates out A and needs the scales and alpha fixed (numbers); "
            f"the model has other free variables {others}. Use pm.sample for this model.")
    return spec


def _ess(logw):
    """The effective sample size of weights ``exp(logw)``."""
    w = np.exp(logw - logw.max())
    return w.sum() ** 2 / np.sum(w * w)


def _systematic(rng, logw):
    """Indices of a systematic resampling of the weights ``exp(logw)``."""
    w = np.exp(logw - logw.max())
    cum = np.cumsum(w / w.sum())
    cum[-1] = 1.0
    u = (rng.random() + np.arange(w.size)) / w.size
    return np.searchsorted(cum, u)


class _Particles:
    """The particles of one chain and their tempered log-likelihoods."""

    def __init__(self, rng, X, noise, alpha, beta, k_max, draws):
        n = X.shape[0]
        self.X, self.noise, self.n = X, noise, n
        self.trXX = kernels.block_sq_norms(X, noise)
        self.Z = np.stack([ibp_draw_core(rng, alpha, beta, n, k_max) for _ in range(draws)])
        self.stats = [self._stats(z) for z in self.Z]

    def _stats(self, Z):
        act = np.flatnonzero(Z.sum(axis=0))
        return kernels.suff_stats(Z, self.X, act)

    def loglik(self, temperature):
        return np.array([kernels.tempered_loglik(G, RX, self.trXX, self.n, self.noise,
                                                 temperature) for G, RX in self.stats])

    def resample(self, idx):
        self.Z = self.Z[idx].copy()
        self.stats = [self.stats[i] for i in idx]

    def move(self, rng, temperature, mode, alpha, beta, sweeps, moves):
        hot = kernels.Noise(self.noise.cols, self.noise.sx2 / temperature, self.noise.sa2)
        refresh = kernels.refresh_interval(self.n)
        for i, Z in enumerate(self.Z):
            m = Z.sum(axis=0).astype(np.int64)
            for _ in range(sweeps):
                kernels.accelerated_sweep(rng, Z, self.X, m, hot, mode.sweep_prior, refresh)
                kernels.linear_gaussian_moves(rng, Z, self.X, m, hot, alpha, beta, self.trXX,
                                              moves)
            self.stats[i] = self._stats(Z)


def _next_temperature(particles, current, ll_now, ess):
    """The temperature after ``current`` at which the incremental weights keep an effective
    sample size of ``ess`` of the particles (1 when they do at 1), by bisection."""
    target = ess * ll_now.size
    if _ess(particles.loglik(1.0) - ll_now) >= target:
        return 1.0
    lo, hi = current, 1.0
    for _ in range(50):
        mid = 0.5 * (lo + hi)
        if _ess(particles.loglik(mid) - ll_now) >= target:
            lo = mid
        else:
            hi = mid
        if hi - lo < 1e-10:
            break
    return max(lo, current + 1e-12)


def sample_smc(model=None, *, draws=500, chains=4, ess=0.5, sweeps=3, growth=1.2,
               random_seed=None):
    """Tempered sequential Monte Carlo from the prior to the posterior of a linear-Gaussian
    IBP model, and its estimate of the log evidence ``log p(X)`` (module docstring).

    Parameters
    ----------
    model : pm.Model, optional
        The model (from the context if omitted): the pattern of
        :class:`pymc_ibp.AcceleratedGibbs` with a ``pmi.IBP`` prior and the scales and
        ``alpha`` fixed (numbers), no offset, no missing entries.
    draws : int, default 500
        Particles per chain.
    chains : int, default 4
        Independent runs; their spread gives the Monte Carlo error of ``log p(X)``.
    ess : float, default 0.5
        The effective sample size, as a fraction of ``draws``, that sets each next
        temperature.
    sweeps : int, default 3
        Sweeps (each followed by the split–merge, birth–death and pair-swap moves of
        :class:`pymc_ibp.AcceleratedGibbs`) per particle and temperature.
    growth : float, default 1.2
        The largest factor by which a temperature may grow from one stage to the next.
    random_seed : int or Generator, optional

    Returns
    -------
    xarray.DataTree
        ``posterior`` with ``Z`` and ``A`` (``A`` drawn from its Gaussian conditional given
        each particle), one draw per particle; ``sample_stats`` with ``log_marginal_likelihood``
        (``chain``) and ``beta`` (``chain, stage``: the temperatures, NaN after a chain's
        last); attributes ``log_marginal_likelihood`` (the mean over chains) and
        ``log_marginal_likelihood_se`` (the standard error over chains).
    """
    model = pm.modelcontext(model)
    if not 0.0 < float(ess) < 1.0:
        raise ValueError(f"ess must lie in (0, 1); got {ess!r}.")
    if not float(growth) > 1.0:
        raise ValueError(f"growth must be > 1; got {growth!r}.")
    if int(draws) < 2 or int(chains) < 1:
        raise ValueError("sample_smc needs draws >= 2 and chains >= 1.")
    spec = _spec(model)
    sx, sa, alpha, beta = spec.hyper_values(model)
    X = np.ascontiguousarray(spec.X, dtype=np.float64)
    n, d = X.shape
    k_max = spec.k_max
    noise = kernels.noise_blocks(sx**2, sa**2, d)
    mode = prior_mode(spec.prior, n, k_max)
    mode.set_params(alpha, beta)
    moves = kernels.Moves(5, "sequential", 5, 3, 64, 3)
    seeds = np.random.default_rng(random_seed).spawn(int(chains))
    Zs, As, logz, betas = [], [], [], []
    for rng in seeds:
        particles = _Particles(rng, X, noise, alpha, beta, k_max, int(draws))
        temp, ll_now, total, path = 0.0, np.zeros(int(draws)), 0.0, [0.0]
        while temp < 1.0:
            new = _next_temperature(particles, temp, ll_now, float(ess))
            if temp > 0.0:  # at most a factor growth per stage (module docstring)
                new = min(new, float(growth) * temp)
            ll_new = particles.loglik(new)
            w = ll_new - ll_now
            total += float(np.logaddexp.reduce(w) - math.log(w.size))
            idx = _systematic(rng, w)
            particles.resample(idx)
            temp, path = new, path + [new]
            particles.move(rng, temp, mode, alpha, beta, int(sweeps), moves)
            ll_now = particles.loglik(temp)
        Zs.append(particles.Z)
        As.append(np.stack([kernels.draw_features(rng, z, X, noise) for z in particles.Z]))
        logz.append(total)
        betas.append(path)
    return _result(model, spec, Zs, As, np.array(logz), betas)


def _result(model, spec, Zs, As, logz, betas):
    chains, draws = len(Zs), Zs[0].shape[0]
    z_name = model.rvs_to_values[spec.z_rv].name
    zdims = model.named_vars_to_dims.get(spec.z_rv.name) or (f"{z_name}_dim_0",
                                                              f"{z_name}_dim_1")
    coords = {"chain": np.arange(chains), "draw": np.arange(draws)}
    post = {z_name: (("chain", "draw", *zdims), np.stack(Zs).astype(np.int8))}
    A = np.stack(As)
    col = 0
    for b in spec.blocks:
        name = b.a_rv.name
        adims = model.named_vars_to_dims.get(name) or (f"{name}_dim_0", f"{name}_dim_1")
        post[name] = (("chain", "draw", *adims), A[..., col:col + b.shape[1]])
        col += b.shape[1]
    for dims in [zdims] + [model.named_vars_to_dims.get(b.a_rv.name) or () for b in spec.blocks]:
        for dim in dims:
            if dim in model.coords and model.coords[dim] is not None:
                coords[dim] = np.asarray(model.coords[dim])
    stages = max(len(p) for p in betas)
    beta = np.full((chains, stages), np.nan)
    for c, path in enumerate(betas):
        beta[c, :len(path)] = path
    se = float(np.std(logz, ddof=1) / math.sqrt(chains)) if chains > 1 else float("nan")
    attrs = {"log_marginal_likelihood": float(np.mean(logz)),
             "log_marginal_likelihood_se": se, "sampler": "pymc_ibp.sample_smc"}
    stats = xr.Dataset({"log_marginal_likelihood": (("chain",), logz),
                        "beta": (("chain", "stage"), beta)},
                       coords={"chain": np.arange(chains), "stage": np.arange(stages)},
                       attrs=attrs)
    return xr.DataTree.from_dict({
        "posterior": xr.Dataset(post, coords=coords, attrs=attrs),
        "sample_stats": stats,
    })
