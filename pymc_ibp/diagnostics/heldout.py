"""Held-out element evaluation.

The protocol of Doshi-Velez & Ghahramani [1]_ (§6) and Doshi-Velez [2]_ (§4.4): hide entries
``x_nd`` (no row and no column entirely), let the sampler impute them, then score the hidden
values against posterior draws of ``Z`` and ``A``.  The papers average the scores over the
final 5 ([1]_) or 50 ([2]_) draws; Reed [3]_ (eq. A.34) scores the log of the mean predictive
density instead.

References
----------
.. [1] Doshi-Velez, F. and Ghahramani, Z. (2009). Accelerated sampling for the Indian buffet
   process. *ICML 2009*.
.. [2] Doshi-Velez, F. (2009). *The Indian buffet process: scalable inference and
   extensions*. MSc thesis, University of Cambridge.
.. [3] Reed, C. (2013). *Submodular MAP inference for scalable latent feature models*. MPhil
   thesis, University of Cambridge.
"""

from __future__ import annotations

import numpy as np

from pymc_ibp.diagnostics._idata import _get_z, _posterior

__all__ = ["bernoulli_heldout_metrics", "heldout_metrics", "holdout_mask",
           "logit_heldout_metrics"]


def holdout_mask(X, n_missing, seed=None):
    """Boolean mask of ``n_missing`` entries to hold out, leaving every row and column with at
    least one observed entry, as in Doshi-Velez & Ghahramani (2009, §6).

    Parameters
    ----------
    X : array_like, shape (N, D)
    n_missing : int
        Number of entries to hide, at most ``N*D - max(N, D)``.
    seed : int or numpy Generator, optional
    """
    X = np.asarray(X)
    if X.ndim != 2:
        raise ValueError(f"holdout_mask needs a 2-D array; got shape {X.shape}.")
    n, d = X.shape
    if isinstance(n_missing, bool) or not float(n_missing).is_integer():
        raise ValueError(f"n_missing is a number of entries (an integer); got {n_missing!r}. "
                         "For a fraction f of the entries pass int(f * X.size).")
    n_missing = int(n_missing)
    if n_missing < 0 or n_missing > n * d - max(n, d):
        raise ValueError(
            f"n_missing={n_missing} must be between 0 and N*D - max(N, D) = {n * d - max(n, d)} so "
            "that no row or column is entirely held out."
        )
    rng = np.random.default_rng(seed)
    # protect one entry per row and per column (a random "transversal"), draw the rest
    keep = np.zeros((n, d), dtype=bool)
    rows = rng.permutation(n)
    cols = rng.permutation(d)
    for i in range(max(n, d)):
        keep[rows[i % n], cols[i % d]] = True
    candidates = np.flatnonzero(~keep.ravel())
    chosen = rng.choice(candidates, size=n_missing, replace=False)
    mask = np.zeros(n * d, dtype=bool)
    mask[chosen] = True
    return mask.reshape(n, d)


def heldout_metrics(idata, X_true, mask, *, z_name="Z", a_name="A", sigma_x="sigma_x",
                    offset=None, last=None):
    """Predictive scores of held-out entries, averaged over posterior draws (the protocol of
    Doshi-Velez & Ghahramani 2009, §6).

    For each draw ``i`` with ``Z^i, A^i, σx^i`` (and offset ``b^i``), and each held-out
    ``x_nd``, with mean ``μ_nd = z_n a_d (+ b_nd)``:

    * ``l2``: mean of ``(x_nd - μ_nd)²`` over entries and draws;
    * ``mean_log_pred``: mean over entries and draws of ``log N(x_nd; μ_nd, σx_nd²)`` (the
      averaging of Doshi-Velez 2009, §4.4);
    * ``log_mean_pred``: mean over entries of ``log mean_i N(x_nd; ...)`` (the estimator of
      Reed 2013, eq. A.34).

    Parameters
    ----------
    idata : xarray.DataTree
        As returned by ``pm.sample``; the posterior must hold ``Z``, ``A`` and the variables
        named by ``sigma_x`` and ``offset``.
    X_true : array_like (N, D)
    mask : bool array (N, D), True at held-out entries.
    z_name, a_name : str, default "Z", "A"
        Names of the binary matrix and of the feature matrix in the posterior.
    sigma_x : str or float or array_like, default "sigma_x"
        The noise scale: a posterior variable (a scalar per draw, or one per column, e.g.
        ``dims="dim"``), or a constant that broadcasts to ``N x D``.
    offset : str or float or array_like, optional
        What the model adds to ``Z @ A`` in the likelihood's mean (``b`` in
        ``mu=Z @ A + b``): a posterior variable (shape ``(D,)``, ``()`` or ``(N, 1)`` per
        draw) or a constant; leave it out only for a model without one (the scores would
        then be those of a wrong mean).
    last : int, optional
        Use only the last ``last`` draws of each chain (the papers use 50 or 5).
    """
    from scipy.special import logsumexp

    target, mean, post, (rows, cols) = _heldout_means(idata, X_true, mask, z_name, a_name,
                                                      offset, last)
    sx = _at_entries(post, sigma_x, "sigma_x", np.shape(X_true), rows, cols, last)
    if not np.all(sx > 0) or not np.all(np.isfinite(sx)):
        raise ValueError(f"sigma_x must be positive and finite; got {sigma_x!r} with values "
                         f"in [{np.min(sx)}, {np.max(sx)}].")
    err2 = (target[None, :] - mean) ** 2
    logp = -0.5 * np.log(2 * np.pi * sx**2) - err2 / (2 * sx**2)
    return {
        "l2": float(err2.mean()),
        "mean_log_pred": float(logp.mean()),
        "log_mean_pred": float((logsumexp(logp, axis=0) - np.log(logp.shape[0])).mean()),
        "n_heldout": int(target.size),
        "n_draws": int(mean.shape[0]),
    }


def logit_heldout_metrics(idata, X_true, mask, *, z_name="Z", a_name="A", offset=None,
                          last=None):
    r"""Predictive scores of held-out binary entries of a Bernoulli-logit model,
    ``x_nd ~ Bernoulli(σ(ψ_nd))`` with ``ψ_nd = z_n a_d (+ b_nd)`` (e.g. the model of
    :class:`pymc_ibp.PolyaGammaGibbs`), averaged over posterior draws as
    :func:`heldout_metrics` does for the linear-Gaussian model: ``mean_log_pred`` (the
    Bernoulli log-likelihood, from ``ψ`` in log space), ``log_mean_pred`` (the log of the
    draw-averaged predictive probability) and ``l2`` (the squared error of ``σ(ψ)``, the
    Brier score), per held-out entry; see :func:`bernoulli_heldout_metrics`.

    Parameters
    ----------
    idata : xarray.DataTree
        As returned by ``pm.sample``; the posterior must hold ``Z``, ``A`` and the variable
        named by ``offset``.
    X_true : array_like (N, D)
        The data, 0/1 at the held-out entries (other entries are not read).
    mask : bool array (N, D), True at held-out entries.
    z_name, a_name : str, default "Z", "A"
        Names of the binary matrix and of the feature matrix in the posterior.
    offset : str or float or array_like, optional
        What the model adds to ``Z @ A`` inside the logit (``b`` in ``logit_p=Z @ A + b``):
        a posterior variable or a constant, as for :func:`heldout_metrics`.
    last : int, optional
        Use only the last ``last`` draws of each chain.

    Returns
    -------
    dict
        ``l2``, ``mean_log_pred``, ``log_mean_pred``, ``n_heldout``, ``n_draws``.
    """
    target, psi, _, _ = _heldout_means(idata, X_true, mask, z_name, a_name, offset, last)
    if np.any((target != 0) & (target != 1)):
        raise ValueError("X_true must hold 0 and 1 at the held-out entries.")
    # log σ(ψ) = -log(1 + e^-ψ), log(1 - σ(ψ)) = -log(1 + e^ψ), without overflow
    logp = -np.logaddexp(0.0, np.where(target[None, :] == 1, -psi, psi))
    p = np.exp(-np.logaddexp(0.0, -psi))
    return {**_binary_scores(logp, p, target), "n_heldout": int(target.size),
            "n_draws": int(psi.shape[0])}


def _heldout_means(idata, X_true, mask, z_name, a_name, offset, last):
    """``(target, mean, posterior, (rows, cols))``: the held-out values and their predictive
    means ``z_n a_d (+ b_nd)`` per draw (``draws x entries``, without forming the full
    ``N x D`` products)."""
    X_true = np.asarray(X_true, dtype=float)
    mask = np.asarray(mask, dtype=bool)
    if X_true.shape != mask.shape:
        raise ValueError(f"X_true {X_true.shape} and mask {mask.shape} differ in shape.")
    if not mask.any():
        raise ValueError("mask selects no held-out entries.")
    post = _posterior(idata)
    Z = _get_z(post, z_name).values
    A = _variable(post, a_name, "a_name").values
    n, k = Z.shape[-2:]
    if A.ndim != 4 or A.shape[-2] != k:
        raise ValueError(f"{a_name!r} must be K_max x D per draw with K_max = {k} (the columns "
                         f"of {z_name!r}); got shape {A.shape[2:]}.")
    if X_true.shape != (n, A.shape[-1]):
        raise ValueError(f"X_true and mask have shape {X_true.shape}; {z_name} @ {a_name} is "
                         f"{n} x {A.shape[-1]}.")
    if not np.all(np.isfinite(X_true[mask])):
        raise ValueError("X_true is not finite at some held-out entries: pass the true values "
                         "there.")
    if last is not None:
        if isinstance(last, bool) or not isinstance(last, int | np.integer) or last < 1:
            raise ValueError(f"last must be a positive number of draws; got {last!r}.")
        Z, A = Z[:, -last:], A[:, -last:]
    Z = Z.reshape(-1, *Z.shape[2:]).astype(float)
    A = A.reshape(-1, *A.shape[2:])
    rows, cols = np.nonzero(mask)
    mean = np.einsum("snk,skn->sn", Z[:, rows, :], A[:, :, cols])
    if offset is not None:
        mean = mean + _at_entries(post, offset, "offset", X_true.shape, rows, cols, last)
    return X_true[rows, cols], mean, post, (rows, cols)


def _binary_scores(logp, p, x):
    """The three scores of binary entries ``x`` from the log-likelihoods ``logp`` and success
    probabilities ``p`` of each draw (``draws x entries``)."""
    from scipy.special import logsumexp

    return {"mean_log_pred": float(logp.mean()),
            "log_mean_pred": float((logsumexp(logp, axis=0) - np.log(len(logp))).mean()),
            "l2": float(((x[None, :] - p) ** 2).mean())}


def _at_entries(post, value, what, shape, rows, cols, last):
    """``value`` (a posterior variable's name, or a constant) at the entries ``(rows, cols)``
    of the ``N x D`` data: ``(draws, entries)`` for a variable (its per-draw value broadcast
    against ``N x D`` as in the likelihood, e.g. one per column), ``(1, entries)`` for a
    constant."""
    if isinstance(value, str):
        v = _variable(post, value, what).values
        if last is not None:
            v = v[:, -last:]
        v = v.reshape(-1, *v.shape[2:]).astype(float)
        lead = (1,) * max(0, 2 - (v.ndim - 1))
        v = v.reshape(v.shape[0], *lead, *v.shape[1:])
        full = (v.shape[0], *shape)
    else:
        v, full = np.asarray(value, dtype=float), shape
    try:
        v = np.broadcast_to(v, full)  # a view: nothing N x D is allocated
    except ValueError:
        raise ValueError(f"{what} {value!r} of shape {np.shape(v)} does not broadcast to the "
                         f"data's {shape} per draw.") from None
    return v[..., rows, cols] if v.ndim == 3 else v[rows, cols][None, :]


def _variable(post, name, what):
    """The posterior variable ``name`` (a ValueError listing the variables if it is absent)."""
    if name not in post:
        raise ValueError(f"the posterior has no variable {name!r} (given as {what}; variables: "
                         f"{sorted(post.data_vars)}).")
    return post[name]


def bernoulli_heldout_metrics(p, x):
    r"""Held-out scores of binary entries ``x`` (shape ``(entries,)``) under posterior draws
    of their success probabilities ``p`` (``(draws, entries)``, e.g. from
    :func:`pymc_ibp.likelihoods.noisy_detection` with each draw's ``Z`` and ``A``), per entry:

    * ``mean_log_pred`` — the Bernoulli log-likelihood averaged over draws and entries (the
      thesis's averaging, Doshi-Velez 2009 §7.3);
    * ``log_mean_pred`` — the log of the draw-averaged predictive probability, averaged over
      entries (Reed 2013, eq. A.34);
    * ``l2`` — the mean squared error of ``p`` (the Brier score).

    Probabilities are clipped to ``[1e-12, 1 - 1e-12]``.
    """
    p = np.clip(np.asarray(p, dtype=float), 1e-12, 1 - 1e-12)
    x = np.asarray(x)
    if p.ndim != 2 or p.shape[1] != x.shape[0]:
        raise ValueError(f"p must be (draws, entries) with entries = {x.shape[0]}; "
                         f"got shape {p.shape}.")
    if np.any((x != 0) & (x != 1)):
        raise ValueError("x must hold 0 and 1 only.")
    logp = np.where(x[None, :] == 1, np.log(p), np.log1p(-p))
    return _binary_scores(logp, p, x)
