"""Model comparison by k-fold held-out entries or rows and, where it is available, the log
evidence (:func:`compare_models`).

PSIS-loo (``az.loo``) is unreliable for latent feature models: leaving out a point moves the
posterior of the features it owns, and many Pareto k values exceed 0.7 (docs page
*Composing*).  Refitting is reliable: the entries of ``X`` are split into ``folds`` groups
(no row or column ever entirely held out, the protocol of Doshi-Velez & Ghahramani 2009,
§6); for each group each model is refitted by ``pm.sample`` with those entries missing
(PyMC imputes them, the plugin's samplers update them), and each held-out entry is scored by
its log predictive density ``log mean_s p(x_nd | θ_s)`` over the posterior draws ``θ_s``
(the estimator of Reed 2013, eq. A.34), from the model's own element-wise log-likelihood
(``pm.compute_log_likelihood`` on the model built with the full data).  Every entry is held
out exactly once, so the scores of two models are paired and their difference has a standard
error over entries, as in ``az.compare``.

Held out by rows instead (``holdout="rows"``), each model is refitted on the other rows and
each held-out row ``x_r`` is scored as a new row, ``log mean_s p(x_r | θ_s)``, with
``p(x_r | θ_s)`` summed exactly over the row's features (the IBP's predictive given the
fitted rows; :func:`pymc_ibp.log_predictive_rows`): the question "how well does the model
predict a new observation", for any model of one ``pmi.IBP`` matrix (or a DP-IBP, IBP-IBP
or noisy-or IBP-IBP) and one observed matrix.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Mapping

import numpy as np
import pymc as pm
from pymc.exceptions import ImputationWarning

from pymc_ibp.diagnostics._idata import _sample_stats
from pymc_ibp.exceptions import ModelPatternError

__all__ = ["compare_models", "entry_folds", "row_folds"]

#: the sample stats that mark a draw in which a truncation was full
_HIT_STATS = ("ibp_kmax_hit", "ibp_lmax_hit")


def entry_folds(shape, folds=5, seed=None):
    """An ``N x D`` integer array giving each entry its fold ``0..folds-1``: every row and
    every column has its entries spread over the folds as evenly as possible, so that no
    row or column is entirely held out in any fold.

    Parameters
    ----------
    shape : tuple of int
        ``(N, D)``, with ``N >= folds`` and ``D >= folds`` (else some fold would hold out an
        entire row or column; use fewer folds).
    folds : int, default 5
    seed : int or numpy Generator, optional
    """
    n, d = (int(s) for s in shape)
    if isinstance(folds, bool) or not float(folds).is_integer() or int(folds) < 2:
        raise ValueError(f"folds must be an integer >= 2; got {folds!r}.")
    folds = int(folds)
    if n < folds or d < folds:
        raise ValueError(f"{folds} folds of a {n} x {d} matrix would hold out whole rows or "
                         f"columns; use at most {min(n, d)} folds.")
    rng = np.random.default_rng(seed)
    # a Latin-style layout: entry (i, j) goes to fold (p_i + j) mod folds, the row offsets p_i
    # taking each value N/folds times in random order, then the columns are permuted; each row
    # then holds every fold D/folds times and each column N/folds times (rounded)
    offsets = rng.permutation(np.arange(n) % folds)
    fold = (offsets[:, None] + np.arange(d)[None, :]) % folds
    fold = fold[:, rng.permutation(d)]
    return fold.astype(np.int64)


def row_folds(n, folds=5, seed=None):
    """The fold ``0..folds-1`` of each of ``n`` rows: a random assignment with the folds'
    sizes as equal as possible.

    Parameters
    ----------
    n : int
        The rows, ``n >= folds``.
    folds : int, default 5
    seed : int or numpy Generator, optional
    """
    n = int(n)
    if isinstance(folds, bool) or not float(folds).is_integer() or int(folds) < 2:
        raise ValueError(f"folds must be an integer >= 2; got {folds!r}.")
    if n < int(folds):
        raise ValueError(f"{folds} folds of {n} rows would leave a fold empty; use at most "
                         f"{n} folds.")
    rng = np.random.default_rng(seed)
    return rng.permutation(np.arange(n) % int(folds)).astype(np.int64)


def _observed_name(model, shape, observed):
    def data_shape(rv):
        v = model.rvs_to_values[rv]
        return np.shape(v.get_value() if hasattr(v, "get_value") else v.data)

    names = [rv.name for rv in model.observed_RVs if data_shape(rv) == tuple(shape)]
    if observed is not None:
        if observed not in [rv.name for rv in model.observed_RVs]:
            raise ModelPatternError(f"compare_models: the model has no observed variable "
                                    f"{observed!r}; its observed variables are "
                                    f"{[rv.name for rv in model.observed_RVs]}.")
        return observed
    if len(names) != 1:
        raise ModelPatternError(
            f"compare_models: found {len(names)} observed variables of shape {tuple(shape)} "
            f"({names}); name the one to score with observed=.")
    return names[0]


def _build(name, builder, X):
    model = builder(X)
    if not isinstance(model, pm.Model):
        raise TypeError(f"compare_models: models[{name!r}] must be a function of the data "
                        f"returning a pm.Model; it returned {type(model).__name__}.")
    return model


def _sample(builder, name, X, sample_kwargs, seed):
    """The model ``builder(X)`` and its ``pm.sample`` run (quiet, the fold's seed)."""
    model = _build(name, builder, X)
    with model:
        return model, pm.sample(**{"progressbar": False, "compute_convergence_checks": False,
                                   **sample_kwargs, "random_seed": seed})


def _rhat(values):
    """The rank R-hat of ``values`` (chain x draw), NaN for one chain or a constant."""
    from arviz_stats.base import array_stats

    if values.shape[0] < 2 or values.shape[1] < 4:
        return math.nan
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return float(array_stats.rhat(values, chain_axis=0, draw_axis=1))


def _truncated(idata):
    stats = _sample_stats(idata)
    if stats is None:
        return 0.0
    hit = [np.asarray(stats[s].values, dtype=float).reshape(-1) for s in _HIT_STATS
           if s in stats]
    return float(max((h.mean() for h in hit), default=0.0))


def _fit_fold(builder, name, full, X, fold_of, f, observed, sample_kwargs, seed):
    """Refit ``builder`` with the entries of fold ``f`` missing and score them; returns the
    per-entry log predictive densities of the fold (row-major order of its entries), the
    R-hat of the training log-likelihood and the share of draws with a full truncation.
    ``full`` is the model built with all of ``X``, whose log-likelihood scores the draws."""
    from scipy.special import logsumexp

    held = fold_of == f
    Xm = np.array(X, dtype=float)
    Xm[held] = np.nan
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", category=ImputationWarning)
        _, idata = _sample(builder, name, Xm, sample_kwargs, seed)
    var = _observed_name(full, X.shape, observed)
    ll = pm.compute_log_likelihood(idata, model=full, var_names=[var],
                                   extend_inferencedata=False, progressbar=False)
    ll = ll[var]  # a Dataset of the log-likelihood when extend_inferencedata=False
    L = np.asarray(ll.values, dtype=float)  # chain, draw, N, D
    n_chain, n_draw = L.shape[:2]
    L = L.reshape(n_chain, n_draw, *X.shape)
    point = logsumexp(L[:, :, held].reshape(n_chain * n_draw, -1), axis=0)
    point -= math.log(n_chain * n_draw)
    train = np.where(held[None, None], 0.0, L).sum(axis=(2, 3))
    return point, _rhat(train), _truncated(idata)


def _fit_row_fold(builder, name, X, fold_of, f, observed, sample_kwargs, seed):
    """Refit ``builder`` on the rows outside fold ``f`` and score the fold's rows by their
    log predictive density as new rows (:func:`pymc_ibp.log_predictive_rows`); returns the
    scores, the R-hat of the training log-likelihood and the share of draws with a full
    truncation."""
    from scipy.special import logsumexp

    from pymc_ibp.inference.prediction import log_predictive_rows

    held = fold_of == f
    model, idata = _sample(builder, name, X[~held], sample_kwargs, seed)
    L = log_predictive_rows(idata, model, X[held])  # chain, draw, rows
    n_chain, n_draw = L.shape[:2]
    point = logsumexp(L.reshape(n_chain * n_draw, -1), axis=0) - math.log(n_chain * n_draw)
    var = _observed_name(model, X[~held].shape, observed)
    ll = pm.compute_log_likelihood(idata, model=model, var_names=[var],
                                   extend_inferencedata=False, progressbar=False)[var]
    train = np.asarray(ll.values, dtype=float).reshape(n_chain, n_draw, -1).sum(axis=2)
    return point, _rhat(train), _truncated(idata)


def compare_models(models: Mapping[str, Callable], X, *, folds: int = 5,
                   holdout: str = "entries", evidence: bool | str = "auto",
                   observed: str | None = None,
                   sample_kwargs: Mapping | None = None, smc_kwargs: Mapping | None = None,
                   random_seed=None, rhat_max: float = 1.05):
    """Compare models of one data matrix by k-fold held-out entries or rows and, where
    :func:`pymc_ibp.sample_smc` applies, their log evidence (module docstring).

    Parameters
    ----------
    models : mapping of str to callable
        ``{name: build}``, where ``build(X)`` returns the ``pm.Model`` of the data ``X``
        (called with the held-out entries set to NaN for each fold, and with the full data to
        score them; with ``holdout="rows"``, with the rows outside each fold).  The models
        are any PyMC models; the scored variable is the observed variable of ``X``'s shape,
        given to ``observed=`` as an array (PyMC imputes NaN entries of an array, and
        refuses them in ``pm.Data`` with a message that says so).
    X : array_like, shape (N, D)
        The data, without missing entries.
    folds : int, default 5
        The number of groups of entries (:func:`entry_folds`) or rows (:func:`row_folds`);
        each model is sampled ``folds`` times.
    holdout : {"entries", "rows"}, default "entries"
        What a fold holds out.  ``"rows"`` scores each held-out row by its log predictive
        density as a new row, ``log mean_s p(x_r | θ_s)``, its features summed over exactly
        (:func:`pymc_ibp.log_predictive_rows`): for models of one ``pmi.IBP`` matrix and
        one observed matrix below it, under any likelihood (the linear-Gaussian one in
        closed form; others by their own logp, at most 65,536 feature sets of a new row
        per draw) and for the correlated models (a sum over the new row's category, or
        categories for the IBP-IBP and the noisy-or); a model without an IBP raises an
        error that says to hold out entries.
    evidence : bool or "auto", default "auto"
        Also estimate ``log p(X)`` by :func:`pymc_ibp.sample_smc`: ``"auto"`` where its
        accelerated kernel applies (else NaN and the reason in the ``note`` column; pass
        ``smc_kwargs={"kernel": "gibbs"}`` for the generic kernel of small models),
        ``True`` with :func:`pymc_ibp.sample_smc`'s own choice of kernel for every model,
        ``False`` skips it.
    observed : str, optional
        The observed variable to score, when several have ``X``'s shape.
    sample_kwargs : mapping, optional
        Passed to ``pm.sample`` (e.g. ``tune``, ``draws``, ``chains``, ``cores``); the seed
        of each fit comes from ``random_seed``.
    smc_kwargs : mapping, optional
        Passed to :func:`pymc_ibp.sample_smc`.
    random_seed : int, optional
    rhat_max : float, default 1.05
        Folds whose chains' training log-likelihood has a larger R-hat are named in ``note``.

    Returns
    -------
    pandas.DataFrame
        One row per model, best first: ``elpd_entry`` (the mean held-out log predictive
        density per entry; ``elpd_row`` per row with ``holdout="rows"``), ``se`` (its
        standard error over entries or rows), ``d_elpd_entry`` (``d_elpd_row``) and
        ``dse`` (the difference from the best model and its paired standard error),
        ``elpd`` (the sum), ``log_evidence`` and ``log_evidence_se``,
        ``max_rhat`` (the largest R-hat of the training log-likelihood over folds),
        ``truncated`` (the largest share of draws of a fold in which ``K_max`` or ``l_max``
        was full) and ``note``.  ``attrs["pointwise"]`` holds each model's ``N x D`` (or
        ``N``) held-out log predictive densities, ``attrs["folds"]`` the fold of each entry
        (or row) and
        ``attrs["evidence_errors"]`` why a model has no log evidence.
    """
    import pandas as pd

    X = np.asarray(X, dtype=float)
    if X.ndim != 2:
        raise ValueError(f"compare_models needs an N x D data matrix; got shape {X.shape}.")
    if not np.all(np.isfinite(X)):
        raise ValueError("compare_models needs X without missing or infinite entries: it "
                         "holds entries out itself.")
    if not models:
        raise ValueError("compare_models needs at least one model.")
    if evidence not in (True, False, "auto"):
        raise ValueError(f"evidence must be True, False or 'auto'; got {evidence!r}.")
    sample_kwargs = dict(sample_kwargs or {})
    if "random_seed" in sample_kwargs:
        raise ValueError("pass the seed as compare_models(random_seed=...), not in "
                         "sample_kwargs: each fold's fit gets its own seed from it.")
    if holdout not in ("entries", "rows"):
        raise ValueError(f"holdout must be 'entries' or 'rows'; got {holdout!r}.")
    ss = np.random.SeedSequence(random_seed)
    fold_seed, *model_seeds = ss.spawn(len(models) + 1)
    fold_rng = np.random.default_rng(fold_seed)
    if holdout == "rows":
        fold_of, unit = row_folds(X.shape[0], folds, fold_rng), "row"
    else:
        fold_of, unit = entry_folds(X.shape, folds, fold_rng), "entry"
    rows, pointwise, reasons = [], {}, {}
    for (name, builder), mseed in zip(models.items(), model_seeds, strict=True):
        seeds = mseed.generate_state(folds + 1)
        full = _build(name, builder, X)
        logz, logz_se, why = _evidence(full, evidence, smc_kwargs, int(seeds[-1]))
        if why:
            reasons[name] = why
        note = "no log evidence (attrs['evidence_errors'])" if why else ""
        point = np.empty(fold_of.shape)
        rhats, trunc = [], []
        for f in range(folds):
            if holdout == "rows":
                p, r, t = _fit_row_fold(builder, name, X, fold_of, f, observed,
                                        sample_kwargs, int(seeds[f]))
            else:
                p, r, t = _fit_fold(builder, name, full, X, fold_of, f, observed,
                                    sample_kwargs, int(seeds[f]))
            point[fold_of == f] = p
            rhats.append(r)
            trunc.append(t)
        pointwise[name] = point
        bad = [f for f, r in enumerate(rhats) if r > rhat_max]
        if bad:
            note = "; ".join(s for s in (note, f"chains disagree in folds {bad}") if s)
        if max(trunc) > 0:
            note = "; ".join(s for s in (note, "a truncation was full: raise K_max/l_max")
                             if s)
        rows.append({"model": name, f"elpd_{unit}": float(point.mean()),
                     "se": float(point.std(ddof=1) / math.sqrt(point.size)),
                     "elpd": float(point.sum()), "log_evidence": logz,
                     "log_evidence_se": logz_se,
                     "max_rhat": float(np.nanmax(rhats)) if np.any(np.isfinite(rhats))
                     else math.nan,
                     "truncated": float(max(trunc)), "note": note})
    best = max(rows, key=lambda r: r[f"elpd_{unit}"])["model"]
    for r in rows:
        diff = pointwise[r["model"]] - pointwise[best]
        r[f"d_elpd_{unit}"] = float(diff.mean())
        r["dse"] = float(diff.std(ddof=1) / math.sqrt(diff.size))
    cols = [f"elpd_{unit}", "se", f"d_elpd_{unit}", "dse", "elpd", "log_evidence",
            "log_evidence_se", "max_rhat", "truncated", "note"]
    table = pd.DataFrame(rows).set_index("model")[cols].sort_values(f"elpd_{unit}",
                                                                    ascending=False)
    table.attrs["pointwise"] = pointwise
    table.attrs["folds"] = fold_of
    table.attrs["evidence_errors"] = reasons
    return table


def _evidence(full, evidence, smc_kwargs, seed):
    """``(log p(X), its standard error, why not)`` from :func:`pymc_ibp.sample_smc`."""
    if evidence is False:
        return math.nan, math.nan, ""
    from pymc_ibp.inference.smc import sample_smc

    kwargs = dict(smc_kwargs or {})
    if evidence == "auto":  # the generic kernel is for small models: only when asked for
        kwargs.setdefault("kernel", "accelerated")
    try:
        res = sample_smc(full, random_seed=seed, **kwargs)
    except ModelPatternError as err:
        if evidence is True:
            raise
        return math.nan, math.nan, str(err)
    attrs = res["posterior"].attrs
    return (float(attrs["log_marginal_likelihood"]), float(attrs["log_marginal_likelihood_se"]),
            "")
