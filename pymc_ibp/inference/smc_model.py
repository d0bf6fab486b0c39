"""The mutation kernel of :func:`pymc_ibp.sample_smc` for any model: Metropolis-within-Gibbs
on the model's own density, every particle at once.

At temperature ``τ`` the target is ``π_τ ∝ p(θ) p(X | θ)^τ``, with ``θ`` every free variable
of the model (in its unconstrained value space, with the transforms' Jacobians), ``p(θ)`` the
free variables' terms of the model's log density and ``p(X | θ)`` its observed terms and
potentials, the split of PyMC's own ``pm.sample_smc``.  Where the model has a Gaussian
likelihood ``X ~ Normal(W @ A, σx)`` whose ``A ~ Normal(0, σa)`` can be integrated out,
whatever ``W`` is (:func:`pymc_ibp.matching.collapsible.collapsible_gaussian`), ``A`` is
left out of ``θ`` and that term is the tempered collapsed likelihood of the accelerated
kernel (:func:`pymc_ibp.kernels.tempered_loglik_columns`, from the spectrum of ``WᵀW`` of
every particle); ``A`` is drawn from its Gaussian conditional at the end.  One sweep
updates

* every entry of a binary matrix or a Bernoulli variable by Gibbs over ``{0, 1}``, every
  category of a :class:`pymc_ibp.CRP` or a ``pm.Categorical`` by Gibbs over its values, and
  any other discrete entry by a ``±1`` random-walk Metropolis step;
* every continuous variable by random-walk Metropolis steps of two coordinates at a time,
  their scale the particles' spread per coordinate times a factor that is tuned between
  stages towards an acceptance rate of 0.234 (Roberts, Gelman & Gilks 1997).

Each update leaves ``π_τ`` invariant, so the evidence estimate is unbiased whatever the
mixing; the mixing sets its variance.  The two log densities are compiled once with a leading
particle axis (:func:`pytensor.graph.replace.vectorize_graph`), so an update of one entry of
every particle is one call.  A sweep costs a call per alternative value of each discrete
entry and grows with ``N·K_max``; single-entry moves neither split nor merge features, so
this kernel is for small models (:meth:`ModelKernel.check_size` says so beyond them); the
linear-Gaussian IBP has the accelerated one.
"""

from __future__ import annotations

import math
import warnings
from typing import NamedTuple

import numpy as np
import pymc as pm
import pytensor
import pytensor.tensor as pt
from pytensor.graph.replace import graph_replace, vectorize_graph
from pytensor.tensor.random.basic import BernoulliRV, CategoricalRV

from pymc_ibp import kernels
from pymc_ibp._pytensor_utils import constant_value
from pymc_ibp.distributions.crp import CRPRV
from pymc_ibp.distributions.ibp import IBPRV
from pymc_ibp.exceptions import ModelPatternError, UntrustedChainsWarning
from pymc_ibp.matching.collapsible import collapsible_gaussian

__all__ = ["ModelKernel", "PriorDraws"]

#: the target acceptance rate of the random-walk steps of the continuous variables
_TARGET_ACCEPT = 0.234
#: the most coordinates of a continuous variable one random-walk step moves
_BLOCK = 2
#: the most alternatives of discrete entries per sweep, or continuous coordinates, of a model
#: the kernel is trusted on (benchmarks/results/smc_generic.md)
_CHECKED_SIZE = 64


def _support(rv):
    """The values a discrete entry of ``rv`` may take, or None (a ±1 random walk)."""
    op = rv.owner.op
    if isinstance(op, IBPRV | BernoulliRV):
        return np.array([0, 1])
    if isinstance(op, CRPRV):
        return np.arange(int(constant_value(rv.owner.inputs[-1])))
    if isinstance(op, CategoricalRV):
        k = rv.owner.inputs[-1].type.shape[-1]
        return None if k is None else np.arange(int(k))
    return None


def _batched(model, terms, values, batched):
    """The sum of each particle's ``terms`` (a vector over the particles), compiled."""
    out = vectorize_graph(terms, replace=dict(zip(values, batched, strict=True)))
    size = batched[0].shape[0]
    total = pt.zeros((size,))
    for term, vec in zip(terms, out, strict=True):
        if vec.ndim > term.ndim:  # it depends on the particles
            total = total + vec.reshape((size, -1)).sum(axis=1)
        else:
            total = total + vec.sum()
    return total


def _compile(model, inputs, outputs, probe):
    """Compiled with PyTensor's default backend, or its C one where numba cannot type the
    vectorised graph (an integer batched matrix product).  The backends' notes on how they
    run an op (numba's object mode, a missing BLAS) are not the user's concern here."""
    with warnings.catch_warnings(), model:  # pm.compile: a parameter out of its support
        warnings.simplefilter("ignore")  # is -inf (the model's check_bounds), not an error
        try:
            f = pm.compile(inputs, outputs, on_unused_input="ignore")
            f(*probe)  # numba's typing errors may surface only at the first call
            return f
        except Exception:
            mode = pytensor.compile.mode.Mode(linker="cvm", optimizer="fast_run")
            return pm.compile(inputs, outputs, on_unused_input="ignore", mode=mode)


class PriorDraws:
    """Joint prior draws of the free variables ``rvs`` of ``model``, mapped by their
    transforms to the model's value space (what a particle holds)."""

    def __init__(self, model, rvs):
        self.rvs = list(rvs)
        xs = [rv.type() for rv in self.rvs]
        fwd = []
        for rv, x in zip(self.rvs, xs, strict=True):
            tr = model.rvs_to_transforms.get(rv)
            fwd.append(x if tr is None else tr.forward(x, *rv.owner.inputs))
        fwd = graph_replace(fwd, dict(zip(self.rvs, xs, strict=True)), strict=False)
        self._forward = pytensor.function(xs, fwd, on_unused_input="ignore")

    def __call__(self, rng, draws):
        """``draws`` draws: one array (``draws x ...``) per variable."""
        seed = int(rng.integers(2**31 - 1))
        vals = pm.draw(self.rvs, draws=draws, random_seed=seed)
        vals = list(vals) if isinstance(vals, list | tuple) else [vals]
        out = None
        for i in range(draws):
            fwd = self._forward(*[np.asarray(v[i], dtype=rv.dtype)
                                  for v, rv in zip(vals, self.rvs, strict=True)])
            if out is None:
                out = [np.empty((draws, *np.shape(f)), dtype=np.asarray(f).dtype) for f in fwd]
            for o, f in zip(out, fwd, strict=True):
                o[i] = f
        return out


class _Parts(NamedTuple):
    """What the target of every particle is made of: the prior terms, the likelihood terms
    that are tempered as a power (``P`` each) and, when ``A`` is integrated out, the matrix
    ``W`` (``P x N x K``), the spectrum of ``WᵀW`` (``g``, ``q``) and the per-column variances
    (``P x D``)."""

    prior: np.ndarray
    lik: np.ndarray
    W: np.ndarray | None = None
    g: np.ndarray | None = None
    q: np.ndarray | None = None
    sx2: np.ndarray | None = None
    sa2: np.ndarray | None = None


def _pick(candidates, pick):
    """Each particle's parts from the candidate ``pick[p]`` (a list of :class:`_Parts`)."""
    p = np.arange(pick.size)
    return _Parts(*[None if f[0] is None else np.stack(f)[pick, p]
                    for f in zip(*candidates, strict=True)])


def _where(take, new, old):
    """The parts of ``new`` where ``take``, else those of ``old``."""
    out = []
    for a, b in zip(new, old, strict=True):
        if a is None:
            out.append(None)
        else:
            out.append(np.where(take.reshape((-1,) + (1,) * (a.ndim - 1)), a, b))
    return _Parts(*out)


class ModelKernel:
    """What every chain of the model's generic kernel needs: the free variables, their
    compiled prior and likelihood over a batch of particles (and, where the model has a
    Gaussian likelihood ``W @ A`` whose ``A`` can be integrated out,
    :func:`~pymc_ibp.matching.collapsible.collapsible_gaussian`, the matrix ``W`` and the
    scales), prior draws, and the model's values (free variables and deterministics) of a
    particle."""

    name = "gibbs"

    def __init__(self, model):
        if not model.free_RVs:
            raise ModelPatternError("pmi.sample_smc needs a model with free variables.")
        self.model = model
        try:
            self.collapsed = collapsible_gaussian(model)
        except ModelPatternError:
            self.collapsed = None
        cg = self.collapsed
        free = [rv for rv in model.free_RVs if cg is None or rv is not cg.a_rv]
        self.values = [model.rvs_to_values[rv] for rv in free]
        self.rvs = free
        self.discrete = [not v.dtype.startswith("float") for v in self.values]
        self.support = [_support(rv) if d else None for rv, d in zip(free, self.discrete,
                                                                     strict=True)]
        base = model.initial_point()
        self.shapes = [np.shape(base[v.name]) for v in self.values]
        batched = [pt.tensor(dtype=v.dtype, shape=(None, *v.type.shape), name=f"{v.name}_p")
                   for v in self.values]
        prior = _batched(model, model.logp(vars=free, sum=False, jacobian=True), self.values,
                         batched)
        terms = [rv for rv in model.observed_RVs if cg is None or rv is not cg.obs_rv]
        terms += model.potentials
        if not terms and cg is None:
            raise ModelPatternError("pmi.sample_smc needs observed data or a potential.")
        lik = (_batched(model, model.logp(vars=terms, sum=False), self.values, batched)
               if terms else pt.zeros((batched[0].shape[0],)))
        outs = [prior, lik]
        if cg is not None:
            W, sx, sa = model.replace_rvs_by_values([cg.W, cg.sigma_x, cg.sigma_a])
            W_b, sx_b, sa_b = vectorize_graph(
                [pt.cast(W, "float64"), sx, sa],
                replace=dict(zip(self.values, batched, strict=True)))
            size = batched[0].shape[0]
            (n, d), k = cg.X.shape, np.shape(base[model.rvs_to_values[cg.a_rv].name])[0]
            outs += [pt.broadcast_to(W_b, (size, n, k)), pt.broadcast_to(sx_b, (size, d)),
                     pt.broadcast_to(sa_b, (size, d))]
            self.X = cg.X
            self.colsq = (cg.X**2).sum(axis=0)
        probe = [np.repeat(np.asarray(base[v.name], dtype=v.dtype)[None], 2, axis=0)
                 for v in self.values]
        self.density = _compile(model, batched, outs, probe)
        names = {rv.name for rv in model.unobserved_RVs}
        outs = [v for v in model.unobserved_value_vars if v.name in names]
        self.out_names = [v.name for v in outs]
        self.all_values = list(model.value_vars)
        self.outputs = pytensor.function(self.all_values, outs, on_unused_input="ignore")
        self.prior_draws = PriorDraws(model, free)

    def particles(self, rng, draws):
        return _ModelParticles(self, rng, draws)

    def check_size(self):
        """One :class:`~pymc_ibp.UntrustedChainsWarning` line when the model is larger than
        the kernel is known to handle: more than ``_CHECKED_SIZE`` alternatives per sweep
        (each discrete entry's other values; an unbounded one counts 2) or continuous
        coordinates moved by the random walk.  There its runs can agree on a wrong mode."""
        choices = sum(int(np.prod(s)) * (2 if sup is None else sup.size - 1)
                      for s, d, sup in zip(self.shapes, self.discrete, self.support,
                                           strict=True) if d)
        coords = sum(int(np.prod(s)) for s, d in zip(self.shapes, self.discrete, strict=True)
                     if not d)
        if max(choices, coords) > _CHECKED_SIZE:
            warnings.warn(
                f"pmi.sample_smc: the generic kernel moves {choices} alternatives of discrete "
                f"entries and {coords} continuous coordinates one at a time, and is reliable "
                "only on small models (on 20 block images its runs found at most 2 of the 4 "
                "features and agreed): do not trust log p(X) here; compare by held-out "
                "entries (pmi.compare_models), or use the pattern of the accelerated kernel.",
                UntrustedChainsWarning, stacklevel=4)

    def draw(self, rng, draws):
        """``draws`` prior draws of every free variable, in its value space (its dtype)."""
        return [v.astype(val.dtype, copy=False)
                for v, val in zip(self.prior_draws(rng, draws), self.values, strict=True)]

    def evaluate(self, values):
        """The :class:`_Parts` of every particle at ``values``."""
        out = self.density(*values)
        prior, lik = (np.asarray(o, dtype=float) for o in out[:2])
        if self.collapsed is None:
            return _Parts(prior, lik)
        W, sx, sa = (np.asarray(o, dtype=float) for o in out[2:])
        G = np.einsum("pnk,pnl->pkl", W, W)
        RX = np.einsum("pnk,nd->pkd", W, self.X)
        g, V = np.linalg.eigh(G)
        q = np.einsum("pki,pkd->pid", V, RX) ** 2
        return _Parts(prior, lik, W, np.maximum(g, 0.0), q, sx**2, sa**2)

    def loglik(self, parts, temperature):
        """The tempered log-likelihood of every particle."""
        return self._plus_collapsed(temperature * parts.lik, kernels.tempered_loglik_columns,
                                    parts, temperature)

    def slope(self, parts, temperature):
        """``d/dτ`` of :meth:`loglik`."""
        return self._plus_collapsed(parts.lik, kernels.tempered_loglik_slope_columns, parts,
                                    temperature)

    def _plus_collapsed(self, out, term, parts, temperature):
        """``out`` plus the collapsed Gaussian ``term`` at ``temperature`` (if any)."""
        if parts.g is None:
            return out
        return out + term(parts.g, parts.q, self.colsq, self.X.shape[0], parts.sx2,
                          parts.sa2, temperature)

    def features(self, rng, parts):
        """``A`` of every particle from its Gaussian conditional given ``W`` (collapsed
        models; Doshi-Velez & Ghahramani 2009, eq. 6)."""
        out = []
        for W, sx2, sa2 in zip(parts.W, parts.sx2, parts.sa2, strict=True):
            noise = kernels.noise_blocks(sx2, sa2, self.X.shape[1])
            out.append(kernels.draw_active_features(rng, W.T @ W, W.T @ self.X, noise))
        return np.stack(out)

    def posterior(self, finals):
        """The posterior variables of every chain's particles: ``{name: (chain, draw,
        ...)}`` with the model's dims."""
        model = self.model
        names = [v.name for v in self.values]
        a_name = (None if self.collapsed is None
                  else model.rvs_to_values[self.collapsed.a_rv].name)
        per_chain = []
        for values, A in finals:
            by_name = dict(zip(names, values, strict=True))
            if a_name is not None:
                by_name[a_name] = A
            rows = [self.outputs(*[by_name[v.name][i] for v in self.all_values])
                    for i in range(values[0].shape[0])]
            per_chain.append([np.stack([r[j] for r in rows]) for j in range(len(self.out_names))])
        post = {}
        for j, name in enumerate(self.out_names):
            arr = np.stack([c[j] for c in per_chain])
            dims = model.named_vars_to_dims.get(name) or tuple(
                f"{name}_dim_{k}" for k in range(arr.ndim - 2))
            post[name] = (("chain", "draw", *dims), arr)
        return post


class _ModelParticles:
    """The particles of one chain under :class:`ModelKernel`: every free variable's values
    (``draws x ...``) and the :class:`_Parts` of each particle's target."""

    def __init__(self, kernel, rng, draws):
        self.kernel = kernel
        self.values = kernel.draw(rng, draws)
        self.parts = kernel.evaluate(self.values)
        bad = ~np.isfinite(self.parts.prior)
        if bad.any():
            raise ModelPatternError(
                f"pmi.sample_smc: {int(bad.sum())} of the model's own prior draws have a "
                "log density that is not finite; check the priors' parameters.")
        # each continuous variable moves in blocks of at most _BLOCK coordinates
        self.factor = [2.38 / math.sqrt(min(_BLOCK, max(1, int(np.prod(s)))))
                       for s in kernel.shapes]

    def _target(self, parts, temperature):
        t = parts.prior + self.kernel.loglik(parts, temperature)
        return np.where(np.isnan(t), -np.inf, t)

    def loglik(self, temperature):
        return self.kernel.loglik(self.parts, temperature)

    def start(self):
        """The tempered part of every particle's target at ``τ = 0``: none (the prior)."""
        return np.zeros(self.parts.prior.shape[0])

    def slope(self, temperature):
        return self.kernel.slope(self.parts, temperature)

    def resample(self, idx):
        self.values = [v[idx].copy() for v in self.values]
        self.parts = _Parts(*[None if f is None else f[idx].copy() for f in self.parts])

    def move(self, rng, temperature, sweeps):
        """``sweeps`` sweeps over the free variables (module docstring); returns the
        acceptance rate of the continuous variables' steps (NaN without any)."""
        rates = []
        with np.errstate(invalid="ignore"):  # -inf - -inf: NaN, refused explicitly below
            for _ in range(sweeps):
                for j, discrete in enumerate(self.kernel.discrete):
                    if discrete:
                        self._discrete(rng, j, temperature)
                    else:
                        rates.append(self._continuous(rng, j, temperature))
        if not rates:
            return math.nan
        per_var = np.reshape(rates, (sweeps, -1)).mean(axis=0)
        cont = [j for j, d in enumerate(self.kernel.discrete) if not d]
        for j, rate in zip(cont, per_var, strict=True):  # tuned for the next stage
            self.factor[j] *= math.exp(2.0 * (rate - _TARGET_ACCEPT))
        return float(np.mean(rates))

    def _metropolis(self, rng, temperature):
        """Accept the values now in place against :attr:`parts` (the state before);
        returns the accepted particles."""
        new = self.kernel.evaluate(self.values)
        log_r = self._target(new, temperature) - self._target(self.parts, temperature)
        take = np.log(rng.random(log_r.size)) < np.where(np.isnan(log_r), -np.inf, log_r)
        self.parts = _where(take, new, self.parts)
        return take

    def _discrete(self, rng, j, temperature):
        support = self.kernel.support[j]
        self.values[j] = v = np.ascontiguousarray(self.values[j])
        flat = v.reshape(v.shape[0], -1)  # a view: the entries are set in place
        p = np.arange(v.shape[0])
        for e in range(flat.shape[1]):
            if support is None:  # a ±1 random walk
                old = flat[:, e].copy()
                flat[:, e] = old + np.where(rng.random(p.size) < 0.5, -1, 1)
                take = self._metropolis(rng, temperature)
                flat[:, e] = np.where(take, flat[:, e], old)
                continue
            if support.size == 2:  # binary: the current value's parts are known; one call
                old = flat[:, e].copy()
                flat[:, e] = 1 - old
                flipped = self.kernel.evaluate(self.values)
                candidates = [_where(old == v, self.parts, flipped) for v in (0, 1)]
            else:
                candidates = []
                for value in support:
                    flat[:, e] = value
                    candidates.append(self.kernel.evaluate(self.values))
            logw = np.stack([self._target(c, temperature) for c in candidates])
            logw -= logw.max(axis=0)
            cdf = np.cumsum(np.exp(logw), axis=0)
            u = rng.random(p.size) * cdf[-1]
            pick = np.minimum((cdf < u).sum(axis=0), support.size - 1)
            flat[:, e] = support[pick]  # the current value has weight > 0: never an -inf one
            self.parts = _pick(candidates, pick)

    def _continuous(self, rng, j, temperature):
        """Random-walk Metropolis steps of variable ``j``, a block of at most ``_BLOCK`` of its
        coordinates at a time (in a random order); returns the acceptance rate."""
        v = np.ascontiguousarray(self.values[j])
        self.values[j] = v
        size = v[0].size
        flat = v.reshape(v.shape[0], -1)
        spread = flat.std(axis=0)
        scale = self.factor[j] * np.where(spread > 0, spread, 0.1)
        order = rng.permutation(size)
        taken = 0.0
        blocks = range(0, size, _BLOCK)
        for start in blocks:
            idx = order[start:start + _BLOCK]
            old = flat[:, idx].copy()
            flat[:, idx] = old + scale[idx] * rng.standard_normal(old.shape)
            take = self._metropolis(rng, temperature)
            flat[:, idx] = np.where(take[:, None], flat[:, idx], old)
            taken += take.mean()
        return float(taken / len(blocks))

    def final(self, rng):
        """The particles' values, and ``A`` drawn given each (collapsed models)."""
        A = None if self.kernel.collapsed is None else self.kernel.features(rng, self.parts)
        return self.values, A
