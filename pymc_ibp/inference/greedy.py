"""Greedy MAP search for linear-Gaussian IBP models (iterated conditional modes).

Each sweep visits the rows in random order and sets every entry ``z_nk`` to its most probable
value given the rest, ``A`` integrated out, then the row's number of new features to its most
probable value — the accelerated sweep of :class:`pymc_ibp.AcceleratedGibbs` with ``argmax``
in place of sampling (Doshi-Velez 2009, §4.5).  The collapsed log joint never decreases from
one sweep to the next at fixed hyperparameters, so the search stops at a local mode.  It is
not an MCMC method: use it for a quick point estimate or a starting ``Z``
(``pm.sample(initvals={"Z": result.Z})``).

References
----------
.. [1] Doshi-Velez, F. (2009). *The Indian buffet process: scalable inference and extensions*.
   MSc thesis, University of Cambridge.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import pymc as pm

from pymc_ibp import kernels
from pymc_ibp._numba_utils import interrupt_safe
from pymc_ibp.exceptions import ModelPatternError
from pymc_ibp.matching.linear_gaussian import find_linear_gaussian, matched_models
from pymc_ibp.matching.prior_modes import IBPMode, prior_mode

__all__ = ["GreedyResult", "greedy_map"]


class GreedyResult(NamedTuple):
    """Result of :func:`greedy_map`."""

    Z: np.ndarray  #: the mode found, ``N x K_max`` int8
    A: np.ndarray  #: posterior mean of the features given ``Z`` (empty slots 0; with several
    #: observed matrices sharing ``Z``, their feature matrices side by side)
    log_joint: np.ndarray  #: collapsed ``log p(X | Z) + log P(Z)`` after each sweep
    sweeps: int  #: sweeps run (stops early when ``Z`` no longer changes)


@interrupt_safe
def greedy_map(model=None, *, z=None, max_sweeps=100, start=None, random_seed=None):
    """Greedy MAP search for ``Z`` in a linear-Gaussian IBP model.

    Parameters
    ----------
    model : pm.Model, optional
        The model (from the context if omitted); it must have the pattern of
        :class:`pymc_ibp.AcceleratedGibbs` with a ``pmi.IBP`` prior.
    z : str, optional
        Name of the IBP variable when the model has several.
    max_sweeps : int
        Upper bound on the sweeps; the search stops once a sweep changes nothing.
    start : ndarray, optional
        Starting ``Z``; default a draw of the prior.
    random_seed : int or Generator, optional
        Seeds the row order and the prior draw.

    Notes
    -----
    The hyperparameters (``alpha``, ``beta``, ``sigma_x``, ``sigma_a``) are taken at the model's
    initial point.  Missing data are not supported (use :class:`pymc_ibp.AcceleratedGibbs`).
    """
    model = pm.modelcontext(model)
    specs = [s for s in matched_models(model) if z is None or s.z_rv.name == z]
    if len(specs) != 1:
        raise ModelPatternError(
            "greedy_map needs exactly one linear-Gaussian pmi.IBP matrix"
            + (f" named {z!r}" if z else "; pass z='name'") + f"; found {len(specs)}."
        )
    spec = find_linear_gaussian(model, specs[0].z_rv)
    if spec.missing_mask is not None:
        raise ModelPatternError("greedy_map does not handle missing data; use AcceleratedGibbs.")
    n, d = spec.X.shape
    mode = prior_mode(spec.prior, n, spec.k_max)
    if not isinstance(mode, IBPMode):
        raise ModelPatternError("greedy_map needs a pmi.IBP prior on Z.")
    point = model.initial_point()
    sx, sa, alpha, beta = spec.hyper_values(model, point)
    mode.set_params(alpha, beta)
    noise = kernels.noise_blocks(sx**2, sa**2, d)
    rng = np.random.default_rng(random_seed)
    offset_fn = spec.compile_offset(model)
    X = spec.X if offset_fn is None else offset_fn(point).subtract_from(spec.X)
    Z = mode.draw(rng) if start is None else np.array(start, dtype=np.int8, copy=True)
    if Z.shape != (n, spec.k_max):
        raise ValueError(f"start must have shape {(n, spec.k_max)}; got {Z.shape}.")
    trXX = kernels.block_sq_norms(X, noise)
    refresh = kernels.refresh_interval(n)
    trace = []
    sweeps = 0
    while sweeps < max_sweeps:
        sweeps += 1
        before = Z.copy()
        m = Z.sum(axis=0).astype(np.int64)
        kernels.accelerated_sweep(rng, Z, X, m, noise, kernels.SweepPrior.counts(alpha, beta),
                                  refresh, greedy=True)
        trace.append(kernels.log_joint_of(Z, X, noise, None, alpha, beta, trXX)[0])
        if np.array_equal(before, Z):
            break
    act = np.flatnonzero(Z.sum(axis=0) > 0)
    A = np.zeros((spec.k_max, d))
    if act.size:
        G, RX = kernels.suff_stats(Z, X, act)
        A[act] = kernels.posterior_from_stats(G, RX, noise)[1]
    return GreedyResult(Z=Z, A=A, log_joint=np.array(trace), sweeps=sweeps)
