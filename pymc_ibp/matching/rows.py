"""The log-likelihood of a model, row by row of one of its discrete variables.

:class:`RowLikelihood` compiles, once per step, the element-wise logp of every variable that
depends on a binary matrix ``Z`` (or a label vector ``c``), reduced to one term per row of it:
each child's terms summed over all but its observation axis, the terms of PyMC's imputation
split (``X_observed`` / ``X_unobserved``, 1-D over the entries their boolean mask selects)
added to their rows, and the observations of a likelihood that sees ``Z`` through labels
(``Z[c]``: a category-feature matrix and the category of every observation) added to the row
of their label.  A likelihood that factorises over the rows then gives, in one evaluation,
every row's log-likelihood, and with one column of ``Z`` flipped in every row, each row's
other option: what :class:`pymc_ibp.IBPGibbs`, :class:`pymc_ibp.CRPGibbs`,
:class:`pymc_ibp.DependentIBPGibbs` and the feature moves evaluate.
"""

from __future__ import annotations

import numpy as np
import pytensor.tensor as pt
from pytensor.graph.basic import Constant
from pytensor.graph.traversal import ancestors
from pytensor.tensor.random.basic import BernoulliRV
from pytensor.tensor.subtensor import AdvancedSubtensor

from pymc_ibp._pytensor_utils import compile_point_fn
from pymc_ibp.exceptions import DataError, ModelPatternError
from pymc_ibp.matching.graph import boolean_masked, first_axis_index
from pymc_ibp.matching.priors import BINARY_MATRIX_OPS

__all__ = ["RowLikelihood", "check_one_row_changed", "masked_entry_rows", "per_row",
           "perturbed_point"]


def _entry_mask(child, z_rv, model, who="IBPGibbs"):
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
            f"{len(masks)} different boolean masks; {who} cannot tell which row of "
            f"{z_rv.name!r} each term of its logp belongs to."
        )
    return masks[0] if masks else None


def masked_entry_rows(child, rv, model, n_obs, who="IBPGibbs"):
    """For a child built by PyMC's imputation split (``X_observed`` / ``X_unobserved``), the
    row of each of its logp terms (``np.nonzero(mask)[0]``); ``None`` for an ordinary child.
    Raises :class:`ModelPatternError` when the mask's first axis is not the ``n_obs`` rows of
    the observations or does not match the child's number of terms."""
    mask = _entry_mask(child, rv, model, who)
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


def _row_index(child, z_rv, model, who):
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
                f"{child.name!r} indexes {z_rv.name!r} as {node.op}; {who} understands "
                f"{z_rv.name!r} itself or {z_rv.name}[c] with c a vector of row labels (one "
                f"per observation, e.g. a pmi.CRP)."
            )
        if not any(index is f for f in found):
            found.append(index)
    if len(found) > 1:
        raise ModelPatternError(
            f"The parameters of {child.name!r} index {z_rv.name!r} with {len(found)} different "
            f"label vectors; {who} cannot tell which row of {z_rv.name!r} each observation "
            "belongs to."
        )
    if not found:
        return None
    [index] = model.replace_rvs_by_values(found)
    return index


def perturbed_point(point, seed=0):
    """``point`` with every floating value moved by ``0.3 N(0, 1)`` noise, for the
    row-factorisation checks (at the support point, e.g. ``A = 0``, changing one row of the
    discrete variable could leave every likelihood term unchanged and a check pass
    vacuously)."""
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


def _check_finite_data(model, children, masks, who):
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
            f"{who} needs finite observations: mark missing entries as NaN in a NumPy array "
            f"(PyMC imputes them as '{name}_unobserved') and remove infinite values."
        )


class RowLikelihood:
    """The log-likelihood of every variable that depends on ``rv`` (a binary ``N x K``
    matrix or a label vector of length ``N``), one term per row of ``rv``.

    Building it finds the children of ``rv``, the labels through which a child sees its rows
    (``Z[c]``; with ``labels=True``), the rows of the terms of PyMC's imputation split, and
    checks the observed data (finite; 0/1 for a Bernoulli child).  :meth:`compile` compiles
    the per-row log-likelihood (raising :class:`ModelPatternError` when the logps cannot be
    split by rows); :meth:`check_factorisation` checks that changing one row changes only
    that row's term.  ``who`` names the step in messages.
    """

    def __init__(self, model, rv, n_rows, initial_point, *, compile_kwargs=None, labels=True,
                 who="IBPGibbs"):
        self.model, self.rv, self.n, self.who = model, rv, int(n_rows), who
        self.name = model.rvs_to_values[rv].name
        self.compile_kwargs = compile_kwargs
        self.children = [c for c in model.basic_RVs if c is not rv and rv in set(ancestors([c]))]
        if not self.children:
            raise ModelPatternError(f"No variable depends on {rv.name!r}; nothing to condition "
                                    "on.")
        self.names = [c.name for c in self.children]
        # the labels through which a child sees the rows of Z (Z[c] in the correlated models)
        self.labels = {}
        self._n_obs, self._indices = {}, {}
        for child in self.children:
            index = self._indices[child] = (_row_index(child, rv, model, who) if labels
                                            else None)
            if index is None:
                self._n_obs[child] = self.n
                continue
            fn = self.labels[child.name] = compile_point_fn(model, index,
                                                            compile_kwargs=compile_kwargs)
            lab = np.asarray(fn(initial_point))
            self._n_obs[child] = lab.shape[0]
            if lab.size and (lab.min() < 0 or lab.max() >= self.n):
                raise ModelPatternError(
                    f"{child.name!r} uses rows {rv.name}[c] with labels c from {lab.min()} to "
                    f"{lab.max()}, but {rv.name!r} has {self.n} rows: give {rv.name!r} one row "
                    "per possible label (e.g. l_max rows for a pmi.CRP(..., l_max=...)).")
        # row of every logp term of the children built by boolean-mask indexing (missing data)
        self.entry_rows = {}
        masks = {}
        self.problem = None  # why the likelihood cannot be split by rows, found on the way
        for child in self.children:
            try:
                rows = masked_entry_rows(child, rv, model, self._n_obs[child], self.who)
            except ModelPatternError as err:
                if "first axis" not in str(err):
                    raise
                self.problem = err
                continue
            if rows is not None:
                self.entry_rows[child.name] = rows
                masks[child] = _entry_mask(child, rv, model, who)
        _check_finite_data(model, self.children, masks, who)
        self.terms = model.logp(vars=self.children, sum=False)
        if not any(t.ndim == 0 or t.type.shape[0] != 0 for t in self.terms):
            raise ModelPatternError(
                f"The logps of {self.names} have no terms; nothing to condition {rv.name!r} on.")
        self.graph = self._fn = None

    def compile(self, example="pm.Normal('X', mu=Z @ A, ...) or pm.Bernoulli('X', "
                              "logit_p=Z @ A, ...)"):
        """Compile the per-row log-likelihood (:attr:`graph`, of the model's value variables,
        and the point function behind :meth:`__call__`): each child's element-wise logp
        reduced over all but its observation axis, its terms attributed to rows through
        PyMC's imputation mask and the labels of ``Z[c]``.  ``example`` ends the message for a
        child whose logp is one scalar."""
        if self.problem is not None:
            raise self.problem
        rows = []
        for child, term in zip(self.children, self.terms, strict=True):
            if term.ndim == 0:
                raise ModelPatternError(
                    f"The logp of {child.name!r} does not factorise over the rows of "
                    f"{self.rv.name!r} (it is one scalar). {self.who} needs a likelihood whose "
                    f"element-wise logp has the observation axis first, e.g. {example}.")
            if term.type.shape[0] == 0:
                # no terms, e.g. the imputed part of a multivariate PartialObservedRV, whose
                # logp PyMC counts in the full per-row logp of the observed part
                continue
            # term i of a masked child belongs to row entry_rows[i] (summed per row)
            term = per_row(term, self._n_obs[child], self.entry_rows.get(child.name))
            if child.name in self.labels:
                # observation n belongs to row c[n] of Z: sum the observations of each row
                term = pt.inc_subtensor(pt.zeros(self.n, dtype=term.dtype)[self._indices[child]],
                                        term)
            rows.append(term)
        self.graph = pt.add(*rows) if len(rows) > 1 else rows[0]
        self._fn = compile_point_fn(self.model, self.graph, compile_kwargs=self.compile_kwargs)
        return self

    def __call__(self, point):
        """The ``N`` row log-likelihoods at ``point``."""
        return self._fn(point)

    def at(self, trial, value):
        """The row log-likelihoods (floats) with ``rv`` at ``value`` (``trial`` is updated to
        hold it)."""
        trial[self.name] = value
        return np.asarray(self._fn(trial), dtype=float)

    def total_fn(self):
        """A point function of the whole log-likelihood of the children (for entry-wise updates
        when it does not factorise over the rows)."""
        terms = self.terms
        total = pt.add(*[t.sum() for t in terms]) if len(terms) > 1 else terms[0].sum()
        return compile_point_fn(self.model, total, compile_kwargs=self.compile_kwargs)

    def rows_seen(self, point):
        """The rows of ``rv`` that some child's observations use at ``point`` (sorted), or
        ``None`` when a child sees every row (no labels): with ``Z = M[c]`` the categories that
        hold an observation, whose features are the ones the likelihood uses."""
        if not self.labels or any(c.name not in self.labels for c in self.children):
            return None
        return np.unique(np.concatenate([np.asarray(fn(point)).ravel()
                                         for fn in self.labels.values()]))

    def irregular_rows(self, point, most=10):
        """Up to ``most`` rows (of ``rv``) per masked child whose entries are split unusually
        between the imputation's parts (rows with missing entries)."""
        out = set()
        for name, entry_rows in self.entry_rows.items():
            counts = np.bincount(entry_rows)
            rows = np.flatnonzero(counts != np.bincount(counts).argmax())[:most]
            if name in self.labels:  # observations -> their rows of Z
                rows = np.asarray(self.labels[name](point))[rows]
            out.update(rows.tolist())
        return out

    def check_factorisation(self, point, rows, change, what, needs, axis="row"):
        """Raise :class:`ModelPatternError` unless ``change(value, r)`` (a changed copy of
        ``rv``'s value in row ``r``) changes only row ``r``'s term, for each of ``rows``;
        ``what`` names the rows in messages (e.g. "row"), ``needs`` ends them.  A likelihood
        that cannot be evaluated at ``point`` raises :class:`DataError`; one that does not
        reduce to one term per row raises :class:`ModelPatternError`."""
        try:
            ll = np.asarray(self._fn(point))
        except ValueError as err:  # e.g. observed data of another shape than their mean
            raise DataError(
                f"The element-wise logp of {self.names} cannot be evaluated at the initial "
                f"point ({err}). Check that the observed data have the shape of their "
                "likelihood's parameters (e.g. of Z @ A).") from err
        if ll.shape != (self.n,):
            raise ModelPatternError(
                f"The element-wise logp of {self.names} reduces to shape {ll.shape}, not one "
                f"term per {axis} of {self.name!r} ({self.n},). {self.who} needs the "
                "observation axis first.")
        for r in rows:
            ll2 = np.asarray(self._fn({**point, self.name: change(point[self.name], r)}))
            check_one_row_changed(ll, ll2, r, f"Changing {what} {r} of {self.name!r}",
                                  self.names, needs)

    def check_matrix_factorisation(self, point):
        """:meth:`check_factorisation` for a binary matrix ``Z``: ``z_r0`` flipped in the first
        and last rows and in up to 10 rows with missing entries, at ``point`` with its
        floating values perturbed (:func:`perturbed_point`) and the other binary matrices of
        the model (not children of ``Z``, e.g. ``C`` beside ``M`` in ``Z = 1[C M > 0]``) all
        ones, so that a row of ``Z`` seen through them reaches every observation (at their
        zero start it reaches none, and a non-factorising likelihood would pass)."""
        point = perturbed_point(point)
        children = set(self.children)
        for rv in self.model.free_RVs:
            if rv is not self.rv and rv not in children and isinstance(rv.owner.op,
                                                                       BINARY_MATRIX_OPS):
                name = self.model.rvs_to_values[rv].name
                point[name] = np.ones_like(point[name])
        rows = sorted({0, self.n - 1} | set(sorted(self.irregular_rows(point))[:10]))

        def flip(value, r):
            Z = np.array(value, copy=True)
            Z[r, 0] = 1 - Z[r, 0]
            return Z

        self.check_factorisation(point, rows, flip, "row",
                                 f"the rows of Z, which {self.who} needs")
