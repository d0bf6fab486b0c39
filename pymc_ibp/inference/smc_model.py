"""The mutation kernel of :func:`pymc_ibp.sample_smc` for any model: Metropolis-within-Gibbs
on the model's own density, every particle at once.

At temperature ``τ`` the target is ``π_τ ∝ p(θ) p(X | θ)^τ``, with ``θ`` every free variable
of the model (in its unconstrained value space, with the transforms' Jacobians), ``p(θ)`` the
free variables' terms of the model's log density and ``p(X | θ)`` its observed terms and
potentials, the split of PyMC's own ``pm.sample_smc``.  Unlike the kernel of the
linear-Gaussian pattern, nothing is integrated out: the feature values move with the binary
matrices.  One sweep updates

* every entry of a binary matrix or a Bernoulli variable by Gibbs over ``{0, 1}``, every
  category of a :class:`pymc_ibp.CRP` or a ``pm.Categorical`` by Gibbs over its values, and
  any other discrete entry by a ``±1`` random-walk Metropolis step;
* every continuous variable by a block random-walk Metropolis step, its scale the particles'
  spread per coordinate times a factor that is tuned between stages towards an acceptance
  rate of 0.234 (Roberts, Gelman & Gilks 1997).

Each update leaves ``π_τ`` invariant, so the evidence estimate is unbiased whatever the
mixing; the mixing sets its variance.  The two log densities are compiled once with a leading
particle axis (:func:`pytensor.graph.replace.vectorize_graph`), so an update of one entry of
every particle is one call.  A sweep costs a call per discrete entry (times the values a
category may take) and grows with ``N·K_max``: this kernel is for small and moderate models;
the linear-Gaussian IBP has the accelerated one.
"""

from __future__ import annotations

import math
import warnings

import numpy as np
import pymc as pm
import pytensor
import pytensor.tensor as pt
from pytensor.graph.replace import graph_replace, vectorize_graph
from pytensor.tensor.random.basic import BernoulliRV, CategoricalRV

from pymc_ibp._pytensor_utils import constant_value
from pymc_ibp.distributions.crp import CRPRV
from pymc_ibp.distributions.ibp import IBPRV
from pymc_ibp.exceptions import ModelPatternError, UntrustedChainsWarning

__all__ = ["ModelKernel", "PriorDraws"]

#: the target acceptance rate of the random-walk steps of the continuous variables
_TARGET_ACCEPT = 0.234
#: the most coordinates of a continuous variable one random-walk step moves
_BLOCK = 2
#: the most discrete entries, or continuous coordinates, of a model the kernel is trusted on
#: (benchmarks/results/smc_generic.md: 1 of 4 features found at 120 entries and 216
#: coordinates; errors of a few nats at 40 entries and 24-48 coordinates)
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


class ModelKernel:
    """What every chain of the model's generic kernel needs: the free variables, their
    compiled prior and likelihood over a batch of particles, prior draws, and the model's
    values (free variables and deterministics) of a particle."""

    name = "gibbs"

    def __init__(self, model):
        free = list(model.free_RVs)
        if not free:
            raise ModelPatternError("pmi.sample_smc needs a model with free variables.")
        self.model = model
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
        terms = [*model.observed_RVs, *model.potentials]
        if not terms:
            raise ModelPatternError("pmi.sample_smc needs observed data or a potential.")
        lik = _batched(model, model.logp(vars=terms, sum=False), self.values, batched)
        probe = [np.repeat(np.asarray(base[v.name], dtype=v.dtype)[None], 2, axis=0)
                 for v in self.values]
        self.density = _compile(model, batched, [prior, lik], probe)
        names = {rv.name for rv in model.unobserved_RVs}
        outs = [v for v in model.unobserved_value_vars if v.name in names]
        self.out_names = [v.name for v in outs]
        self.outputs = pytensor.function(self.values, outs, on_unused_input="ignore")
        self.prior_draws = PriorDraws(model, free)

    def particles(self, rng, draws):
        return _ModelParticles(self, rng, draws)

    def check_size(self):
        """One :class:`~pymc_ibp.UntrustedChainsWarning` line when the model is larger than
        the kernel is known to handle (more than ``_CHECKED_SIZE`` discrete entries or
        continuous coordinates): there its runs can agree on a wrong mode."""
        sizes = [int(np.prod(s)) for s in self.shapes]
        entries = sum(n for n, d in zip(sizes, self.discrete, strict=True) if d)
        coords = sum(n for n, d in zip(sizes, self.discrete, strict=True) if not d)
        if max(entries, coords) > _CHECKED_SIZE:
            warnings.warn(
                f"pmi.sample_smc: the generic kernel moves {entries} discrete entries and "
                f"{coords} continuous coordinates one by one, and is reliable only on small "
                f"models (on 20 block images it found at most 1 of 4 features, in runs that "
                "agree): "
                "do not trust log p(X) here; compare by held-out entries (pmi.compare_models) "
                "or use the linear-Gaussian pattern of the accelerated kernel.",
                UntrustedChainsWarning, stacklevel=4)

    def draw(self, rng, draws):
        """``draws`` prior draws of every free variable, in its value space (its dtype)."""
        return [v.astype(val.dtype, copy=False)
                for v, val in zip(self.prior_draws(rng, draws), self.values, strict=True)]

    def posterior(self, finals):
        """The posterior variables of every chain's particles: ``{name: (chain, draw,
        ...)}`` with the model's dims."""
        model = self.model
        per_chain = []
        for values in finals:
            rows = [self.outputs(*[v[i] for v in values]) for i in range(values[0].shape[0])]
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
    (``draws x ...``) and each particle's prior and likelihood terms."""

    def __init__(self, kernel, rng, draws):
        self.kernel = kernel
        self.values = kernel.draw(rng, draws)
        self.prior, self.lik = self._density(self.values)
        bad = ~np.isfinite(self.prior)
        if bad.any():
            raise ModelPatternError(
                f"pmi.sample_smc: {int(bad.sum())} of the model's own prior draws have a "
                "log density that is not finite; check the priors' parameters.")
        # each continuous variable moves in blocks of at most _BLOCK coordinates
        self.factor = [2.38 / math.sqrt(min(_BLOCK, max(1, int(np.prod(s)))))
                       for s in kernel.shapes]

    def _density(self, values):
        prior, lik = self.kernel.density(*values)
        return np.asarray(prior, dtype=float), np.asarray(lik, dtype=float)

    def loglik(self, temperature):
        return temperature * self.lik

    def slope(self, temperature):
        return self.lik

    def resample(self, idx):
        self.values = [v[idx].copy() for v in self.values]
        self.prior, self.lik = self.prior[idx].copy(), self.lik[idx].copy()

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

    def _discrete(self, rng, j, temperature):
        support = self.kernel.support[j]
        self.values[j] = v = np.ascontiguousarray(self.values[j])
        flat = v.reshape(v.shape[0], -1)  # a view: the entries are set in place
        p = np.arange(v.shape[0])
        for e in range(flat.shape[1]):
            if support is None:  # a ±1 random walk
                old = flat[:, e].copy()
                flat[:, e] = old + np.where(rng.random(p.size) < 0.5, -1, 1)
                prior, lik = self._density(self.values)
                log_r = prior + temperature * lik - self.prior - temperature * self.lik
                take = np.log(rng.random(p.size)) < np.where(np.isnan(log_r), -np.inf, log_r)
                flat[:, e] = np.where(take, flat[:, e], old)
                self.prior = np.where(take, prior, self.prior)
                self.lik = np.where(take, lik, self.lik)
                continue
            priors = np.empty((support.size, p.size))
            liks = np.empty_like(priors)
            for s, value in enumerate(support):
                flat[:, e] = value
                priors[s], liks[s] = self._density(self.values)
            logw = priors + temperature * liks
            logw = np.where(np.isnan(logw), -np.inf, logw)
            logw -= logw.max(axis=0)
            cdf = np.cumsum(np.exp(logw), axis=0)
            u = rng.random(p.size) * cdf[-1]
            pick = np.minimum((cdf < u).sum(axis=0), support.size - 1)
            flat[:, e] = support[pick]  # the current value has weight > 0: never an -inf one
            self.prior, self.lik = priors[pick, p], liks[pick, p]

    def _continuous(self, rng, j, temperature):
        """Random-walk Metropolis steps of variable ``j``, a block of at most ``_BLOCK`` of its
        coordinates at a time (in a random order); returns the acceptance rate."""
        v = np.ascontiguousarray(self.values[j])
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
            self.values[j] = v
            prior, lik = self._density(self.values)
            log_r = prior + temperature * lik - self.prior - temperature * self.lik
            take = np.log(rng.random(v.shape[0])) < np.where(np.isnan(log_r), -np.inf, log_r)
            flat[:, idx] = np.where(take[:, None], flat[:, idx], old)
            self.prior = np.where(take, prior, self.prior)
            self.lik = np.where(take, lik, self.lik)
            taken += take.mean()
        return float(taken / len(blocks))

    def final(self, rng):
        return self.values
