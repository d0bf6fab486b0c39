"""Uncollapsed Gibbs for a binary feature matrix under any PyMC likelihood.

Every entry ``z_nk`` is drawn from its exact full conditional given everything else, with the
likelihood taken from the model's own compiled element-wise logp.  Rows must be conditionally
independent given the other variables (the likelihood factorises over the rows of ``Z``), which
lets one compiled evaluation with column ``k`` flipped in every row, next to the rows' values at
the current ``Z``, give the likelihood ratios of all ``N`` entries of that column at once; the
rows are then sampled in sequence (numba) because the IBP prior couples them through the column
counts.  Observed arrays with missing entries (PyMC's ``X_observed`` + imputed
``X_unobserved``, whose logps are 1-D over the masked entries) are mapped back to the rows of
``Z`` through PyMC's boolean mask.
"""

from __future__ import annotations

import logging
import math

import numba
import numpy as np
import pymc as pm
import pytensor.tensor as pt
from pymc.step_methods.compound import BlockedStep, Competence, StepMethodState
from pymc.step_methods.state import dataclass_state
from pymc.util import get_random_generator
from pytensor.graph.basic import Constant
from pytensor.graph.traversal import ancestors
from pytensor.tensor.random.basic import BernoulliRV
from pytensor.tensor.subtensor import AdvancedSubtensor

from pymc_ibp._numba_utils import bernoulli_logodds, interrupt_safe
from pymc_ibp._pytensor_utils import compile_point_fn
from pymc_ibp.distributions.crp import CRPRV
from pymc_ibp.distributions.dependent import DependentIBPRV
from pymc_ibp.distributions.ibp import IBPRV
from pymc_ibp.distributions.ibp_math import (
    ibp_entry_logodds,
    ibp_log_pmf,
    log_beta_term,
    log_birth_rate,
)
from pymc_ibp.distributions.stick_breaking import IBPStickBreakingRV
from pymc_ibp.exceptions import DataError, ModelPatternError, warn_slots_in_use
from pymc_ibp.step_methods.feature_moves import FeatureParameterMoves, ordered_pair
from pymc_ibp.step_methods.model_matching import (
    BINARY_MATRIX_OPS,
    IBPPrior,
    StartDefaults,
    boolean_masked,
    check_binary_start,
    first_axis_index,
    match_prior,
    one_value_var,
    slot_dim,
)
from pymc_ibp.step_methods.starts import surrogate_starter, surrogate_z
from pymc_ibp.step_methods.stats import model_logp_fn, per_matrix_stats

__all__ = ["IBPGibbs"]

_log = logging.getLogger("pymc")


def _linear_gaussian_spec(model, z_rv, explain):
    """The linear-Gaussian model of ``z_rv`` (the AcceleratedGibbs pattern), or ``None``; with
    ``explain``, log one line saying why the fast linear-Gaussian step does (not) apply."""
    from pymc_ibp.step_methods.model_matching import find_bernoulli_logit, find_linear_gaussian

    try:
        spec = find_linear_gaussian(model, z_rv)
    except ModelPatternError as err:
        if explain:
            reason = str(err).split(" Needed pattern:")[0]
            logit = ""
            if any(isinstance(rv.owner.op, BernoulliRV) for rv in model.observed_RVs
                   if z_rv in set(ancestors([rv]))):
                try:
                    find_bernoulli_logit(model, z_rv)
                    logit = "; PolyaGammaGibbs would apply"
                except ModelPatternError as why:
                    logit = ("; PolyaGammaGibbs does not apply: "
                             + str(why).split(" Needed pattern:")[0])
            _log.info(f"IBPGibbs for {z_rv.name!r} (uncollapsed; AcceleratedGibbs does not "
                      f"apply: {reason}{logit})")
        return None
    if explain:
        _log.info(f"IBPGibbs for {z_rv.name!r} (chosen explicitly; AcceleratedGibbs would apply)")
    return spec


@numba.njit(cache=True)
def ibp_column_gibbs(rng, Z, k, ll1, ll0, m, n_active, alpha, beta):
    """Gibbs-sample column ``k`` of ``Z`` row by row under the :class:`pymc_ibp.IBP` prior.

    Prior odds of ``z_nk = 1`` (from the pmf of :class:`pymc_ibp.IBP`, Griffiths & Ghahramani 2011,
    with the fixed-slot truncation derived in :mod:`pymc_ibp.distributions.ibp`):
    ``m/(N-1-m+β)`` if ``m = m₋ₙₖ > 0``; otherwise ``λ/(K_max - K'₋)`` with
    ``λ = αβ/(N-1+β)`` and ``K'₋`` the active columns other than ``k`` — the birth of a new
    feature in an empty slot, with that slot's current parameters.  ``m`` (column sums) and
    the returned active count are kept up to date.  Returns ``(flips, n_active)``.
    """
    n, k_max = Z.shape
    log_lam = log_birth_rate(alpha, beta, n)
    flips = 0
    for i in range(n):
        old = Z[i, k]
        mk = m[k] - old
        others = n_active - (1 if m[k] > 0 else 0)
        lo = ibp_entry_logodds(mk, others, n, k_max, log_lam, beta)
        new = bernoulli_logodds(rng, lo + ll1[i] - ll0[i])
        if new != old:
            flips += 1
            Z[i, k] = new
            m[k] = mk + new
            n_active = others + (1 if m[k] > 0 else 0)
    return flips, n_active


@numba.njit(cache=True)
def bernoulli_column_gibbs(rng, Z, k, ll1, ll0, prior_lo):
    """Gibbs-sample column ``k`` of a Bernoulli matrix with per-entry prior log-odds."""
    flips = 0
    for i in range(Z.shape[0]):
        new = bernoulli_logodds(rng, prior_lo[i] + ll1[i] - ll0[i])
        if new != Z[i, k]:
            flips += 1
            Z[i, k] = new
    return flips


def _linear_gaussian_starter(model, z_rv, spec, initial_point, init_z, compile_kwargs):
    """An :class:`~pymc_ibp.AcceleratedGibbs` for ``Z`` that IBPGibbs calls once, for its start
    search, when the model is linear-Gaussian (``spec``, data on the driver); else ``None``."""
    from pymc_ibp.step_methods.linear_gaussian import AcceleratedGibbs

    if spec is None or spec.sharded is not None:
        return None
    return AcceleratedGibbs([z_rv], model=model, initial_point=initial_point, init_z=init_z,
                            compile_kwargs=compile_kwargs)


def _entry_mask(child, z_rv, model):
    """The constant boolean mask through which ``child`` sees an array indexed by the rows of ``Z``.

    PyMC splits an observed array with NaNs into ``X_observed`` and a free ``X_unobserved`` by
    indexing the full ``N x D`` variable with a constant boolean mask (``X[~mask]``,
    ``X[mask]``) and lifting the indexing into the parameters, so that e.g. the mean becomes
    ``(Z @ A)[~mask]`` and the element-wise logp is 1-D over the selected entries.  Entry ``i`` of
    such a child is element ``np.argwhere(mask)[i]`` (row-major order) of the ``N x D`` array.

    Returns the mask (``mask.shape[0] == N`` is checked by the caller), or ``None`` if no
    parameter of ``child`` is a ``Z``-dependent array indexed by one constant boolean array from
    its first axis.  Other random variables block the search, so only the child's own
    parameters are inspected.
    """
    others = [rv for rv in model.basic_RVs if rv is not z_rv]
    masks = []
    for var in ancestors(child.owner.inputs, blockers=others):
        masked = boolean_masked(var)
        if masked is None:
            continue
        base, mask = masked
        if z_rv not in set(ancestors([base])):  # possibly through other variables (C -> Y -> X)
            continue
        if not any(mask.shape == m.shape and np.array_equal(mask, m) for m in masks):
            masks.append(mask)
    if len(masks) > 1:
        raise ModelPatternError(
            f"The parameters of {child.name!r} index arrays that depend on {z_rv.name!r} with "
            f"{len(masks)} different boolean masks; IBPGibbs cannot tell which row of "
            f"{z_rv.name!r} each term of its logp belongs to."
        )
    return masks[0] if masks else None


def masked_entry_rows(child, rv, model, n_obs):
    """For a child built by PyMC's imputation split (``X_observed`` / ``X_unobserved``), the
    row of each of its logp terms (``np.nonzero(mask)[0]``); ``None`` for an ordinary child.
    Raises :class:`ModelPatternError` when the mask's first axis is not the ``n_obs`` rows of
    the observations or does not match the child's number of terms."""
    mask = _entry_mask(child, rv, model)
    if mask is None:
        return None
    if mask.ndim == 0 or mask.shape[0] != n_obs:
        raise ModelPatternError(
            f"{child.name!r} indexes a {rv.name!r}-dependent array with a boolean mask of "
            f"shape {mask.shape}, whose first axis is not the {n_obs} rows of its "
            "observations; its logp terms cannot be attributed to rows.")
    length = child.type.shape[0] if child.ndim else None
    if length is not None and length != int(mask.sum()):
        raise ModelPatternError(
            f"{child.name!r} has {length} logp terms but its boolean mask selects "
            f"{int(mask.sum())} entries; they cannot be attributed to rows.")
    return np.nonzero(mask)[0]


def per_row(term, n_rows, entry_rows=None):
    """An element-wise logp reduced to one term per row: summed over all but the first axis,
    and, for a masked child (``entry_rows`` from :func:`masked_entry_rows`), term ``i`` added
    to row ``entry_rows[i]``."""
    term = term.sum(axis=tuple(range(1, term.ndim))) if term.ndim > 1 else term
    if entry_rows is None:
        return term
    return pt.inc_subtensor(pt.zeros(n_rows, dtype=term.dtype)[entry_rows], term)


def _row_index(child, z_rv, model):
    """The integer index through which ``child`` sees the rows of ``Z``, as a graph of the
    model's value variables, or ``None`` if ``child`` uses ``Z``'s rows directly.

    In the correlated models the binary matrix of the likelihood is ``M[c]``: ``M`` holds one
    row per category and ``c`` (a :class:`pymc_ibp.CRP`, or fixed labels) the category of every
    observation, so likelihood row ``n`` belongs to row ``c[n]`` of ``M``.  Found as an
    advanced-indexing node ``M[c]`` or ``M[c, :]`` whose base is ``Z`` itself and whose single
    index is a 1-D integer array (a variable or a constant).
    """
    others = [rv for rv in model.basic_RVs if rv is not z_rv]
    found = []
    for var in ancestors(child.owner.inputs, blockers=others):
        node = var.owner
        if node is None or not isinstance(node.op, AdvancedSubtensor) or node.inputs[0] is not z_rv:
            continue
        index = first_axis_index(var)
        if index is None:
            raise ModelPatternError(
                f"{child.name!r} indexes {z_rv.name!r} as {node.op}; IBPGibbs understands "
                f"{z_rv.name!r} itself or {z_rv.name}[c] with c a vector of row labels (one "
                f"per observation, e.g. a pmi.CRP)."
            )
        if not any(index is f for f in found):
            found.append(index)
    if len(found) > 1:
        raise ModelPatternError(
            f"The parameters of {child.name!r} index {z_rv.name!r} with {len(found)} different "
            f"label vectors; IBPGibbs cannot tell which row of {z_rv.name!r} each observation "
            "belongs to."
        )
    if not found:
        return None
    [index] = model.replace_rvs_by_values(found)
    return index


def _redraw_log_q(redrawn, Y, p):
    """Per row, the log-probability of the entries ``redrawn`` of ``Y`` under
    ``Bernoulli(p)`` (the proposal density of the block moves' redrawn children)."""
    with np.errstate(divide="ignore"):
        return np.where(redrawn, np.where(Y == 1, np.log(p), np.log1p(-p)), 0.0).sum(1)


def perturbed_point(point, seed=0):
    """``point`` with every floating value moved by ``0.3 N(0, 1)`` noise, for the
    row-factorisation checks of :class:`IBPGibbs` and :class:`pymc_ibp.CRPGibbs` (at the
    support point, e.g. ``A = 0``, changing one row of the discrete variable could leave every
    likelihood term unchanged and the check pass vacuously)."""
    rng = np.random.default_rng(seed)
    return {k: (v + 0.3 * rng.standard_normal(np.shape(v))
                if np.issubdtype(np.asarray(v).dtype, np.floating) else v)
            for k, v in point.items()}


def check_one_row_changed(ll, ll2, r, change, names, needs):
    """Raise :class:`ModelPatternError` unless only entry ``r`` differs between the row
    log-likelihoods ``ll`` and ``ll2`` (computed before and after ``change``, e.g.
    "Changing row 3 of 'Z'"); ``needs`` ends the message (what the step needs)."""
    changed = np.flatnonzero(~np.isclose(ll, ll2, rtol=1e-12, atol=1e-12))
    if changed.size and (changed.size > 1 or changed[0] != r):
        raise ModelPatternError(
            f"{change} changed the log-likelihood of rows {changed.tolist()}: the likelihood of "
            f"{names} does not factorise over {needs}."
        )


def _format_position(pos):
    pos = tuple(int(i) for i in pos)
    if len(pos) == 2:
        return f"row {pos[0]}, column {pos[1]}"
    if len(pos) == 1:
        return f"row {pos[0]}"
    return f"index {pos}"


@dataclass_state
class IBPGibbsState(StepMethodState):
    """``rng``, whether the truncation warning was given in this chain and whether the chain
    has made its first move (the start search, if any, comes before it)."""

    warned: bool
    started: bool


class IBPGibbs(BlockedStep):
    r"""Uncollapsed Gibbs sampler for a binary ``N x K_max`` matrix under any likelihood.

    For ``Z = pmi.IBP(...)`` each entry is drawn from

    .. math:: \frac{P(z_{nk}=1\mid\cdot)}{P(z_{nk}=0\mid\cdot)} =
        \text{prior odds}\times
        \frac{p(\text{children}\mid z_{nk}=1)}{p(\text{children}\mid z_{nk}=0)},

    with prior odds :math:`m_{-n,k}/(N-1-m_{-n,k}+\beta)` for an active column and
    :math:`\frac{\alpha\beta/(N-1+\beta)}{K_{max}-K'_{-}}` for an empty slot (a birth, using the
    current draw of that slot's parameters), so the step targets the IBP prior of Griffiths &
    Ghahramani (2011) truncated to ``K_max`` slots exactly.  For ``Z = pm.Bernoulli(p=...)``
    (e.g. under :class:`pymc_ibp.IBPStickBreaking`) the prior odds are ``p/(1-p)`` per entry.

    The likelihood ratio of a whole column comes from the model's compiled element-wise logp
    of every variable that depends on ``Z``, reduced over all but the row axis: evaluated once
    with column ``k`` flipped in every row, it gives each row's other option, while the rows'
    values at the current ``Z`` are carried from column to column, so a sweep costs
    ``K_max + 1`` likelihood evaluations plus ``O(N K_max)``.  The
    likelihood must factorise over the rows of ``Z`` (checked at construction by flipping
    ``Z[r, 0]`` in the first and last rows and in rows with missing entries).

    Parameters
    ----------
    vars : list
        The binary matrix (a ``pmi.IBP`` or a 2-D ``pm.Bernoulli``).
    split_merge : int
        Split–merge Metropolis–Hastings proposals on ``Z`` after each sweep (``pmi.IBP`` only;
        default 5, 0 disables them); see :meth:`split_merge_move`.
    combination_moves : int
        Dissolve / compose Metropolis–Hastings proposals on ``Z`` after each sweep (``pmi.IBP``
        only; default 5, 0 disables them): a feature replaced by a pair of others in all its
        rows, or a new feature taking over rows that own a pair; see
        :meth:`combination_move`.
    factorise : bool, optional
        Whether the likelihood factorises over the rows of ``Z`` (checked at construction
        when ``None``, the default).  If it does not, ``Z`` is updated entry by entry, each
        entry from its exact conditional with the whole likelihood evaluated with the entry
        flipped (``N K_max`` evaluations per sweep; e.g. the category-feature matrix ``M`` of
        :func:`pymc_ibp.ibp_ibp`), without the split-merge and dissolve / compose moves.
        ``True`` raises :class:`ModelPatternError` instead; ``False`` forces the entry-wise
        updates.
    block_moves : bool, optional
        After each sweep, for every column ``k`` and row ``n``, a Metropolis–Hastings flip of
        ``z_nk`` together with the entries of a Bernoulli child matrix ``Y`` whose
        probability it changes, redrawn from their new conditional prior (see
        :meth:`block_move`).  For the noisy-or IBP-IBP (``Z`` = the categories ``C``,
        ``Y ~ Bernoulli(1 - q^(C M))`` the features) these are the joint moves of
        Doshi-Velez (2009, §7.2.3) that single-site Gibbs lacks.  Default: on when ``Z`` is a
        ``pmi.IBP`` and exactly one variable depending on it is a free ``N x K``
        ``pm.Bernoulli`` matrix; ``True`` raises if that is not so.  Stat
        ``ibp_block_accepted``.
    turn_on_moves : int
        Passes of the targeted *turn-on / turn-off* moves that come with the block moves
        (default 1, 0 disables them): in every row, an entry of ``Y`` that is off (on) is
        switched on (off) together with one of its absent (present) parents in ``Z``, the
        other children of that parent redrawn from their conditional prior (see
        :meth:`turn_on_move`).  Stat ``ibp_turn_on_accepted``.
    feature_moves : int
        Birth / death Metropolis–Hastings proposals of a feature *together with its
        parameters* after each sweep (``pmi.IBP`` only; default 3, 0 disables them): a new
        feature for a group of rows (an anchor row and the rows that a feature fitted to the
        anchor explains well) with its row of the parameter matrix ``A`` drawn from a Laplace
        approximation of its conditional given those rows, or the reverse; see
        :mod:`pymc_ibp.step_methods.feature_moves`.  They apply when one free continuous
        variable ``A`` has ``K_max`` rows, row ``k`` reaching the likelihood only through
        column ``k`` of ``Z`` (e.g. ``mu = Z @ A``), with a prior that factorises over the
        rows; otherwise they are off.  Stat ``ibp_feature_move_accepted``.
    feature_rows : int
        The largest number of rows of a feature that these moves create or remove (default
        10; 1: single-row features only).
    feature_split_merge : int
        Split / merge Metropolis–Hastings proposals of a feature *together with its
        parameters* after each sweep (default 3, 0 disables them; same conditions as
        ``feature_moves``): a feature split into two, two rows of it seeding the two new
        features, its other rows allocated by their likelihood under the seeds, and both rows
        of ``A`` drawn from Laplace approximations given their new rows; or two features
        merged into one with parameters fitted to the union.  See
        :meth:`pymc_ibp.step_methods.feature_moves.FeatureParameterMoves.split_merge`.  Stat
        ``ibp_feature_split_merge_accepted``.
    feature_params : bool, optional
        Whether to look for that parameter matrix (``None``, the default: look, and leave
        the moves off if there is none); ``True`` raises :class:`ModelPatternError` saying
        what is missing; ``False`` turns the moves off.
    init_z : {"auto", "point", "prior", "surrogate"}
        Where a chain starts (the initialisation policy of
        :class:`pymc_ibp.AcceleratedGibbs`).  ``"auto"`` (default): at the ``Z`` the user gave
        (``pm.sample(initvals={"Z": ...})`` or ``initval=``); otherwise, when the model is
        linear-Gaussian (the pattern of :class:`pymc_ibp.AcceleratedGibbs`: ``X ~ Normal(Z @
        A, σx)`` with ``A ~ Normal(0, σa)``, NaN entries allowed, no offset) and ``Z`` has the
        :class:`pymc_ibp.IBP` prior, at the best of the accelerated step's annealed start
        searches (``init_restarts = 4`` searches of ``init_sweeps = 100`` collapsed sweeps),
        with ``A`` (and imputed entries) drawn from their exact conditional given the found
        ``Z``; this first iteration makes no other move.  Any other model starts at PyMC's
        initial point (all zeros for :class:`pymc_ibp.IBP`), except those that the
        ``"surrogate"`` start below applies to, which start there.  ``"point"``: always at the
        initial point.  ``"prior"``: the search whatever the initial point (linear-Gaussian
        models).  ``"surrogate"`` (any likelihood with one observed ``N x D`` matrix, no
        missing entries, and the parameter matrix ``A`` of the feature moves; the default for
        such models when not linear-Gaussian and ``Z`` is not given; asked for explicitly,
        it runs whatever the initial ``Z``): the same search
        on a linear-Gaussian surrogate of the data (``X ~ Normal(Z @ A' (+ b'), σx)``, ``A' ~
        Normal(0, σa)``, ``Z`` under the IBP with the initial ``α, β``; on 0/1 data ``σx =
        s`` and ``σa = 2 s``, ``s`` the standard deviation of the observed entries, on other
        data both free and ``b'`` a per-column offset where the likelihood's location has
        one: :func:`~pymc_ibp.step_methods.starts.surrogate_starter`) followed by 50 sweeps
        on it, then the active rows of ``A`` set to their Laplace means given the ``Z``
        found (or to the surrogate's, where those fit better) and a free offset the same for
        every row to the surrogate's; every other variable keeps its initial value.  For
        binary or count data whose features add up (e.g. ``Bernoulli(logit_p = Z @ A +
        b)``) it finds structure that chains started from an empty ``Z`` do not
        (``benchmarks/ibpgibbs_split.py``).  A search only chooses the
        chain's first state, so every later draw is from the exact kernel.

    Raises
    ------
    ModelPatternError
        If ``vars`` is not one binary matrix, or (with ``factorise=True``) the likelihood
        does not factorise over its rows.
    ValueError
        If the observed data of a likelihood term contains ``inf`` (or a NaN that PyMC did not
        turn into an imputed variable); the message names the variable and the first bad
        (row, column) of the array the user passed.

    Notes
    -----
    **Rows seen through labels.**  When the likelihood uses ``Z[c]`` (``Z`` a category-feature
    matrix and ``c`` the category of every observation, e.g. :func:`pymc_ibp.dp_ibp`), row
    ``l`` of ``Z`` gets the summed log-likelihood of the observations with ``c_n = l``, the
    index ``c`` read from the current point; the likelihood must then factorise over the
    observations.

    **Missing observations.**  With NaNs in an observed NumPy array (or a masked array) PyMC
    replaces ``X`` by ``X_observed``, the observed entries, and a free variable
    ``X_unobserved``, the missing ones, both taken from the full ``N x D`` variable with a
    constant boolean mask (``X[~M]``, ``X[M]``), so their element-wise logps are 1-D over the
    selected entries in row-major order.  IBPGibbs finds the mask in the parameters of each such
    variable and adds its ``i``-th term to row ``np.nonzero(mask)[0][i]``:

    .. math:: \ell_n = \sum_{d:\,M_{nd}=0} \log p(x_{nd}\mid z_{n\cdot},\theta)
        + \sum_{d:\,M_{nd}=1} \log p(\tilde x_{nd}\mid z_{n\cdot},\theta).

    The scheme is data augmentation (Tanner & Wong, 1987): the imputed values
    :math:`\tilde x` are part of the state, ``Z`` is drawn from its exact full conditional
    given them, and ``X_unobserved`` is updated by its own step, by default the one
    ``pm.sample`` assigns (NUTS for a continuous likelihood, ``BinaryGibbsMetropolis`` for a
    Bernoulli one).  Each step leaves :math:`p(Z, \tilde x, \theta \mid X_{obs})` invariant, so
    their composition does, and the ``Z``-marginal is :math:`p(Z \mid X_{obs})` with the missing
    entries integrated out.  Dropping :math:`\tilde x` from the conditional of ``Z`` instead
    would be exact only if :math:`\tilde x \mid Z` were then drawn exactly in the same step (a
    partially collapsed Gibbs sampler, van Dyk & Park, 2008); with an ordinary MCMC step for
    ``X_unobserved`` the imputed values would lag behind ``Z`` and have the wrong distribution.
    ``ibp_log_lik`` includes the imputed entries.

    **Sample stats.**  ``ibp_n_active`` (K+), ``ibp_flips``, ``ibp_log_lik`` (the summed
    log-likelihood of the variables below ``Z``), ``ibp_model_logp`` (the model's log joint
    density, every free variable and the data, no Jacobian terms, at the point the step
    returns: the quantity whose R-hat and ESS say whether chains agree, since a chain can
    trade likelihood for prior probability of ``Z``), ``ibp_kmax_hit`` and the accepted
    proposals of each kind of move.

    References
    ----------
    T. L. Griffiths and Z. Ghahramani (2011). The Indian buffet process: an introduction and
    review. *Journal of Machine Learning Research* 12, 1185-1224.

    M. A. Tanner and W. H. Wong (1987). The calculation of posterior distributions by data
    augmentation. *Journal of the American Statistical Association* 82(398), 528-540.

    D. A. van Dyk and T. Park (2008). Partially collapsed Gibbs samplers: theory and methods.
    *Journal of the American Statistical Association* 103(482), 790-796.
    """

    name = "ibp_gibbs"
    default_blocked = False  # one instance per variable when PyMC assigns several
    _state_class = IBPGibbsState
    stats_dtypes_shapes = {
        "ibp_n_active": (np.int64, []),
        "ibp_flips": (np.int64, []),
        "ibp_log_lik": (np.float64, []),
        "ibp_model_logp": (np.float64, []),
        "ibp_kmax_hit": (bool, []),
        "ibp_split_merge_accepted": (np.int64, []),
        "ibp_combination_accepted": (np.int64, []),
        "ibp_block_accepted": (np.int64, []),
        "ibp_turn_on_accepted": (np.int64, []),
        "ibp_feature_move_accepted": (np.int64, []),
        "ibp_feature_split_merge_accepted": (np.int64, []),
    }

    def __init__(self, vars, *, model=None, rng=None, initial_point=None, compile_kwargs=None,
                 blocked=True, split_merge=5, combination_moves=5, factorise=None,
                 block_moves=None, turn_on_moves=1, feature_moves=3, feature_rows=10,
                 feature_split_merge=3, feature_params=None, init_z="auto", _explain=True):
        model = pm.modelcontext(model)
        z_val, z_rv = one_value_var(vars, model, "IBPGibbs updates one binary matrix at a time")
        op = z_rv.owner.op
        prior = match_prior(model, z_rv) if isinstance(op, BINARY_MATRIX_OPS) else None
        if prior is None:
            raise ModelPatternError(
                f"IBPGibbs needs a 2-D binary matrix: pmi.IBP('Z', ...), pm.Bernoulli('Z', p, "
                f"shape=(N, K)) or pmi.DependentIBP; {z_rv.name!r} is a {type(op).__name__} "
                f"with ndim={z_rv.ndim}."
            )
        self.vars = [z_val]
        self.z_name = z_val.name
        self._slot_dim = slot_dim(model, z_rv.name)  # named by a TruncationWarning
        self.is_ibp = isinstance(prior, IBPPrior)
        ip = model.initial_point() if initial_point is None else initial_point
        self.n, self.k_max = ip[self.z_name].shape
        if initial_point is not None:  # the first chain's start, before any step runs
            check_binary_start(ip[self.z_name], self.z_name, "IBPGibbs")
        children = [rv for rv in model.basic_RVs
                    if rv is not z_rv and z_rv in set(ancestors([rv]))]
        if not children:
            raise ModelPatternError(
                f"No variable depends on {z_rv.name!r}; nothing to condition on."
            )
        # the labels through which a child sees the rows of Z (Z[c] in the correlated models)
        self._labels = {}
        n_obs, indices = {}, {}
        for child in children:
            index = indices[child] = _row_index(child, z_rv, model)
            if index is None:
                n_obs[child] = self.n
                continue
            self._labels[child.name] = compile_point_fn(model, index, compile_kwargs=compile_kwargs)
            labels = np.asarray(self._labels[child.name](ip))
            n_obs[child] = labels.shape[0]
            if labels.size and (labels.min() < 0 or labels.max() >= self.n):
                raise ModelPatternError(
                    f"{child.name!r} uses rows {z_rv.name}[c] with labels c from "
                    f"{labels.min()} to {labels.max()}, but {z_rv.name!r} has {self.n} rows: "
                    f"give {z_rv.name!r} one row per possible label (e.g. l_max rows for a "
                    "pmi.CRP(..., l_max=...)).")
        # row of every logp term of the children built by boolean-mask indexing (missing data)
        self._entry_rows = {}
        masks = {}
        row_problem = None  # why the likelihood cannot be split by rows, found on the way
        for child in children:
            try:
                rows = masked_entry_rows(child, z_rv, model, n_obs[child])
            except ModelPatternError as err:
                if "first axis" not in str(err):
                    raise
                row_problem = err
                continue
            if rows is not None:
                self._entry_rows[child.name] = rows
                masks[child] = _entry_mask(child, z_rv, model)
        self._check_finite_data(model, children, masks)
        terms = model.logp(vars=children, sum=False)
        if not any(t.ndim == 0 or t.type.shape[0] != 0 for t in terms):
            raise ModelPatternError(
                f"The logps of {[c.name for c in children]} have no terms; nothing to condition "
                f"{z_rv.name!r} on."
            )
        self._other_binary = [  # binary matrices beside Z (not its children), e.g. C for M
            model.rvs_to_values[rv].name for rv in model.free_RVs
            if rv is not z_rv and rv not in children
            and isinstance(rv.owner.op, BINARY_MATRIX_OPS)]
        self.joint = factorise is False
        if not self.joint:
            try:
                if row_problem is not None:
                    raise row_problem
                self._compile_row_ll(model, z_rv, children, terms, n_obs, indices, compile_kwargs)
                self._check_row_factorisation(ip, children)
            except ModelPatternError as err:
                if factorise:
                    raise
                self.joint = True
                _log.info(f"IBPGibbs for {z_rv.name!r}: entry-wise updates with the whole "
                          f"likelihood ({self.n * self.k_max} evaluations per sweep), because "
                          f"{str(err)[0].lower()}{str(err)[1:]}")
        if self.joint:
            total = pt.add(*[t.sum() for t in terms]) if len(terms) > 1 else terms[0].sum()
            self._total_ll = compile_point_fn(model, total, compile_kwargs=compile_kwargs)
        if self.is_ibp:
            hyper = model.replace_rvs_by_values([prior.alpha, prior.beta])
        else:  # per-entry prior log-odds, computed in log space
            hyper = model.replace_rvs_by_values([prior.log_p1 - prior.log_p0])
        self._hyper = compile_point_fn(model, hyper, compile_kwargs=compile_kwargs)
        self._model_logp = None
        if init_z not in ("auto", "point", "prior", "surrogate"):
            raise ValueError(f"init_z must be 'auto', 'point', 'prior' or 'surrogate'; got "
                             f"{init_z!r}.")
        starts = self.is_ibp and not self.joint and init_z not in ("point", "surrogate")
        # one match of the linear-Gaussian pattern, for the log line and the start search
        spec = (_linear_gaussian_spec(model, z_rv, explain=_explain) if _explain or starts
                else None)
        if _explain:  # False when another step borrows the row likelihood
            # the log joint density of the model (no Jacobians) at the point step() returns
            self._model_logp = model_logp_fn(model, compile_kwargs)
        self._starter = (_linear_gaussian_starter(model, z_rv, spec, ip, init_z, compile_kwargs)
                         if starts else None)
        row_moves = self.is_ibp and not self.joint  # the moves score rows separately
        self.split_merge = int(split_merge) if row_moves else 0
        if self.split_merge < 0:
            raise ValueError(f"split_merge must be >= 0; got {split_merge!r}.")
        self.combination_moves = int(combination_moves) if row_moves else 0
        if self.combination_moves < 0:
            raise ValueError(f"combination_moves must be >= 0; got {combination_moves!r}.")
        self._block = None
        if self.is_ibp and not self.joint and block_moves is not False:
            self._block = self._setup_block_moves(model, children, ip, compile_kwargs,
                                                  block_moves)
        elif block_moves:
            raise ModelPatternError(
                f"IBPGibbs(block_moves=True) needs {z_rv.name!r} to be a pmi.IBP whose "
                "likelihood factorises over its rows.")
        self.turn_on_moves = int(turn_on_moves) if self._block is not None else 0
        if self.turn_on_moves < 0:
            raise ValueError(f"turn_on_moves must be >= 0; got {turn_on_moves!r}.")
        self.feature_moves = int(feature_moves) if row_moves else 0
        if self.feature_moves < 0:
            raise ValueError(f"feature_moves must be >= 0; got {feature_moves!r}.")
        self.feature_split_merge = int(feature_split_merge) if row_moves else 0
        if self.feature_split_merge < 0:
            raise ValueError(f"feature_split_merge must be >= 0; got {feature_split_merge!r}.")
        if int(feature_rows) < 1:
            raise ValueError(f"feature_rows must be >= 1; got {feature_rows!r}.")
        self._features = None
        # the surrogate start: asked for, or by default where the accelerated step's own
        # search does not apply (not linear-Gaussian); it needs A too (its rows set given the
        # Z found), so A is looked for whether or not the moves are on
        auto = init_z == "auto" and _explain and spec is None and row_moves
        if ((self.feature_moves or self.feature_split_merge or feature_params or auto
             or (row_moves and init_z == "surrogate")) and feature_params is not False):
            if not row_moves:
                raise ModelPatternError(
                    f"IBPGibbs(feature_params=True) needs {z_rv.name!r} to be a pmi.IBP whose "
                    "likelihood factorises over its rows.")
            self._features = FeatureParameterMoves.find(self, model, z_rv, children,
                                                    self._row_ll_graph, ip, compile_kwargs,
                                                    required=bool(feature_params),
                                                    max_rows=feature_rows)
        if self._features is None:
            self.feature_moves = self.feature_split_merge = 0
        self.init_z = init_z
        self._surrogate = None
        auto = auto and self._features is not None  # by default only where the pattern holds
        if init_z == "surrogate" or auto:
            try:
                if not row_moves or self._features is None:
                    raise ModelPatternError(
                        f"IBPGibbs(init_z='surrogate') needs {z_rv.name!r} to be a pmi.IBP "
                        "whose likelihood factorises over its rows, and one parameter matrix A "
                        "of it (a free continuous variable with K_max rows, row k reaching the "
                        f"likelihood only through column k of {z_rv.name!r}, e.g. mu = Z @ A).")
                alpha0, beta0 = (float(np.asarray(h)) for h in self._hyper(ip))
                self._surrogate = surrogate_starter(model, z_rv, children,
                                                    (self.n, self.k_max), alpha0, beta0,
                                                    compile_kwargs, "IBPGibbs", initial_point)
            except ModelPatternError:
                if not auto:
                    raise
        # the model's own start of Z (and A): whether the user gave a chain's start of Z
        # ("auto" then starts there) and of A (else fitted to a given Z) is told per chain
        self._starts = StartDefaults(
            model, [z_rv] + ([self._features.a_rv] if self._features is not None else []))
        self._stat_names = per_matrix_stats(self, model, z_rv.name)
        self.rng = get_random_generator(rng)
        self.warned = self.started = False

    def _setup_block_moves(self, model, children, ip, compile_kwargs, required):
        """``(name, p)`` for the block moves when exactly one child of ``Z`` is a free
        ``N x K`` Bernoulli matrix ``Y`` (e.g. the noisy-or features of
        :func:`pymc_ibp.noisy_or_ibp_ibp`, ``Y ~ Bernoulli(1 - q^(C M))`` with ``Z = C``);
        else ``None`` (or raise when ``required``).  ``Y``'s own likelihood is among the
        descendants of ``Z`` whose row log-likelihood ``self._row_ll`` already sums."""
        free = set(model.free_RVs)
        cands = [c for c in children if c in free and isinstance(c.owner.op, BernoulliRV)
                 and c.ndim == 2 and ip[model.rvs_to_values[c].name].shape[0] == self.n]
        if len(cands) != 1:
            if required:
                raise ModelPatternError(
                    f"IBPGibbs(block_moves=True): exactly one variable that depends on "
                    f"{self.z_name!r} must be a free N x K pm.Bernoulli matrix (found "
                    f"{[c.name for c in cands]}).")
            return None
        p = model.replace_rvs_by_values([cands[0].owner.inputs[-1]])
        p_fn = compile_point_fn(model, p[0], compile_kwargs=compile_kwargs)
        return model.rvs_to_values[cands[0]].name, p_fn

    def block_move(self, Z, trial, alpha, beta, k):
        r"""Flip ``z_nk`` jointly with the entries of the child matrix ``Y`` whose probability
        it changes (Doshi-Velez 2009, §7.2.3: a category and its children in the noisy-or
        IBP-IBP), one Metropolis–Hastings decision per row, for every row of column ``k``.

        Proposal for row ``n``: ``z'_nk = 1 - z_nk``; the entries ``y_nj`` with
        ``p'_nj ≠ p_nj`` redrawn from ``Bernoulli(p'_nj)``.  Acceptance
        ``min(1, P(z'_nk | Z_{-nk}) p(·| Z', Y') q(Y | Z) / (P(z_nk | Z_{-nk}) p(·| Z, Y)
        q(Y' | Z')))``, with ``p(·|…)`` the row likelihood of everything that depends on
        ``Z`` (``Y``'s logp and its children's), ``q`` the proposal of the redrawn entries
        and the IBP prior odds from the running column counts.  Single-site Gibbs cannot
        switch a category on where it is the only parent of a feature the data need, nor off
        where it is the only parent of an active one; this move can.  Returns the number of
        accepted rows; ``Z`` and ``trial[Y]`` are updated in place."""
        y_name, p_fn = self._block
        n = Z.shape[0]
        Y = np.array(trial[y_name], copy=True)
        trial[self.z_name] = Z
        trial[y_name] = Y
        p0 = np.asarray(p_fn(trial), dtype=float)
        ll0 = np.asarray(self._row_ll(trial), dtype=float)  # all descendants of Z, Y's too
        Z1 = Z.copy()
        Z1[:, k] = 1 - Z1[:, k]
        t1 = {**trial, self.z_name: Z1}
        p1 = np.asarray(p_fn(t1), dtype=float)
        changed = p1 != p0
        Y1 = Y.copy()
        Y1[changed] = (self.rng.random(int(changed.sum())) < p1[changed]).astype(Y.dtype)
        t1[y_name] = Y1
        ll1 = np.asarray(self._row_ll(t1), dtype=float)
        with np.errstate(invalid="ignore"):
            d = (ll1 - _redraw_log_q(changed, Y1, p1)) - (ll0 - _redraw_log_q(changed, Y, p0))
        return self._accept_row_flips(Z, Y, Y1, np.arange(n), np.full(n, k), d, alpha, beta)

    def _accept_row_flips(self, Z, Y, Y1, rows, cols, d, alpha, beta):
        """Metropolis–Hastings decisions, in turn, on flipping ``Z[r, c]`` for ``(r, c)`` in
        ``zip(rows, cols)`` (with row ``r`` of the child matrix ``Y`` becoming ``Y1``'s): log
        ratio ``d[r]`` (``d`` one entry per row of ``Z``; NaN: impossible either way) plus the
        IBP prior odds of the flip from the running column counts.  ``Z`` and ``Y`` are
        updated in place; returns the number accepted."""
        n = Z.shape[0]
        d = np.where(np.isnan(d), -np.inf, d)
        m = Z.sum(axis=0).astype(np.int64)
        n_active = int((m > 0).sum())
        log_lam = log_birth_rate(alpha, beta, n)
        u = np.log(self.rng.random(len(rows)))
        accepted = 0
        for i, k, ui in zip(rows, cols, u, strict=True):
            old = int(Z[i, k])
            mk = int(m[k]) - old
            others = n_active - (1 if m[k] > 0 else 0)
            lo = float(ibp_entry_logodds(mk, others, n, Z.shape[1], log_lam, beta))
            if ui < (lo if old == 0 else -lo) + d[i]:
                Z[i, k] = 1 - old
                Y[i] = Y1[i]
                m[k] = mk + 1 - old
                n_active = others + (1 if m[k] > 0 else 0)
                accepted += 1
        return accepted

    def _parent_links(self, trial, Z, p):
        """``links[l, n, j]``: whether toggling ``z_nl`` changes the probability ``p_nj`` of
        the child matrix (``p`` its value at ``Z``), one evaluation per column of ``Z``."""
        _, p_fn = self._block
        links = np.empty((Z.shape[1],) + p.shape, dtype=bool)
        for col in range(Z.shape[1]):
            Zt = Z.copy()
            Zt[:, col] = 1 - Zt[:, col]
            links[col] = np.asarray(p_fn({**trial, self.z_name: Zt}), dtype=float) != p
        return links

    def turn_on_move(self, Z, trial, alpha, beta):
        r"""The targeted joint moves of Doshi-Velez (2009, §7.2.3) for the noisy-or IBP-IBP:
        one Metropolis–Hastings proposal per row, ``Z`` the categories ``C`` and ``Y`` the
        features (``Y ~ Bernoulli(1 - q^(C M))``).

        *Turn on* (probability ½): an entry ``k`` of ``y_n`` that is 0 and has a parent
        category ``l`` that row ``n`` lacks (toggling ``c_nl`` changes ``p_nk``), uniformly
        among such entries, and such an ``l`` uniformly among its absent parents; then
        ``c_nl = 1``, ``y_nk = 1``, and the other entries of ``y_n`` whose probability
        changes redrawn from ``Bernoulli(p'_nj)``.  *Turn off* (probability ½), the reverse:
        an entry ``k`` that is 1, one of its present parents ``l``; ``c_nl = 0``,
        ``y_nk = 0``, the other changed entries redrawn.  With :math:`E_n` the entries the
        move could pick and :math:`P_{nk}` the parents it could pick, the forward proposal
        has probability :math:`\frac12 |E_n|^{-1}|P_{nk}|^{-1}\prod_j q(y'_{nj})` and the
        reverse one is scored at the proposed state, so a turn-on is accepted with

        .. math:: \min\Big\{1, \frac{P(c_{nl}=1\mid C_{-nl})\, p(y'_n, x_n\mid c'_n, \cdot)}
            {P(c_{nl}=0\mid C_{-nl})\, p(y_n, x_n\mid c_n, \cdot)}\,
            \frac{\prod_{j\ne k} q(y_{nj})\;|E_n|\,|P_{nk}|}
            {\prod_{j\ne k} q(y'_{nj})\;|E'_n|\,|P'_{nk}|}\Big\}

        (``p(y_n, x_n | …)`` the row likelihood of everything that depends on ``Z``: the
        noisy-or prior of ``y_n`` and the data; the IBP prior odds from the running column
        counts), a turn-off with the reciprocal form.  Where single-site Gibbs would need the
        feature and its parent on at once, this proposes exactly that.  Returns the number of
        accepted rows; ``Z`` and ``trial[Y]`` are updated in place."""
        y_name, p_fn = self._block
        n, n_cols = Z.shape
        rng = self.rng
        Y = np.array(trial[y_name], copy=True)
        trial[self.z_name] = Z
        trial[y_name] = Y
        p0 = np.asarray(p_fn(trial), dtype=float)
        links0 = self._parent_links(trial, Z, p0)
        on = rng.random(n) < 0.5
        pick = np.full(n, -1)  # the entry k of y_n
        par = np.full(n, -1)  # the parent l
        log_fwd = np.zeros(n)
        for i in range(n):
            has = Z[i][:, None] == (0 if on[i] else 1)
            parents = links0[:, i, :] & has  # L x K
            cand = np.flatnonzero((Y[i] == (0 if on[i] else 1)) & parents.any(axis=0))
            if cand.size == 0:
                continue
            k = cand[int(rng.random() * cand.size)]
            ls = np.flatnonzero(parents[:, k])
            pick[i], par[i] = k, ls[int(rng.random() * ls.size)]
            log_fwd[i] = -math.log(cand.size) - math.log(ls.size)
        rows = np.flatnonzero(pick >= 0)
        if rows.size == 0:
            return 0
        Z1 = Z.copy()
        Z1[rows, par[rows]] = 1 - Z1[rows, par[rows]]
        t1 = {**trial, self.z_name: Z1}
        p1 = np.asarray(p_fn(t1), dtype=float)
        forced = np.zeros(Y.shape, dtype=bool)
        forced[rows, pick[rows]] = True
        redraw = (p1 != p0) & ~forced
        Y1 = Y.copy()
        Y1[redraw] = (rng.random(int(redraw.sum())) < p1[redraw]).astype(Y.dtype)
        Y1[rows, pick[rows]] = on[rows].astype(Y.dtype)
        t1[y_name] = Y1
        ll0 = np.asarray(self._row_ll(trial), dtype=float)
        ll1 = np.asarray(self._row_ll(t1), dtype=float)
        links1 = self._parent_links(t1, Z1, p1)
        log_rev = np.full(n, -np.inf)
        for i in rows:
            k, ll_ = pick[i], par[i]
            back = not on[i]  # the reverse move's direction
            parents = links1[:, i, :] & (Z1[i][:, None] == (0 if back else 1))
            cand = (Y1[i] == (0 if back else 1)) & parents.any(axis=0)
            if cand[k] and parents[ll_, k]:
                log_rev[i] = -math.log(cand.sum()) - math.log(parents[:, k].sum())
        with np.errstate(invalid="ignore"):
            d = ((ll1 - _redraw_log_q(redraw, Y1, p1) + log_rev)
                 - (ll0 - _redraw_log_q(redraw, Y, p0) + log_fwd))
        return self._accept_row_flips(Z, Y, Y1, rows, par[rows], d, alpha, beta)

    def _compile_row_ll(self, model, z_rv, children, terms, n_obs, indices, compile_kwargs):
        """Compile the per-row log-likelihood of ``Z`` (``self._row_ll``): each child's
        element-wise logp reduced over all but its observation axis, its terms attributed to
        rows through PyMC's imputation mask and the labels of ``Z[c]``."""
        rows = []
        for child, term in zip(children, terms, strict=True):
            if term.ndim == 0:
                raise ModelPatternError(
                    f"The logp of {child.name!r} does not factorise over the rows of "
                    f"{z_rv.name!r} (it is one scalar). IBPGibbs needs a likelihood whose "
                    "element-wise logp has the observation axis first, e.g. "
                    "pm.Normal('X', mu=Z @ A, ...) or pm.Bernoulli('X', logit_p=Z @ A, ...)."
                )
            if term.type.shape[0] == 0:
                # no terms, e.g. the imputed part of a multivariate PartialObservedRV, whose
                # logp PyMC counts in the full per-row logp of the observed part
                continue
            # term i of a masked child belongs to row entry_rows[i] (summed per row)
            term = per_row(term, n_obs[child], self._entry_rows.get(child.name))
            if child.name in self._labels:
                # observation n belongs to row c[n] of Z: sum the observations of each row
                term = pt.inc_subtensor(pt.zeros(self.n, dtype=term.dtype)[indices[child]],
                                        term)
            rows.append(term)
        row_ll = pt.add(*rows) if len(rows) > 1 else rows[0]
        self._row_ll_graph = row_ll  # of the value variables (the feature moves' gradients)
        self._row_ll = compile_point_fn(model, row_ll, compile_kwargs=compile_kwargs)

    @staticmethod
    def _check_finite_data(model, children, masks):
        """Raise on the first non-finite observed value of a child, at its position in the
        user's array (through the mask for PyMC's ``X_observed``)."""
        observed = set(model.observed_RVs)
        for child in children:
            if child not in observed:
                continue
            value = model.rvs_to_values[child]
            if isinstance(value, Constant):
                data = np.asarray(value.data)
            elif hasattr(value, "get_value"):
                data = np.asarray(value.get_value())
            else:
                continue
            if not np.issubdtype(data.dtype, np.number):
                continue
            bad = ~np.isfinite(data)
            binary = isinstance(child.owner.op, BernoulliRV)
            if binary and not bad.any():
                bad = (data != 0) & (data != 1)
            if not bad.any():
                continue
            first = tuple(np.argwhere(bad)[0])
            name, where = child.name, first
            if child in masks:
                # entry first[0] of the flattened observed part is this element of the full array
                where = tuple(np.argwhere(masks[child])[first[0]]) + first[1:]
                name = child.name.removesuffix("_observed")
            if binary and np.isfinite(data[first]):
                raise DataError(
                    f"The observed data of {name!r} (a pm.Bernoulli likelihood, e.g. "
                    "pmi.likelihoods.leaky_noisy_or or noisy_detection) contains "
                    f"{data[first]} at ({_format_position(where)}); {int(bad.sum())} value(s) "
                    "other than 0 and 1 in all. Binarise the data first (e.g. X > threshold), "
                    "or use a likelihood for counts or real values."
                )
            raise DataError(
                f"The observed data of {name!r} contains {data[first]} at "
                f"({_format_position(where)}); {int(bad.sum())} non-finite value(s) in all. "
                "IBPGibbs needs finite observations: mark missing entries as NaN in a NumPy array "
                f"(PyMC imputes them as '{name}_unobserved') and remove infinite values."
            )

    def _check_row_factorisation(self, point, children):
        point = perturbed_point(point)
        # other binary matrices all ones, so that a row of Z seen through them (e.g. M in
        # Z = 1[C M > 0]) reaches every observation: at their zero start it reaches none and a
        # non-factorising likelihood would pass the check
        for name in self._other_binary:
            point[name] = np.ones_like(point[name])
        names = [c.name for c in children]
        try:
            ll = np.asarray(self._row_ll(point))
        except ValueError as err:  # e.g. observed data of another shape than their mean
            raise DataError(
                f"The element-wise logp of {names} cannot be evaluated at the initial point "
                f"({err}). Check that the observed data have the shape of their likelihood's "
                f"parameters (e.g. of Z @ A).") from err
        if ll.shape != (self.n,):
            raise ModelPatternError(
                f"The element-wise logp of {names} reduces to shape {ll.shape}, not one term per "
                f"row of {self.z_name!r} ({self.n},). IBPGibbs needs the observation axis first."
            )
        # flip z_r0 in the first and last rows and in up to 10 rows whose entries are split
        # unusually between masked children (rows with missing entries): only row r may change
        irregular = set()
        for name, entry_rows in self._entry_rows.items():
            counts = np.bincount(entry_rows)
            rows = np.flatnonzero(counts != np.bincount(counts).argmax())[:10]
            if name in self._labels:  # observations -> their rows of Z
                rows = np.asarray(self._labels[name](point))[rows]
            irregular.update(rows.tolist())
        for r in sorted({0, self.n - 1} | set(sorted(irregular)[:10])):
            Z = np.array(point[self.z_name], copy=True)
            Z[r, 0] = 1 - Z[r, 0]
            ll2 = np.asarray(self._row_ll({**point, self.z_name: Z}))
            check_one_row_changed(ll, ll2, r, f"Changing row {r} of {self.z_name!r}", names,
                                  "the rows of Z, which IBPGibbs needs")

    @interrupt_safe  # the column kernels take the step's Generator (see _numba_utils)
    def step(self, point):
        if not self.started:
            self.started = True
            check_binary_start(point[self.z_name], self.z_name, "IBPGibbs")
            z_given = self._starts.given(point, self.z_name)
            if self._surrogate is not None and (self.init_z == "surrogate" or not z_given):
                return self._surrogate_start(point)
            if self._starter is not None:
                start = self._search_start(point)
                if start is not None:
                    return start
            if (z_given and self._features is not None and np.any(point[self.z_name])
                    and not self._starts.given(point, self._features.a_name)):
                return self._given_z_start(point)
        Z = np.array(point[self.z_name], copy=True)  # the value's dtype: the logp's input
        hyper = self._hyper(point)
        flips = 0
        if self.is_ibp:
            alpha, beta = (float(np.asarray(h)) for h in hyper)
            m = Z.sum(axis=0).astype(np.int64)
            n_active = int((m > 0).sum())
        else:
            prior_lo = np.broadcast_to(np.asarray(hyper[0], dtype=float), Z.shape)
        trial = dict(point)
        loglik = 0.0
        if self.joint:
            flips, loglik, n_active = self._joint_sweep(
                Z, trial, (alpha, beta) if self.is_ibp else None,
                None if self.is_ibp else prior_lo)
        # the rows' log-likelihoods at the current Z (None: not known); since the likelihood
        # factorises over rows, one evaluation with column k flipped in every row gives each
        # row's other option, so a column costs one evaluation, not two
        cur = None if self.joint else self._rows_ll(trial, Z)
        for k in ([] if self.joint else self.rng.permutation(self.k_max)):
            col = Z[:, k].copy()
            Z[:, k] = col == 0
            flipped = self._rows_ll(trial, Z)
            Z[:, k] = col
            on = col == 1
            ll1 = np.where(on, cur, flipped)
            ll0 = np.where(on, flipped, cur)
            if self.is_ibp:
                f, n_active = ibp_column_gibbs(self.rng, Z, k, ll1, ll0, m, n_active, alpha, beta)
            else:
                f = bernoulli_column_gibbs(self.rng, Z, k, ll1, ll0, prior_lo[:, k])
            flips += f
            cur = np.where(Z[:, k] == 1, ll1, ll0)
            loglik = float(cur.sum())
        sm_acc = 0
        for _ in range(self.split_merge):
            accepted, Z = self.split_merge_move(Z, trial, alpha, beta, cur)
            sm_acc += accepted
            cur = None if accepted else cur
        cm_acc = 0
        for _ in range(self.combination_moves):
            accepted, Z = self.combination_move(Z, trial, alpha, beta, cur)
            cm_acc += accepted
            cur = None if accepted else cur
        block_acc = turn_acc = 0
        if self._block is not None:
            for k in self.rng.permutation(self.k_max):
                block_acc += self.block_move(Z, trial, alpha, beta, k)
            for _ in range(self.turn_on_moves):
                turn_acc += self.turn_on_move(Z, trial, alpha, beta)
        fm_acc = fsm_acc = 0
        if self._features is not None:
            self._features.new_sweep()
        for _ in range(self.feature_moves):
            accepted, Z = self._features.birth_death(Z, trial, alpha, beta)
            fm_acc += accepted
        for _ in range(self.feature_split_merge):
            accepted, Z = self._features.split_merge(Z, trial, alpha, beta)
            fsm_acc += accepted
        if sm_acc or cm_acc or block_acc or turn_acc or fm_acc or fsm_acc:
            trial[self.z_name] = Z
            loglik = float(np.sum(self._row_ll(trial)))
        n_active = int((Z.sum(axis=0) > 0).sum())
        hit = n_active == self.k_max
        if hit and self.is_ibp and not self.warned:
            self.warned = True
            warn_slots_in_use("IBPGibbs", self.z_name, self.k_max, self._slot_dim)
        new = dict(point)
        new[self.z_name] = Z
        if block_acc or turn_acc:
            y_name = self._block[0]
            new[y_name] = np.asarray(trial[y_name], dtype=point[y_name].dtype)
        if fm_acc or fsm_acc:
            a_name = self._features.a_name
            new[a_name] = np.asarray(trial[a_name], dtype=point[a_name].dtype)
        stats_ = {"ibp_n_active": n_active, "ibp_flips": int(flips), "ibp_log_lik": loglik,
                         "ibp_split_merge_accepted": int(sm_acc),
                         "ibp_combination_accepted": int(cm_acc),
                         "ibp_block_accepted": int(block_acc),
                         "ibp_turn_on_accepted": int(turn_acc),
                         "ibp_feature_move_accepted": int(fm_acc),
                         "ibp_feature_split_merge_accepted": int(fsm_acc),
                         "ibp_kmax_hit": bool(hit)}
        return new, self._stats(stats_, new)

    def _search_start(self, point):
        """The chain's first iteration when the initialisation policy (``init_z``) calls for
        the linear-Gaussian start search: ``Z`` from the best of the accelerated step's
        annealed searches, ``A`` and the imputed entries from their exact conditional given
        it (one call of that step, which makes no other move right after its search).
        ``None`` when the chain starts at its initial point instead."""
        starter = self._starter
        if not starter._will_search(np.asarray(point[self.z_name], dtype=np.int8)):
            return None
        starter.rng = self.rng  # the chain's own stream: the same draws under any cores
        starter._reset_chain(0)
        new, _ = starter.step(point)
        Z = np.asarray(new[self.z_name], dtype=point[self.z_name].dtype)
        new[self.z_name] = Z
        return new, self._start_stats(new)

    def _surrogate_start(self, point):
        """The chain's first iteration under ``init_z="surrogate"``: ``Z`` from the best of the
        accelerated step's annealed searches on the linear-Gaussian surrogate of the data
        (:func:`~pymc_ibp.step_methods.starts.surrogate_z`), then the active rows of ``A`` set
        to their Laplace means given it (two passes over the columns) or, on continuous data
        where that fits the rows better (a higher log-likelihood), to the surrogate's rows of
        ``A`` (a likelihood whose location is ``Z @ A``); a model's offset that is one free
        variable the same for every row starts at the surrogate's fitted offset, and so does
        every group's row of one indexed by the rows' groups (``b[group]``), unless the user
        gave it; every other variable keeps its value.  Measured on block images with
        a Student-t likelihood (N = 60): the Laplace means from 0 (a few damped Newton steps)
        left the start 700-1800 nats below the surrogate's rows in 5 of 6 seeds."""
        draw = surrogate_z(self._surrogate, self.rng, point)
        Z = draw.z.astype(point[self.z_name].dtype)
        features = self._features
        a_name = features.a_name
        trial = {**point, **draw.offsets, self.z_name: Z}
        active = np.flatnonzero(Z.sum(axis=0))
        for _ in range(2):
            for k in active:
                try:
                    mean, _ = features.laplace(trial, Z, int(k))
                except FloatingPointError:
                    continue
                trial = features._rows(trial, {int(k): mean})
        new = {**point, **draw.offsets}
        new[self.z_name] = Z
        new[a_name] = np.asarray(trial[a_name], dtype=point[a_name].dtype)
        if draw.features is not None and draw.features.shape == np.shape(point[a_name]):
            other = features._rows(dict(new), {int(k): draw.features[k] for k in active})
            if np.sum(self._row_ll(other)) > np.sum(self._row_ll(new)):
                new[a_name] = np.asarray(other[a_name], dtype=point[a_name].dtype)
        return new, self._start_stats(new)

    def _given_z_start(self, point):
        """The chain's first iteration when the user gave its ``Z`` but not ``A``: ``Z`` kept
        and the active rows of ``A`` set to their joint mode given it
        (:meth:`FeatureParameterMoves.joint_mode`), every other variable kept.  (From ``A``'s
        own start, e.g. 0, the likelihood would not tell the features apart, and the first
        sweep would redraw the given ``Z`` from its prior.)"""
        a_name = self._features.a_name
        new = dict(point)
        new[a_name] = np.asarray(self._features.joint_mode(point, point[self.z_name]),
                                 dtype=point[a_name].dtype)
        return new, self._start_stats(new)

    def _start_stats(self, new):
        """The stats of a chain's first iteration when it is a start search (no moves)."""
        Z = new[self.z_name]
        n_active = int((Z.sum(axis=0) > 0).sum())
        # no move was made: every "accepted" counter the class declares is 0
        stats_ = {k: 0 for k in type(self).stats_dtypes_shapes if k.endswith("_accepted")}
        stats_.update(ibp_n_active=n_active, ibp_flips=0,
                      ibp_log_lik=float(np.sum(self._row_ll(new))),
                      ibp_kmax_hit=n_active == self.k_max)
        return self._stats(stats_, new)

    def _stats(self, stats_, new):
        """The recorded stats of one iteration, with the model's log density at ``new``."""
        stats_["ibp_model_logp"] = (float(self._model_logp(new)) if self._model_logp is not None
                                    else np.nan)
        return [{self._stat_names[k]: v for k, v in stats_.items()}]

    def _joint_sweep(self, Z, trial, ibp, prior_lo):
        """Entry-wise Gibbs sweep (in place) for a likelihood that does not factorise over the
        rows of ``Z``: each entry's conditional from the whole likelihood with the entry
        flipped (one evaluation per entry) and its prior log-odds (``ibp = (α, β)`` for
        :class:`pymc_ibp.IBP`, else the per-entry ``prior_lo``).  Returns ``(flips,
        log-likelihood, active columns)``."""
        n, k_max = Z.shape
        trial[self.z_name] = Z
        total = float(self._total_ll(trial))
        m = Z.sum(axis=0).astype(np.int64)
        n_active = int((m > 0).sum())
        log_lam = log_birth_rate(ibp[0], ibp[1], n) if ibp is not None else 0.0
        flips = 0
        for k in self.rng.permutation(k_max):
            for i in range(n):
                old = int(Z[i, k])
                if ibp is not None:
                    mk = int(m[k]) - old
                    others = n_active - (1 if m[k] > 0 else 0)
                    lo = ibp_entry_logodds(mk, others, n, k_max, log_lam, ibp[1])
                else:
                    lo = float(prior_lo[i, k])
                Z[i, k] = 1 - old
                flipped = float(self._total_ll(trial))
                ll1, ll0 = (flipped, total) if old == 0 else (total, flipped)
                x = lo + ll1 - ll0
                new = int(self.rng.random() < (1.0 / (1.0 + math.exp(-x)) if x > -700 else 0.0))
                Z[i, k] = new
                total = ll1 if new else ll0
                if new != old:
                    flips += 1
                    if ibp is not None:
                        m[k] += new - old
                        n_active = others + (1 if m[k] > 0 else 0)
        return flips, total, n_active

    def _rows_ll(self, trial, Z):
        trial[self.z_name] = Z
        return np.asarray(self._row_ll(trial), dtype=float)

    def split_merge_move(self, Z, trial, alpha, beta, cur=None):
        r"""One split–merge Metropolis–Hastings proposal on ``Z`` given every other variable
        (Meeds et al. 2007; Jain & Neal 2004), with the model's own row likelihood.

        *Split* (probability ½): an active column ``c`` and an empty slot ``t``, each uniform;
        every owner ``r`` of ``c`` independently takes option ``c`` only, ``t`` only or both with
        probability :math:`p_r(o) \propto p(x_r \mid z_r^{(o)}, \cdot)` (the row likelihoods
        of the three options, two compiled evaluations since the likelihood factorises over
        rows; slot ``t`` brings the current value of its own parameters).  An allocation that
        leaves a column empty is a null move.  *Merge* (probability ½): an ordered pair of
        distinct active columns (keep, remove) becomes their union in ``keep``; its reverse
        split is scored at the merged state (three evaluations).  With the truncated IBP pmf,
        the empty-slot choice cancels the slot factor and a split ``Z → Z'`` is accepted with

        .. math:: \min\Big\{1, \frac{p(X\mid Z')}{p(X\mid Z)}\,
            \frac{\alpha\beta\,B(m_1, N-m_1+\beta)\,B(m_2, N-m_2+\beta)}
            {B(m, N-m+\beta)\,(K_+ + 1)\,\prod_r p_r(o_r)}\Big\}

        (``K_+`` counted before the split), a merge with the reciprocal.  It is a Metropolis
        move on ``p(Z | everything else)``, so it leaves the joint posterior invariant.
        ``cur``: the rows' log-likelihoods at ``Z`` when known (one evaluation fewer).
        Returns ``(accepted, Z)``.
        """
        n, k_max = Z.shape
        m = Z.sum(axis=0)
        act = np.flatnonzero(m > 0)
        kp = act.size
        rng = self.rng
        log_ab = math.log(alpha * beta)
        if rng.random() < 0.5:  # ---- split
            if kp == 0 or kp == k_max:
                return 0, Z
            c = act[int(rng.random() * kp)]
            empty = np.flatnonzero(m == 0)
            t = empty[int(rng.random() * empty.size)]
            own = Z[:, c] == 1
            ll = self._split_option_ll(trial, Z, c, t, own, cur)
            logp = ll - np.logaddexp.reduce(ll, axis=0)
            u = rng.random(n)
            cum = np.cumsum(np.exp(logp), axis=0)
            opt = np.minimum((u[None, :] > cum).sum(axis=0), 2)
            m1 = int(np.sum(own & (opt != 1)))
            m2 = int(np.sum(own & (opt != 0)))
            if m1 == 0 or m2 == 0:
                return 0, Z
            rows = np.flatnonzero(own)
            d_ll = float(np.sum(ll[opt[rows], rows] - ll[0, rows]))
            log_q = float(np.sum(logp[opt[rows], rows]))
            log_r = (d_ll + log_ab + log_beta_term(m1, n, beta) + log_beta_term(m2, n, beta)
                     - log_beta_term(int(m[c]), n, beta) - math.log(kp + 1.0) - log_q)
            if math.log(rng.random()) < log_r:
                Z = Z.copy()
                Z[rows, c] = (opt[rows] != 1).astype(Z.dtype)
                Z[rows, t] = (opt[rows] != 0).astype(Z.dtype)
                return 1, Z
            return 0, Z
        if kp < 2:  # ---- merge
            return 0, Z
        i1, i2 = ordered_pair(rng, kp)
        keep, rem = act[i1], act[i2]
        merged = Z.copy()
        merged[:, keep] = Z[:, keep] | Z[:, rem]
        merged[:, rem] = 0
        own = merged[:, keep] == 1
        ll = self._split_option_ll(trial, merged, keep, rem, own)
        logp = ll - np.logaddexp.reduce(ll, axis=0)
        rows = np.flatnonzero(own)
        opt = np.where(Z[rows, rem] == 0, 0, np.where(Z[rows, keep] == 0, 1, 2))
        cur_ll = (self._rows_ll(trial, Z) if cur is None else cur)[rows]
        d_ll = float(np.sum(cur_ll - ll[0, rows]))  # split state minus merged state
        log_q = float(np.sum(logp[opt, rows]))
        log_r = (d_ll + log_ab + log_beta_term(int(m[keep]), n, beta)
                 + log_beta_term(int(m[rem]), n, beta) - log_beta_term(rows.size, n, beta)
                 - math.log(kp) - log_q)
        if math.log(rng.random()) < -log_r:
            return 1, merged
        return 0, Z

    def combination_move(self, Z, trial, alpha, beta, cur=None):
        r"""One *dissolve / compose* Metropolis–Hastings proposal on ``Z`` given every other
        variable, with the model's own row likelihood.

        A feature that stands for a combination of two others (a motif ``A_k ≈ A_i + A_j``, or
        a merged pair of features) cannot be replaced by the pair by single-entry updates or by
        split–merge moves, which would have to pass through worse states.

        *Dissolve* (probability ½): an active column ``k`` and an unordered pair ``{i, j}`` of
        other active columns, uniformly; every owner of ``k`` drops ``k`` and takes both ``i``
        and ``j``.  *Compose* (probability ½, the reverse): an empty slot ``t`` and a pair
        ``{i, j}`` of active columns, uniformly; every row owning both ``i`` and ``j``
        independently keeps its row (option 0) or takes ``t`` with ``{i, j}`` turned into
        ``{}``, ``{i}``, ``{j}`` or ``{i, j}`` (options 1–4), with probability
        :math:`p_r(o) \propto p(x_r\mid z_r^{(o)},\cdot)` (slot ``t`` brings the current value
        of its parameters); an allocation giving ``t`` no row, or leaving ``i`` or ``j``
        without rows, is a null move.  A dissolve
        ``Z → Z'`` is accepted with

        .. math:: \min\Big\{1, \frac{p(X\mid Z')\,P(Z')}{p(X\mid Z)\,P(Z)}\,
            \frac{K_+ \binom{K_+-1}{2}}{(K_{max}-K_+ + 1)\binom{K_+-1}{2}}
            \prod_r p_r(o_r)\Big\}

        (``P`` the truncated IBP pmf, ``K_+`` counted before the dissolve, the product over
        the rows owning both ``i`` and ``j`` after it, scored at ``Z'``), a compose with the
        reciprocal.  ``cur``: the rows' log-likelihoods at ``Z`` when known (one evaluation
        fewer).  Returns ``(accepted, Z)``.
        """
        n, k_max = Z.shape
        m = Z.sum(axis=0).astype(np.int64)
        act = np.flatnonzero(m > 0)
        kp = act.size
        rng = self.rng
        if rng.random() < 0.5:  # ---- dissolve
            if kp < 3:
                return 0, Z
            k = act[int(rng.random() * kp)]
            rest = act[act != k]
            a, b = rng.choice(rest.size, size=2, replace=False)
            i, j = rest[a], rest[b]
            own = Z[:, k] == 1
            new = Z.copy()
            new[own, k] = 0
            new[own, i] = 1
            new[own, j] = 1
            log_q_rev, d_ll = self._compose_scores(trial, Z, new, k, i, j, cur)
            log_r = (d_ll + self._log_prior(new, alpha, beta) - self._log_prior(Z, alpha, beta)
                     + math.log(kp) - math.log(k_max - kp + 1) + log_q_rev)
            if math.log(rng.random()) < log_r:
                return 1, new
            return 0, Z
        if kp < 2 or kp == k_max:  # ---- compose
            return 0, Z
        empty = np.flatnonzero(m == 0)
        t = empty[int(rng.random() * empty.size)]
        a, b = rng.choice(kp, size=2, replace=False)
        i, j = act[a], act[b]
        both = (Z[:, i] == 1) & (Z[:, j] == 1)
        if not both.any():
            return 0, Z
        ll = self._compose_option_ll(trial, Z, t, i, j, both, cur)
        logp = ll - np.logaddexp.reduce(ll, axis=0)
        rows = np.flatnonzero(both)
        cum = np.cumsum(np.exp(logp[:, rows]), axis=0)
        opt = np.minimum((rng.random(rows.size)[None, :] > cum).sum(axis=0), 4)
        if not np.any(opt > 0):
            return 0, Z
        new = Z.copy()
        on = rows[opt > 0]
        new[on, t] = 1
        new[on, i] = np.isin(opt[opt > 0], (2, 4)).astype(Z.dtype)
        new[on, j] = np.isin(opt[opt > 0], (3, 4)).astype(Z.dtype)
        if not (new[:, i].any() and new[:, j].any()):
            return 0, Z  # a pair member left empty: no dissolve leads back (null move)
        log_q = float(np.sum(logp[opt, rows]))
        d_ll = float(np.sum(ll[opt, rows] - ll[0, rows]))
        log_r = (d_ll + self._log_prior(new, alpha, beta) - self._log_prior(Z, alpha, beta)
                 - math.log(kp + 1) + math.log(k_max - kp) - log_q)
        if math.log(rng.random()) < log_r:
            return 1, new
        return 0, Z

    def _log_prior(self, Z, alpha, beta):
        return ibp_log_pmf(Z.sum(axis=0).astype(np.int64), Z.shape[0], Z.shape[1], alpha, beta)

    def _compose_option_ll(self, trial, Z, t, i, j, both, cur=None):
        """Row log-likelihoods (5 x N) of the rows ``both`` (owning ``i`` and ``j``; slot ``t``
        empty) under the compose options 0 (unchanged), 1 (``t``), 2 (``t, i``),
        3 (``t, j``), 4 (``t, i, j``); ``cur``, if given, the rows' values at ``Z``."""
        ll = np.empty((5, Z.shape[0]))
        ll[0] = self._rows_ll(trial, Z) if cur is None else cur
        for o, (zi, zj) in enumerate(((0, 0), (1, 0), (0, 1), (1, 1)), start=1):
            Zo = Z.copy()
            Zo[both, t] = 1
            Zo[both, i] = zi
            Zo[both, j] = zj
            ll[o] = self._rows_ll(trial, Zo)
        return ll

    def _compose_scores(self, trial, Z, new, k, i, j, cur=None):
        """For a dissolve ``Z → new`` of column ``k`` into ``{i, j}``: the log-probability of
        its reverse compose allocation (scored at ``new``, slot ``k`` empty) and the change of
        the log-likelihood; ``cur``, if given, the rows' log-likelihoods at ``Z``."""
        both = (new[:, i] == 1) & (new[:, j] == 1)
        ll = self._compose_option_ll(trial, new, k, i, j, both)
        logp = ll - np.logaddexp.reduce(ll, axis=0)
        rows = np.flatnonzero(both)
        was_k = Z[rows, k] == 1
        opt = np.where(~was_k, 0, 1 + Z[rows, i] + 2 * Z[rows, j])
        # options: 1 = {t}, 2 = {t, i}, 3 = {t, j}, 4 = {t, i, j}
        log_q = float(np.sum(logp[opt, rows]))
        own = Z[:, k] == 1
        cur = self._rows_ll(trial, Z) if cur is None else cur
        d_ll = float(np.sum(ll[0, own])) - float(np.sum(cur[own]))
        return log_q, d_ll

    def _split_option_ll(self, trial, Z, c, t, own, cur=None):
        """Row log-likelihoods (3 x N) of the owners ``own`` of column ``c`` (slot ``t``
        empty) taking option 0 = ``c`` only (``Z`` itself), 1 = ``t`` only, 2 = both;
        ``cur``, if given, the rows' values at ``Z``."""
        ll = np.empty((3, Z.shape[0]))
        ll[0] = self._rows_ll(trial, Z) if cur is None else cur
        Zo = Z.copy()
        Zo[own, t] = 1
        ll[2] = self._rows_ll(trial, Zo)
        Zo[own, c] = 0
        ll[1] = self._rows_ll(trial, Zo)
        return ll

    def setup_chain(self, rng, tune, draws):
        super().setup_chain(rng, tune, draws)
        self.warned = self.started = False

    def reset_tuning(self):
        pass

    @staticmethod
    def competence(var, has_grad):
        # any likelihood: preferred for pmi.IBP; AcceleratedGibbs wins where it applies (IDEAL)
        if isinstance(var.owner.op, IBPRV):
            return Competence.PREFERRED
        if isinstance(var.owner.op, DependentIBPRV):
            return Competence.PREFERRED  # PyMC's binary steps ignore its structure
        if isinstance(var.owner.op, BernoulliRV) and var.ndim == 2:
            # a Bernoulli matrix whose probabilities come from the plugin's priors (the sticks
            # of pmi.IBPStickBreaking, the noisy-or's 1 - q^(C M)): column-wise updates beat
            # PyMC's BinaryGibbsMetropolis (one whole-model evaluation per entry)
            plugin = (IBPRV, IBPStickBreakingRV, CRPRV)
            if any(a.owner is not None and isinstance(a.owner.op, plugin)
                   for a in ancestors([var.owner.inputs[-1]])):
                return Competence.IDEAL
            return Competence.COMPATIBLE
        return Competence.INCOMPATIBLE
