"""Tempered sequential Monte Carlo for the linear-Gaussian IBP model, with its estimate of the
model evidence ``log p(X)`` (:func:`sample_smc`).

The particles move from the prior to the posterior through the tempered targets

.. math:: \\pi_\\tau(Z, \\theta) \\propto p(\\theta)\\,P(Z\\mid\\theta)
    \\int p(X\\mid Z, A, \\theta)^{\\tau}\\,p(A\\mid\\theta)\\,dA,
    \\qquad 0 = \\tau_0 < \\tau_1 < \\dots < \\tau_T = 1,

where ``θ`` are the free hyperparameters (the scales, ``alpha``, ``beta`` and what they depend
on; none when they are numbers)

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
The particles are then resampled (systematic) and moved; free hyperparameters take a
random-walk Metropolis step after each sweep, in the model's unconstrained space, at
``π_τ(θ | Z)`` (A integrated out, the tempered likelihood from the spectrum of ``ZᵀZ``:
:func:`pymc_ibp.kernels.gaussian.tempered_loglik_columns`), scaled by the particles' spread.
The product of the mean incremental
weights is an unbiased estimate of ``p(X)``; its log is reported per chain (an independent
run), and the spread over chains is its Monte Carlo error.  As a check, the same run also
integrates ``d log p_τ(X)/dτ`` (the particles' mean slope of their tempered log-likelihood,
:func:`pymc_ibp.kernels.tempered_loglik_slope_columns`) over its temperatures from ``τ_1`` on
by the trapezoid rule (thermodynamic integration, Gelman & Meng 1998); the first stage,
``[0, τ_1]``, enters by its importance weight as in the SMC estimate, since at ``τ = 0`` the
slope's mean over the prior is infinite when a scale's prior has mass near zero (``E[1/σx²]``
under a half-normal).

**A reference for the noise scale.**  With ``σx`` free, the tempered posterior of ``σx``
given ``Z`` sits at the residual's scale ``sqrt(RSS/ND)`` at every temperature, so the hot
noise ``σx²/τ`` never falls below it: particles that explain the data by noise keep ``σx``
large, and features are born only once the hot noise is near the true one.  So the path
starts instead from ``γ_0 = p(θ₋) r(log σx) P(Z | θ)``, with ``r`` normal about a robust
estimate of the noise (Gavish & Donoho 2014) and the spread at which the likelihood's
curvature in ``log σx`` overtakes it at ``τ ≈ 0.8``, and passes through
``γ_τ ∝ p(θ₋) r^{1-τ} (p(σx | ·) L_τ)``: the weights and the Metropolis steps of the
hyperparameters carry ``(1 - τ) log(r / p(σx | ·))`` beside the tempered likelihood, which
holds ``σx`` near the noise until the features are found and leaves the target at ``τ = 1``
the posterior (an SMC sampler may start from any distribution it can draw and evaluate;
Del Moral, Doucet & Jasra 2006).
"""

from __future__ import annotations

import logging
import math
import multiprocessing as mp
import os
import warnings
from typing import NamedTuple

import numpy as np
import pymc as pm
import xarray as xr
from pytensor.graph.traversal import ancestors

from pymc_ibp import kernels
from pymc_ibp._pytensor_utils import compile_point_fn
from pymc_ibp.distributions.ibp import ibp_draw_core
from pymc_ibp.exceptions import ModelPatternError, UntrustedChainsWarning
from pymc_ibp.inference.smc_model import ModelKernel, PriorDraws
from pymc_ibp.matching.linear_gaussian import PATTERN, matched_models
from pymc_ibp.matching.prior_modes import prior_mode
from pymc_ibp.matching.priors import IBPPrior

__all__ = ["sample_smc"]

_log = logging.getLogger("pymc")


def _spec(model):
    specs = matched_models(model)
    if len(specs) != 1:
        raise ModelPatternError(
            "pmi.sample_smc needs one pmi.IBP matrix with the linear-Gaussian pattern; found "
            f"{len(specs)}. Needed pattern: {PATTERN}.")
    spec = specs[0]
    if model.potentials:
        raise ModelPatternError(
            f"the accelerated kernel of pmi.sample_smc cannot carry the potentials "
            f"{[p.name for p in model.potentials]}.")
    if not isinstance(spec.prior, IBPPrior) or spec.z_data is not None:
        raise ModelPatternError(f"pmi.sample_smc needs a free pmi.IBP prior on "
                                f"{spec.z_rv.name!r}.")
    if spec.sharded is not None or spec.missing_mask is not None:
        raise ModelPatternError("pmi.sample_smc needs the data on the driver without missing "
                                "entries.")
    if any(b.offset is not None for b in spec.blocks):
        raise ModelPatternError("pmi.sample_smc does not handle an offset yet; centre the "
                                "data's columns and leave it out, or use pm.sample.")
    hyper = model.replace_rvs_by_values(
        [*spec.column_scales(), spec.prior.alpha, spec.prior.beta])
    needed = set(ancestors(hyper))
    others = [rv for rv in model.free_RVs if rv is not spec.z_rv and rv not in spec.a_rvs]
    stray = [rv.name for rv in others if model.rvs_to_values[rv] not in needed]
    if stray:
        raise ModelPatternError(
            f"pmi.sample_smc integrates out A and moves the scales and alpha; the model has "
            f"other free variables {stray}. Use pm.sample for this model.")
    discrete = [rv.name for rv in others if not rv.dtype.startswith("float")]
    if discrete:
        raise ModelPatternError(f"pmi.sample_smc needs continuous hyperparameters; "
                                f"{discrete} are discrete. Use pm.sample for this model.")
    return spec, others


class _Hyper:
    """The free hyperparameters of the particles (the scales, ``alpha``, ``beta`` and the
    variables they depend on) in the model's unconstrained value space: their prior draws,
    the values they give, and the prior density of a particle, ``log p(θ) + log P(Z | θ)``
    (with the Jacobians of the transforms)."""

    def __init__(self, model, spec, rvs, noise_reference="auto"):
        self.rvs = rvs
        self.names = [model.rvs_to_values[rv].name for rv in rvs]
        self.z_name = model.rvs_to_values[spec.z_rv].name
        self.base = model.initial_point()
        self.values = spec.hyper_values_fn(model)
        self.shapes = [np.shape(self.base[n]) for n in self.names]
        self.sizes = [int(np.prod(sh)) for sh in self.shapes]
        self.dim = sum(self.sizes)
        self.reference = None
        if rvs:
            self.prior = model.compile_logp(vars=[*rvs, spec.z_rv], jacobian=True, sum=True)
            self._draws = PriorDraws(model, rvs)
            self._constrained = compile_point_fn(model, model.replace_rvs_by_values(rvs))
            self.reference = _NoiseReference.build(model, spec, self, noise_reference)
        if self.reference is not None:
            sx = spec.blocks[0].sigma_x.name
            _log.info(f"pmi.sample_smc: {sx!r} starts from a reference about the data's noise, "
                      f"log {sx} ~ Normal({self.reference.mean:.3g}, "
                      f"{self.reference.sd:.3g}) (noise_reference=False: from its prior)")

    def point(self, theta, Z=None):
        """The model's point at the unconstrained vector ``theta`` (and ``Z``)."""
        pt_ = dict(self.base)
        at = 0
        for name, shape, size in zip(self.names, self.shapes, self.sizes, strict=True):
            pt_[name] = theta[at:at + size].reshape(shape)
            at += size
        if Z is not None:
            pt_[self.z_name] = Z
        return pt_

    def draw(self, rng, draws):
        """``draws`` draws of the unconstrained vector (``draws x dim``) at ``τ = 0``: the
        prior's, with the noise scales from their reference (:class:`_NoiseReference`)."""
        if not self.rvs:
            return np.zeros((draws, 0))
        theta = np.concatenate([v.reshape(draws, -1).astype(float)
                                for v in self._draws(rng, draws)], axis=1)
        if self.reference is not None:
            self.reference.draw(rng, theta)
        return theta

    def log_ratio(self, theta):
        """``log r(θ) - log p(σx | ·)`` of the noise reference, 0 without one."""
        if self.reference is None:
            return 0.0
        return self.reference.log_ratio(theta, self.point(theta))

    def constrained(self, theta):
        """The hyperparameters' values at ``theta``, by name."""
        vals = self._constrained(self.point(theta))
        return {rv.name: np.asarray(v) for rv, v in zip(self.rvs, vals, strict=True)}


class _NoiseReference(NamedTuple):
    """The reference density of the noise scale at ``τ = 0`` (module docstring): ``log σx``
    normal about a robust estimate of the noise of ``X``
    (:func:`pymc_ibp.kernels.noise_scale_estimate`), with a spread that hands ``σx`` over to
    the likelihood at about ``τ = HANDOFF``."""

    index: np.ndarray  # the coordinates of θ holding log σx
    mean: float
    sd: float
    prior: object  # log p(log σx | its parents), with the log transform's Jacobian

    #: the temperature at which the likelihood's curvature in ``log σx`` (``2τ`` per
    #: observation) equals the reference's (``(1 - τ) / sd²``)
    HANDOFF = 0.8
    #: ``noise_reference="auto"`` takes the reference from this many rows and columns on
    MIN_SIDE = 10

    @classmethod
    def build(cls, model, spec, hyper, use="auto"):
        """The reference of a free noise scale: one free variable with a log transform that
        is every block's ``σx`` (a scalar or one per column), when ``use`` is True, or
        ``"auto"`` and the data have at least :attr:`MIN_SIDE` rows and columns (fewer give
        the noise estimate too few singular values); ``None`` otherwise."""
        from pymc.logprob.transforms import LogTransform

        handoff = use if isinstance(use, float) else cls.HANDOFF
        if use is False or (use == "auto" and min(spec.X.shape) < cls.MIN_SIDE):
            return None

        scales = {b.sigma_x for b in spec.blocks}
        if len(scales) != 1:
            return None
        sx = scales.pop()
        if sx not in hyper.rvs or not isinstance(model.rvs_to_transforms.get(sx),
                                                 LogTransform):
            return None
        at = hyper.rvs.index(sx)
        start = sum(hyper.sizes[:at])
        index = np.arange(start, start + hyper.sizes[at])
        n, d = spec.X.shape
        per = n * d / index.size  # observations per component of σx
        sd = math.sqrt((1.0 / handoff - 1.0) / 2.0 / per)
        mean = math.log(max(kernels.noise_scale_estimate(spec.X), 1e-12))
        return cls(index, mean, sd, model.compile_logp(vars=[sx], jacobian=True, sum=True))

    def draw(self, rng, theta):
        """Replace the noise coordinates of every row of ``theta`` by reference draws."""
        theta[:, self.index] = self.mean + self.sd * rng.standard_normal(
            (theta.shape[0], self.index.size))

    def log_ratio(self, theta, point):
        z = (theta[self.index] - self.mean) / self.sd
        log_r = float(-0.5 * (z @ z) - self.index.size * (math.log(self.sd)
                                                         + 0.5 * math.log(2 * math.pi)))
        return log_r - float(self.prior(point))


class _Params(NamedTuple):
    """What a particle's hyperparameters give: the noise blocks and ``trXX`` of the sweeps,
    ``alpha``, ``beta``, and the per-column variances of the tempered likelihood."""

    noise: kernels.Noise
    alpha: float
    beta: float
    trXX: np.ndarray
    sx2: np.ndarray
    sa2: np.ndarray
    log_ratio: float = 0.0


class _Particles:
    """The particles of one chain: their ``Z``, hyperparameters ``theta`` (unconstrained) and
    the spectra of their collapsed likelihoods (:func:`pymc_ibp.kernels.collapsed_spectrum`),
    from which a tempered log-likelihood of every particle costs one array expression."""

    def __init__(self, rng, X, hyper, spec, k_max, draws):
        n, d = X.shape
        self.moves = kernels.Moves(5, "sequential", 5, 3, 64, 3)
        self.X, self.n, self.d, self.k_max, self.hyper = X, n, d, k_max, hyper
        self.colsq = kernels.column_sq_norms(X)
        self.mode = prior_mode(spec.prior, n, k_max)
        self.theta = hyper.draw(rng, draws)
        self.params = [self._params(t) for t in self.theta]
        self.Z = np.stack([ibp_draw_core(rng, p.alpha, p.beta, n, k_max) for p in self.params])
        self.g = np.zeros((draws, k_max))
        self.q = np.zeros((draws, k_max, d))
        for i in range(draws):
            self._spectrum(i)

    def _params(self, theta):
        sx, sa, alpha, beta = self.hyper.values(self.hyper.point(theta))
        sx2 = np.broadcast_to(sx**2, (self.d,)).astype(float)
        sa2 = np.broadcast_to(sa**2, (self.d,)).astype(float)
        noise = kernels.noise_blocks(sx2, sa2, self.d)
        return _Params(noise, alpha, beta, kernels.block_sq_norms(self.X, noise, self.colsq),
                       sx2, sa2, self.hyper.log_ratio(theta))

    def _spectrum(self, i):
        Z = self.Z[i]
        G, RX = kernels.suff_stats(Z, self.X, np.flatnonzero(Z.sum(axis=0)))
        self.g[i], self.q[i] = kernels.collapsed_spectrum(G, RX, self.k_max)

    def loglik(self, temperature, i=None, params=None):
        """The tempered part of the target of every particle, or of particle ``i`` (at its
        own hyperparameters, or at ``params``): the tempered log-likelihood plus
        ``(1 - τ)`` times the noise reference's log ratio (module docstring)."""
        if i is None:
            return kernels.tempered_loglik_columns(self.g, self.q, self.colsq, self.n,
                                                   *self._scales(), temperature) + (
                (1.0 - temperature) * self.start())
        p = self.params[i] if params is None else params
        return float(kernels.tempered_loglik_columns(
            self.g[i:i + 1], self.q[i:i + 1], self.colsq, self.n, p.sx2[None], p.sa2[None],
            temperature)[0]) + (1.0 - temperature) * p.log_ratio

    def start(self):
        """:meth:`loglik` of every particle at ``τ = 0``: the noise reference's log ratio."""
        return np.array([p.log_ratio for p in self.params])

    def slope(self, temperature):
        """``d/dτ`` of every particle's :meth:`loglik` at ``temperature``
        (:func:`pymc_ibp.kernels.tempered_loglik_slope_columns`, less the log ratio)."""
        return kernels.tempered_loglik_slope_columns(self.g, self.q, self.colsq, self.n,
                                                     *self._scales(), temperature) - self.start()

    def _scales(self):
        """Every particle's per-column ``σx²`` and ``σa²`` (``P x D`` each)."""
        return (np.stack([p.sx2 for p in self.params]),
                np.stack([p.sa2 for p in self.params]))

    def resample(self, idx):
        self.Z = self.Z[idx].copy()
        self.theta = self.theta[idx].copy()
        self.g, self.q = self.g[idx].copy(), self.q[idx].copy()
        self.params = [self.params[i] for i in idx]

    def move(self, rng, temperature, sweeps):
        """``sweeps`` times per particle: an accelerated sweep and the moves of
        :class:`pymc_ibp.AcceleratedGibbs` at the hot noise, then a random-walk Metropolis
        step of the hyperparameters (scaled by the particles' spread); returns the
        Metropolis acceptance rate (NaN without free hyperparameters)."""
        refresh = kernels.refresh_interval(self.n)
        scale = None
        if self.hyper.dim:
            spread = self.theta.std(axis=0)
            scale = 2.38 / math.sqrt(self.hyper.dim) * np.where(spread > 0, spread, 0.1)
        accepted = 0
        for i, Z in enumerate(self.Z):
            m = Z.sum(axis=0).astype(np.int64)
            for _ in range(sweeps):
                p = self.params[i]
                hot = kernels.Noise(p.noise.cols, p.noise.sx2 / temperature, p.noise.sa2)
                self.mode.set_params(p.alpha, p.beta)
                kernels.accelerated_sweep(rng, Z, self.X, m, hot, self.mode.sweep_prior,
                                          refresh)
                kernels.linear_gaussian_moves(rng, Z, self.X, m, hot, p.alpha, p.beta, p.trXX,
                                              self.moves)
                if scale is not None:  # the Metropolis step reads the new Z's spectrum
                    self._spectrum(i)
                    accepted += self._move_hyper(rng, i, temperature, scale)
            if scale is None:
                self._spectrum(i)
        return accepted / (sweeps * len(self.Z)) if scale is not None else math.nan

    def final(self, rng):
        """The particles' ``Z``, ``A`` (drawn from its Gaussian conditional) and ``theta``."""
        A = np.stack([kernels.draw_features(rng, z, self.X, p.noise)
                      for z, p in zip(self.Z, self.params, strict=True)])
        return self.Z, A, self.theta

    def _move_hyper(self, rng, i, temperature, scale):
        """One random-walk Metropolis step of particle ``i``'s hyperparameters at
        ``π_τ(θ | Z) ∝ p(θ) P(Z | θ) L(Z, θ)^τ``; returns 1 if accepted."""
        hyper, Z, theta = self.hyper, self.Z[i], self.theta[i]
        prop = theta + scale * rng.standard_normal(theta.size)
        lp_prop = float(hyper.prior(hyper.point(prop, Z)))
        if not math.isfinite(lp_prop):
            return 0
        params = self._params(prop)
        lp_prop += self.loglik(temperature, i, params)
        lp_now = float(hyper.prior(hyper.point(theta, Z))) + self.loglik(temperature, i)
        if math.log(rng.random()) < lp_prop - lp_now:
            self.theta[i], self.params[i] = prop, params
            return 1
        return 0


def _next_temperature(particles, current, ll_now, ess):
    """The temperature after ``current`` at which the incremental weights keep an effective
    sample size of ``ess`` of the particles (1 when they do at 1), by bisection."""
    target = ess * ll_now.size
    if kernels.effective_sample_size(particles.loglik(1.0) - ll_now) >= target:
        return 1.0
    lo, hi = current, 1.0
    for _ in range(50):
        mid = 0.5 * (lo + hi)
        if kernels.effective_sample_size(particles.loglik(mid) - ll_now) >= target:
            lo = mid
        else:
            hi = mid
        if hi - lo < 1e-10:
            break
    return max(lo, current + 1e-12)


def _kernel(model, kernel, noise_reference="auto"):
    """The mutation kernel: the accelerated one where the model has the linear-Gaussian
    pattern it needs, else the model's generic one (:mod:`pymc_ibp.inference.smc_model`)."""
    if kernel not in ("auto", "accelerated", "gibbs"):
        raise ValueError(f"kernel must be 'auto', 'accelerated' or 'gibbs'; got {kernel!r}.")
    if kernel != "gibbs":
        try:
            spec, free = _spec(model)
        except ModelPatternError as err:
            if kernel == "accelerated":
                raise
            why = err.reason
            _log.info("pmi.sample_smc: the generic Metropolis-within-Gibbs kernel moves the "
                      "particles, slower than the accelerated one (%s)", why)
        else:
            return _LinearGaussianKernel(model, _Hyper(model, spec, free, noise_reference),
                                         spec,
                                         np.ascontiguousarray(spec.X, dtype=np.float64))
    return ModelKernel(model)


def sample_smc(model=None, *, draws=500, chains=4, ess=0.5, sweeps=3, growth=1.2,
               kernel="auto", noise_reference="auto", cores=None, client=None,
               random_seed=None):
    """Tempered sequential Monte Carlo from the prior to the posterior of a model, and its
    estimate of the log evidence ``log p(X)`` (module docstring).

    Parameters
    ----------
    model : pm.Model, optional
        The model (from the context if omitted).  With the pattern of
        :class:`pymc_ibp.AcceleratedGibbs` (a ``pmi.IBP`` prior, no offset, no missing
        entries; the scales, ``alpha`` and ``beta`` numbers or continuous free variables with
        their own priors, and no other free variable) the particles move by the accelerated
        kernel, with ``A`` integrated out; any other model (the DP-IBP, IBP-IBP,
        stick-breaking and dependent IBPs, other likelihoods, potentials) by Metropolis-within-
        Gibbs on its own density (:mod:`pymc_ibp.inference.smc_model`), slower and for small
        and moderate models.
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
    noise_reference : {"auto", True, False} or float, default "auto"
        Under the accelerated kernel with a free noise scale ``σx`` (one variable with a log
        transform, e.g. ``pm.HalfNormal``): draw the particles' ``log σx`` at ``τ = 0`` from
        a normal reference about a robust estimate of the data's noise
        (:func:`pymc_ibp.kernels.noise_scale_estimate`) instead of its prior, and temper from
        that reference to the prior with the likelihood (module docstring).  Without it the
        particles explain the data by noise and miss features (``docs/evidence.md``).
        ``"auto"``: with at least 10 rows and 10 columns; a float in ``(0, 1)``: the
        temperature at which the likelihood takes over (default 0.8; smaller is a wider
        reference).  The evidence is exact either way.
    kernel : {"auto", "accelerated", "gibbs"}, default "auto"
        The particles' moves: ``"auto"`` takes the accelerated kernel where the model has
        its pattern (and says in one log line why not otherwise); ``"accelerated"`` raises
        an error naming what the model lacks; ``"gibbs"`` takes the generic kernel for any
        model (a check of the accelerated one).
    cores : int, optional
        Chains run at once, in forked worker processes (default: as many as chains and
        CPUs allow; 1, or a platform without ``fork``, runs them one after another).  The
        draws for one seed do not depend on it.
    client : distributed.Client, optional
        A Dask client: each chain runs as one task on its workers instead (``cores`` is then
        ignored), with the same draws for one seed.  A chain whose worker is lost is re-run
        by Dask from its seed; one that cannot finish raises an error naming it.
    random_seed : int or Generator, optional

    Returns
    -------
    xarray.DataTree
        ``posterior`` with the model's free variables and deterministics, one draw per
        particle (under the accelerated kernel ``Z``, ``A`` drawn from its Gaussian
        conditional given each particle, and the free hyperparameters); ``sample_stats``
        with ``log_marginal_likelihood`` (``chain``), ``log_marginal_likelihood_ti``
        (``chain``: thermodynamic integration over the same temperatures, a check of the
        SMC estimate; its error is the trapezoid rule's on the stages), ``beta``
        (``chain, stage``: the temperatures, NaN after a chain's last) and
        ``accept_rate`` (the acceptance rate of the random-walk Metropolis steps of the
        continuous variables at each stage: the hyperparameters under the accelerated
        kernel); attributes
        ``log_marginal_likelihood`` (the mean over chains) and ``log_marginal_likelihood_se``
        (the standard error over chains) and ``mutation_kernel``.
    """
    model = pm.modelcontext(model)
    if not 0.0 < float(ess) < 1.0:
        raise ValueError(f"ess must lie in (0, 1); got {ess!r}.")
    if not float(growth) > 1.0:
        raise ValueError(f"growth must be > 1; got {growth!r}.")
    if int(draws) < 2 or int(chains) < 1:
        raise ValueError("sample_smc needs draws >= 2 and chains >= 1.")
    if int(sweeps) < 1:
        raise ValueError(f"sweeps must be a positive integer; got {sweeps!r}.")
    if not (isinstance(noise_reference, bool) or noise_reference == "auto"
            or isinstance(noise_reference, float) and 0.0 < noise_reference < 1.0):
        raise ValueError(f"noise_reference must be 'auto', True, False or a hand-off "
                         f"temperature in (0, 1); got {noise_reference!r}.")
    run = _Run(_kernel(model, kernel, noise_reference), int(draws), float(ess),
               float(growth), int(sweeps),
               np.random.default_rng(random_seed).spawn(int(chains)))
    if isinstance(run.kernel, ModelKernel):
        run.kernel.check_size()
    cores = min(int(chains), os.cpu_count() or 1) if cores is None else int(cores)
    if cores < 1:
        raise ValueError(f"cores must be a positive integer; got {cores!r}.")
    if client is not None:
        out = _on_dask(client, run, int(chains))
    elif cores > 1 and "fork" in mp.get_all_start_methods():
        global _RUN
        _RUN = run  # the workers, forked below, inherit it (compiled functions included)
        try:
            # a Pool forks its workers before it starts its own threads (a
            # ProcessPoolExecutor forks them later, from a process that has threads)
            with mp.get_context("fork").Pool(cores) as pool:
                out = pool.map(_run_in_worker, range(int(chains)), chunksize=1)
        finally:
            _RUN = None
    else:
        out = [run.chain(c) for c in range(int(chains))]
    finals, logz, betas, rates, lls, ti = (list(x) for x in zip(*out, strict=True))
    idata = _result(model, run.kernel, run.kernel.posterior(finals), np.array(logz), betas,
                    rates, np.stack(lls), np.array(ti))
    _check_runs(np.stack(lls))
    return idata


def _check_runs(ll, rhat_max=1.05):
    """One :class:`~pymc_ibp.UntrustedChainsWarning` line when the runs' final particles
    disagree: the rank R-hat of their log-likelihoods (``chains x particles``) above
    ``rhat_max`` means the runs ended in different modes, and ``log p(X)`` is unreliable."""
    from arviz_stats.base import array_stats

    if ll.shape[0] < 2 or ll.shape[1] < 4 or not np.all(np.isfinite(ll)):
        return
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        r = float(array_stats.rhat(ll, chain_axis=0, draw_axis=1))
    if r > rhat_max:
        means = ll.mean(axis=1)
        warnings.warn(
            f"pmi.sample_smc: the runs disagree (R-hat of the final particles' "
            f"log-likelihood {r:.2f}, their means {means.max() - means.min():.1f} nats apart): "
            "their particles sit in different modes and log p(X) is not reliable; raise draws "
            "or sweeps, or compare models by held-out entries (pmi.compare_models).",
            UntrustedChainsWarning, stacklevel=3)


#: the run a forked worker of :func:`sample_smc` executes (set only while the pool runs)
_RUN = None


def _chain_task(run, c):
    return run.chain(c)


def _on_dask(client, run, chains):
    """Each chain of ``run`` as one task on the Dask ``client``'s workers (the run, compiled
    functions and each chain's generator included, is pickled to them)."""
    futures = [client.submit(_chain_task, run, c, pure=False) for c in range(chains)]
    out = []
    for c, fut in enumerate(futures):
        try:
            out.append(fut.result())
        except Exception as err:  # KilledWorker, a worker's error, a cancelled future
            for f in futures:
                f.cancel()
            try:
                why = f"{type(err).__name__}: {err}"
            except Exception:  # an exception whose str() fails
                why = type(err).__name__
            raise RuntimeError(
                f"pmi.sample_smc: chain {c} did not finish on the Dask cluster ({why}); check "
                "the workers (memory, logs) and re-run, or pass client=None to run the chains "
                "on this machine.") from err
    return out


def _run_in_worker(c):
    return _RUN.chain(c)


class _Run(NamedTuple):
    """One call of :func:`sample_smc`: the mutation kernel (what every chain needs to make
    and move its particles) and the settings, and each chain's generator."""

    kernel: object
    draws: int
    ess: float
    growth: float
    sweeps: int
    seeds: list

    def chain(self, c):
        """Chain ``c`` from the prior to the posterior: ``(the particles' final values,
        log p(X), the temperatures, the acceptance rates of the Metropolis steps, the final
        log-likelihoods, log p(X) by thermodynamic integration over the same
        temperatures)``."""
        rng = self.seeds[c]
        particles = self.kernel.particles(rng, self.draws)
        temp, ll_now, total, path, acc = 0.0, particles.start(), 0.0, [0.0], []
        slopes, first = [], 0.0  # TI: the slopes at τ_1, τ_2, ... and the first stage's
        while temp < 1.0:
            new = _next_temperature(particles, temp, ll_now, self.ess)
            if temp > 0.0:  # at most a factor growth per stage (module docstring)
                new = min(new, self.growth * temp)
            w = particles.loglik(new) - ll_now
            total += float(np.logaddexp.reduce(w) - math.log(w.size))
            if temp == 0.0:  # [0, τ_1] by its importance weight (module docstring)
                first = total
            particles.resample(kernels.systematic_resample(rng, w))
            temp, path = new, path + [new]
            acc.append(particles.move(rng, temp, self.sweeps))
            ll_now = particles.loglik(temp)
            slopes.append(float(particles.slope(temp).mean()))
        ti = first + float(np.sum(np.diff(path[1:]) * (np.add(slopes[1:], slopes[:-1])) / 2))
        return particles.final(rng), total, path, acc, particles.loglik(1.0), ti


class _LinearGaussianKernel(NamedTuple):
    """The accelerated kernel of the linear-Gaussian pattern (module docstring): the matched
    model, its free hyperparameters and the data."""

    model: object
    hyper: _Hyper
    spec: object
    X: np.ndarray

    name = "accelerated"

    def particles(self, rng, draws):
        return _Particles(rng, self.X, self.hyper, self.spec, self.spec.k_max, draws)

    def posterior(self, finals):
        """``Z``, the ``A`` blocks and the free hyperparameters of every chain's particles."""
        model, spec, hyper = self.model, self.spec, self.hyper
        Zs, As, thetas = (list(x) for x in zip(*finals, strict=True))
        z_name = model.rvs_to_values[spec.z_rv].name
        zdims = model.named_vars_to_dims.get(spec.z_rv.name) or (f"{z_name}_dim_0",
                                                                  f"{z_name}_dim_1")
        post = {z_name: (("chain", "draw", *zdims), np.stack(Zs).astype(np.int8))}
        A = np.stack(As)
        col = 0
        for b in spec.blocks:
            name = b.a_rv.name
            adims = model.named_vars_to_dims.get(name) or (f"{name}_dim_0", f"{name}_dim_1")
            post[name] = (("chain", "draw", *adims), A[..., col:col + b.shape[1]])
            col += b.shape[1]
        if hyper.rvs:
            vals = [[hyper.constrained(t) for t in theta] for theta in thetas]
            for rv in hyper.rvs:
                dims = model.named_vars_to_dims.get(rv.name) or tuple(
                    f"{rv.name}_dim_{j}" for j in range(rv.ndim))
                post[rv.name] = (("chain", "draw", *dims),
                                 np.array([[v[rv.name] for v in chain] for chain in vals]))
        return post


def _result(model, kernel, post, logz, betas, rates, lls, ti):
    chains, draws = lls.shape
    coords = {"chain": np.arange(chains), "draw": np.arange(draws)}
    for dims in [v[0] for v in post.values()]:
        for dim in dims[2:]:
            if dim in model.coords and model.coords[dim] is not None:
                coords[dim] = np.asarray(model.coords[dim])
    stages = max(len(p) for p in betas)
    beta = np.full((chains, stages), np.nan)
    for c, path in enumerate(betas):
        beta[c, :len(path)] = path
    se = float(np.std(logz, ddof=1) / math.sqrt(chains)) if chains > 1 else float("nan")
    attrs = {"log_marginal_likelihood": float(np.mean(logz)),
             "log_marginal_likelihood_se": se, "sampler": "pymc_ibp.sample_smc",
             "mutation_kernel": kernel.name}
    rate = np.full((chains, stages), np.nan)
    for c, r in enumerate(rates):
        rate[c, 1:len(r) + 1] = r
    stats = xr.Dataset({"log_marginal_likelihood": (("chain",), logz),
                        "log_marginal_likelihood_ti": (("chain",), ti),
                        "beta": (("chain", "stage"), beta),
                        "accept_rate": (("chain", "stage"), rate),
                        "log_likelihood": (("chain", "draw"), lls)},
                       coords={"chain": np.arange(chains), "draw": np.arange(draws),
                               "stage": np.arange(stages)},
                       attrs=attrs)
    return xr.DataTree.from_dict({
        "posterior": xr.Dataset(post, coords=coords, attrs=attrs),
        "sample_stats": stats,
    })
