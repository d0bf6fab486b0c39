r"""Chained initialisation of the correlated feature models (Doshi-Velez 2009, §7.3).

The correlated models have many poor local modes: a sampler started from the prior of the
noisy-or IBP-IBP must find the categories, the features of each category and the features of
each row at once.  The thesis fits them in a chain, each model started from the state of the
simpler one before it:

1. **DP** — a mixture: each row's features are those of its single category, one feature per
   category (``Z = I[c]``);
2. **DP-IBP** — the same labels, categories now owning any set of features (``Z = M[c]``,
   :func:`pymc_ibp.dp_ibp`), started at ``M = I``;
3. **IBP-IBP** — rows in several categories (``Z = 1[C M > 0]``, :func:`pymc_ibp.ibp_ibp`),
   started at ``C = onehot(c)``;
4. **noisy-or IBP-IBP** — ``Z ~ Bernoulli(1 - q^{C M})`` (:func:`pymc_ibp.noisy_or_ibp_ibp`),
   started at ``Z = 1[C M > 0]``;

and the plain **IBP** (``Z ~`` :class:`pymc_ibp.IBP`) is started from the DP as well, at
``Z = I[c]``.

Each hand-over keeps the binary matrix ``Z`` that the likelihood sees exactly, and every
other variable of the same name (the features ``A``, the scales, …) at its last draw, so each
model starts where the previous one ended.  :func:`chained_fit` runs ``pm.sample`` on each
stage; the samplers are the ones ``pm.sample`` assigns (:class:`pymc_ibp.CRPGibbs`,
:class:`pymc_ibp.IBPGibbs`, …).  Every stage is an ordinary MCMC run of its own model, so the
chain only chooses starting points: the last stage's draws are draws of the last model.

References
----------
F. Doshi-Velez (2009). *The Indian buffet process: scalable inference and extensions.*
MPhil/PhD thesis, University of Cambridge, ch. 7.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field

import numpy as np
import pymc as pm
import pytensor.tensor as pt

from pymc_ibp.distributions.correlated import dp_ibp, ibp_ibp, noisy_or_ibp_ibp
from pymc_ibp.distributions.crp import CRP
from pymc_ibp.distributions.ibp import IBP

__all__ = ["PREVIOUS", "STAGES", "ChainedFit", "build_stage", "chained_fit", "hand_over",
           "mark_given"]

#: the models of the chain, simplest first
STAGES = ("dp", "dp_ibp", "ibp_ibp", "noisy_or")
#: the stage each stage is started from (the plain IBP branches off the DP)
PREVIOUS = {"dp_ibp": "dp", "ibp_ibp": "dp_ibp", "noisy_or": "ibp_ibp", "ibp": "dp"}


@dataclass
class ChainedFit:
    """Result of :func:`chained_fit`: ``stages`` the stage names, ``results`` their
    DataTrees (as ``pm.sample`` returns them), ``initvals`` the last stage's final state per
    chain (for a further ``pm.sample`` of the last model)."""

    stages: list = field(default_factory=list)
    results: list = field(default_factory=list)
    initvals: list = field(default_factory=list)

    def __getitem__(self, stage):
        return self.results[self.stages.index(stage)]


def _hyper(value):
    return value() if callable(value) else value


def build_stage(stage, likelihood, *, n, k_max, l_max, alpha_c=1.0, alpha_m=1.0, q=0.2,
                name="Z", coords=None):
    """The ``pm.Model`` of one stage: the structure of ``Z`` (``stage`` in :data:`STAGES`, or
    ``"ibp"``)
    and ``likelihood(Z)``, called inside the model to add the likelihood of the data given
    the ``n x k_max`` binary matrix ``Z`` (and whatever parameters it needs, e.g.
    ``A = pm.Normal("A", 0, 1, shape=(k_max, D))``).  ``alpha_c``, ``alpha_m`` and ``q`` are
    numbers or functions called inside the model that create variables (e.g.
    ``lambda: pm.Gamma("alpha_c", 1, 1)``)."""
    if stage not in STAGES and stage != "ibp":
        raise ValueError(f"stage must be one of {(*STAGES, 'ibp')}; got {stage!r}.")
    if stage == "dp" and l_max > k_max:
        raise ValueError(f"the DP stage gives each of the l_max = {l_max} categories its own "
                         f"feature: it needs k_max >= l_max (got k_max = {k_max}).")
    with pm.Model(coords=coords) as model:
        a_c = None if stage == "ibp" else _hyper(alpha_c)  # the plain IBP has no categories
        if stage == "dp":
            c = CRP(f"{name}_c", a_c, l_max=l_max, shape=n)
            eye = pt.as_tensor(np.eye(l_max, k_max, dtype=np.int8))
            Z = pm.Deterministic(name, eye[c])
        elif stage == "ibp":
            Z = IBP(name, _hyper(alpha_m), shape=(n, k_max))
        elif stage == "dp_ibp":
            Z = dp_ibp(name, a_c, _hyper(alpha_m), l_max=l_max, shape=(n, k_max))
        elif stage == "ibp_ibp":
            Z = ibp_ibp(name, a_c, _hyper(alpha_m), l_max=l_max, shape=(n, k_max))
        else:
            Z = noisy_or_ibp_ibp(name, a_c, _hyper(alpha_m), _hyper(q), l_max=l_max,
                                 shape=(n, k_max))
        likelihood(Z)
    return model


def hand_over(state, src, dst, *, l_max, k_max, name="Z"):
    """Initial values for stage ``dst`` from the final ``state`` (variable name -> value, as
    in a posterior draw) of stage ``src = PREVIOUS[dst]``: the structural variables are
    mapped so that ``Z`` is unchanged, every other variable is kept."""
    if PREVIOUS.get(dst) != src:
        raise ValueError(f"stage {dst!r} does not follow {src!r} (the chain: {PREVIOUS}).")
    structural = {f"{name}_c", f"{name}_M", f"{name}_C", name}
    init = {k: np.asarray(v) for k, v in state.items() if k not in structural}
    if dst == "ibp":
        init[name] = np.eye(l_max, k_max, dtype=np.int8)[np.asarray(state[f"{name}_c"])]
    elif src == "dp":
        init[f"{name}_c"] = np.asarray(state[f"{name}_c"], dtype=np.int64)
        init[f"{name}_M"] = np.eye(l_max, k_max, dtype=np.int8)
    elif src == "dp_ibp":
        c = np.asarray(state[f"{name}_c"], dtype=np.int64)
        C = np.zeros((c.size, l_max), dtype=np.int8)
        C[np.arange(c.size), c] = 1
        init[f"{name}_C"] = C
        init[f"{name}_M"] = np.asarray(state[f"{name}_M"], dtype=np.int8)
    else:  # ibp_ibp -> noisy_or
        C = np.asarray(state[f"{name}_C"], dtype=np.int64)
        M = np.asarray(state[f"{name}_M"], dtype=np.int64)
        init[f"{name}_C"], init[f"{name}_M"] = C.astype(np.int8), M.astype(np.int8)
        init[name] = (C @ M > 0).astype(np.int8)
    return init


def _final_states(idata, model):
    post = idata["posterior"]
    names = [v.name for v in model.free_RVs] + [v.name for v in model.deterministics]
    names = [v for v in names if v in post]
    return [{v: post[v].values[ch, -1] for v in names} for ch in range(post.sizes["chain"])]


def mark_given(model, values):
    """Set the handed-over ``values`` as the variables' own initial values, so that the
    steps see them as given by the user (``pm.sample``'s ``initvals`` then start each chain
    at its own): a handed-over binary matrix can equal the support point of its prior at the
    handed-over parents (the noisy-or's ``Z = 1[CM > 0]``), which a step would otherwise take
    for PyMC's default start and replace by its start search."""
    for key, value in values.items():
        model.set_initval(model[key], np.asarray(value))


def chained_fit(likelihood, *, n, k_max, l_max, stages=STAGES, alpha_c=1.0, alpha_m=1.0,
                q=0.2, name="Z", coords=None, tune=200, draws=200, chains=2,
                random_seed=None, **sample_kwargs):
    """Fit the correlated models of :data:`STAGES` in turn, each ``pm.sample`` started from
    the last draw (per chain) of the stage before it (see the module docstring).

    Parameters
    ----------
    likelihood : callable
        ``likelihood(Z)`` adds the likelihood given the ``n x k_max`` binary matrix ``Z``
        inside the model (the same function serves every stage).
    n, k_max, l_max : int
        Rows, feature slots and category slots.
    stages : sequence of str
        Consecutive stages of :data:`STAGES` (default: all four), or ``("dp", "ibp")``.
    alpha_c, alpha_m, q : float or callable
        The concentrations and the noisy-or ``q`` (numbers, or functions that create
        variables inside each model).
    name : str, default "Z"
        Name of the feature matrix in every stage (its parts are ``{name}_c``, ``{name}_M``,
        ``{name}_C``).
    coords : dict, optional
        Coordinates of every stage's ``pm.Model``.
    tune, draws, chains, random_seed, **sample_kwargs
        Passed to every ``pm.sample`` (``random_seed`` is offset by the stage); the stages
        before the last skip PyMC's convergence checks unless ``compute_convergence_checks``
        is given (they only choose where the next stage starts).

    Returns
    -------
    ChainedFit
    """
    stages = list(stages)
    if not stages or any(PREVIOUS.get(b) != a for a, b in zip(stages, stages[1:], strict=False)):
        raise ValueError(f"stages must be consecutive stages of the chain {STAGES} (or "
                         f"('dp', 'ibp')); got {stages!r}.")
    out = ChainedFit()
    inits = None
    for i, stage in enumerate(stages):
        model = build_stage(stage, likelihood, n=n, k_max=k_max, l_max=l_max, alpha_c=alpha_c,
                            alpha_m=alpha_m, q=q, name=name, coords=coords)
        seed = None if random_seed is None else int(random_seed) + 1000 * i
        with model:
            if inits is not None:  # only the variables this model has
                names = {v.name for v in model.free_RVs}
                inits = [{k: v for k, v in s.items() if k in names} for s in inits]
                mark_given(model, inits[0])
            kwargs = dict(sample_kwargs)
            if i + 1 < len(stages):  # a stage that only chooses the next one's start: no
                kwargs.setdefault("compute_convergence_checks", False)  # R-hat / ESS lines
            with warnings.catch_warnings():
                # ArviZ's R-hat of a quantity no draw of any chain changes (an entry of Z)
                # divides 0 by 0: a NaN in the table, not a warning the user can act on
                warnings.filterwarnings("ignore", "invalid value encountered in scalar divide",
                                        RuntimeWarning, module=r"arviz_stats\.")
                idata = pm.sample(tune=tune, draws=draws, chains=chains, random_seed=seed,
                                  initvals=inits, **kwargs)
        out.stages.append(stage)
        out.results.append(idata)
        states = _final_states(idata, model)
        if i + 1 < len(stages):
            inits = [hand_over(s, stage, stages[i + 1], l_max=l_max, k_max=k_max, name=name)
                     for s in states]
        else:
            names = {v.name for v in model.free_RVs}
            out.initvals = [{k: v for k, v in s.items() if k in names} for s in states]
    return out
