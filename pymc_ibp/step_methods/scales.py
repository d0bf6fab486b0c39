"""Exact updates of the noise and feature scales of a linear-Gaussian IBP model (Doshi-Velez 2009,
§5.1; slice sampling of Neal 2003).

Given ``Z`` and ``A`` the scales enter the model only through

    X | Z, A, σx ~ N(ZA, σx²)  (all N·D entries, imputed ones included)  and
    A | σa ~ N(0, σa²)          (all K_max·D entries, empty slots included),

so their conditionals need only two sufficient statistics,

    log p(σx | ·) = log p(σx) - ND log σx - SSE/(2σx²),     SSE = ‖X - ZA‖²,
    log p(σa | ·) = log p(σa) - K_max D log σa - ‖A‖²/(2σa²).

With an inverse-gamma prior on the variance these are conjugate; for any other prior (e.g.
``pm.HalfNormal``) we slice-sample the transformed value (Neal 2003, stepping out and
shrinkage) on this exact 1-D log density, which costs a few scalar evaluations instead of the
full-model gradients NUTS would need.  The prior term is the model's own logp of the scale
(with the transform's Jacobian), so any prior works.
"""

from __future__ import annotations

import math

import numpy as np
import pymc as pm
import pytensor
import pytensor.tensor as pt
from pymc.step_methods.compound import BlockedStep, Competence, StepMethodState
from pymc.step_methods.state import dataclass_state
from pymc.util import get_random_generator, get_value_vars_from_user_vars
from pytensor.graph.traversal import ancestors

from pymc_ibp import kernels
from pymc_ibp._pytensor_utils import compile_point_fn
from pymc_ibp.exceptions import DataError, ModelPatternError
from pymc_ibp.kernels.gaussian import data_start
from pymc_ibp.kernels.slice import adapt_width, slice_sample
from pymc_ibp.matching.graph import side_by_side
from pymc_ibp.matching.linear_gaussian import matched_models
from pymc_ibp.step_methods.potentials import refuses_potentials
from pymc_ibp.step_methods.stats import one_step_per_matrix, per_matrix_stats

__all__ = ["IBPScaleSlice"]


def _match_scale(model, rv):
    """Return ``(spec, role, blocks)`` with role ``"sigma_x"`` or ``"sigma_a"`` if ``rv`` is a
    scalar scale of one or more column blocks (observed matrices sharing ``Z``) of a
    linear-Gaussian IBP model, and enters the model nowhere else."""
    for spec in matched_models(model):
        noise = [i for i, b in enumerate(spec.blocks) if rv is b.sigma_x]
        prior = [i for i, b in enumerate(spec.blocks) if rv is b.sigma_a]
        if noise and not prior:
            role, blocks = "sigma_x", noise
            allowed = {r for i in noise for r in spec.blocks[i].like_rvs}
        elif prior and not noise:
            role, blocks = "sigma_a", prior
            allowed = {spec.blocks[i].a_rv for i in prior}
        else:
            continue
        others = [r for r in model.basic_RVs if r is not rv]
        users = {r for r in others if rv in set(ancestors(r.owner.inputs, blockers=others))}
        if users <= allowed:
            return spec, role, blocks
    raise ModelPatternError(
        f"{rv.name!r} is not the sigma_x or sigma_a (a scalar used nowhere else) of a "
        "linear-Gaussian pmi.IBP model."
    )


def _group_by_matrix(model, vars_):
    """The scale value variables ``vars_`` grouped by the feature matrix they belong to (the
    scales of no matched model form one more group, which fails in ``__init__``)."""
    groups = {}
    for v in get_value_vars_from_user_vars(vars_, model):
        try:
            key = _match_scale(model, model.values_to_rvs[v])[0].z_rv.name
        except ModelPatternError:
            key = None
        groups.setdefault(key, []).append(v)
    return list(groups.values())


@dataclass_state
class IBPScaleSliceState(StepMethodState):
    """The adapted slice widths and their tuning counts (one per scale), ``tune``, whether
    the chain's data-driven start was applied, and which scales still wait for their start
    from the drawn ``Z`` and ``A`` (at their first update)."""

    widths: np.ndarray
    n_tuned: np.ndarray
    tune: bool
    started: bool
    pending: np.ndarray


@refuses_potentials
class IBPScaleSlice(BlockedStep):
    r"""Exact slice-sampling update of ``sigma_x`` / ``sigma_a`` in a linear-Gaussian IBP model.

    Targets :math:`p(\sigma_x\mid X, Z, A) \propto p(\sigma_x)\,\sigma_x^{-ND}
    e^{-\|X-ZA\|^2/2\sigma_x^2}` and :math:`p(\sigma_a\mid A) \propto p(\sigma_a)
    \sigma_a^{-K_{max}D} e^{-\|A\|^2/2\sigma_a^2}` (Doshi-Velez 2009, §5.1; slice sampling of Neal
    2003) by univariate slice sampling on
    the transformed value, with the prior (and Jacobian) taken from the model.  Chosen
    automatically for the scales of models that :class:`AcceleratedGibbs` handles.  A scale
    without a user's initial value starts from the data's spread; its updates begin once the
    step of ``Z`` and ``A`` has drawn ``A`` (given PyMC's all-zero start of ``A``, ``σa`` would
    collapse to 0), and its first update starts from the value its conditional's likelihood
    term favours given the drawn ``Z`` and ``A`` (``σa`` the root mean square of ``A``, ``σx``
    that of ``X - ZA``): one slice update from a start far out in the tails lands anywhere in
    a slice that wide (from the data's spread, ``σa`` went to 0.8–27 on block images whose
    features are of size 0.5).

    Parameters
    ----------
    vars : list
        One or both scale variables.
    width : float, default 1.0
        Initial slice width on the transformed scale (adapted during tuning).
    """

    name = "ibp_scale_slice"
    stats_dtypes_shapes = {"ibp_scale_evals": (np.int64, [])}
    _state_class = IBPScaleSliceState

    def __new__(cls, *args, **kwargs):
        # with the scales of several feature matrices: one instance per matrix, so that each
        # one's ibp_scale_evals is attributable to its matrix
        split = one_step_per_matrix(cls, args, kwargs, _group_by_matrix)
        return split if split is not None else super().__new__(cls, *args, **kwargs)

    def __init__(self, vars, *, model=None, rng=None, initial_point=None, compile_kwargs=None,
                 blocked=True, width=1.0):
        model = pm.modelcontext(model)
        self.vars = get_value_vars_from_user_vars(vars, model)
        ip = model.initial_point() if initial_point is None else initial_point
        self.entries = []
        for value_var in self.vars:
            rv = model.values_to_rvs[value_var]
            if rv.ndim != 0:
                raise ModelPatternError(f"{rv.name!r} must be a scalar.")
            spec, role, blocks = _match_scale(model, rv)
            [prior] = model.logp(vars=[rv], jacobian=True, sum=False)
            prior_fn = compile_point_fn(model, prior, compile_kwargs=compile_kwargs)
            transform = model.rvs_to_transforms.get(rv)
            u = pt.dscalar("u")
            back = transform.backward(u, *rv.owner.inputs) if transform is not None else u
            back_fn = pytensor.function([u], back, mode="FAST_COMPILE", on_unused_input="ignore")
            fwd = transform.forward(u, *rv.owner.inputs) if transform is not None else u
            fwd_fn = pytensor.function([u], fwd, mode="FAST_COMPILE", on_unused_input="ignore")
            # data-driven start (used when the user gave no initial value): the spread of the
            # column-centred data of its blocks, half of it for the noise
            cols = spec.cols
            # sharded data: the start from the shards' column sums (at the first step, when
            # pmi.DataParallelGibbs has loaded them on its workers)
            start_u = None if spec.sharded is not None else float(fwd_fn(max(data_start(
                side_by_side([spec.blocks[i].X for i in blocks]), role), 1e-3)))
            self.entries.append(dict(
                start_u=start_u, fwd_fn=fwd_fn, default_u=float(ip[value_var.name]),
                has_initval=model.rvs_to_initial_values.get(rv) is not None,
                name=value_var.name, rv_name=rv.name, role=role, prior_fn=prior_fn, back_fn=back_fn,
                z_name=model.rvs_to_values[spec.z_rv].name, spec=spec,
                blocks=[(int(cols[i]), int(cols[i + 1]),
                         model.rvs_to_values[spec.blocks[i].a_rv].name,
                         (model.rvs_to_values[spec.blocks[i].missing_rv].name
                          if spec.blocks[i].missing_rv is not None else None),
                         spec.blocks[i].missing_mask) for i in blocks],
                X=None if spec.sharded is not None else spec.filled(),  # read only
                sharded=spec.sharded,
                offset_fn=(spec.compile_offset(model, compile_kwargs=compile_kwargs)
                           if role == "sigma_x" else None),
            ))
        self.entries = tuple(self.entries)  # fixed at construction; the changing state is below
        self._stat_names = per_matrix_stats(self, model, self.entries[0]["spec"].z_rv.name)
        self.init_width = float(width)
        self.widths = np.full(len(self.entries), self.init_width)
        self.n_tuned = np.zeros(len(self.entries), dtype=np.int64)
        self.rng = get_random_generator(rng)
        self.tune = False
        self.started = False
        self.pending = np.zeros(len(self.entries), dtype=bool)

    def _suff(self, e, point):
        """``(count, sum of squares)`` of the Gaussian terms the scale governs (over its
        blocks); ``None`` when it cannot be formed yet (sharded data before
        :class:`~pymc_ibp.DataParallelGibbs` published the statistics of any ``Z``)."""
        if e["sharded"] is not None and e["role"] == "sigma_x":
            return self._sharded_suff(e, point)
        count, ss = 0, 0.0
        offset = None if e["offset_fn"] is None else e["offset_fn"](point)  # a RowOffset
        Z = (None if e["role"] == "sigma_a" else
             np.ascontiguousarray(e["spec"].z_value(point, e["z_name"]), dtype=np.int8))
        for c0, c1, a_name, miss_name, mask in e["blocks"]:
            A = np.ascontiguousarray(point[a_name], dtype=np.float64)
            if e["role"] == "sigma_a":
                count, ss = count + A.size, ss + float(np.sum(A * A))
                continue
            X, xc = e["X"], c0
            if mask is not None:  # this block's columns with the imputed values filled in
                X, xc = np.array(X[:, c0:c1]), 0
                X[mask] = point[miss_name]
            if offset is None:
                off, oc, rows = np.zeros((1, c1 - c0)), 0, kernels.NO_ROWS
            else:  # b[group]: the groups' table and every row's group
                off, oc = np.ascontiguousarray(offset.table), c0
                rows = kernels.NO_ROWS if offset.rows is None else offset.rows
            ss += kernels.residual_sq_sum(X, xc, Z, A, off, oc, rows)
            count += X.shape[0] * (c1 - c0)
        return count, ss

    @staticmethod
    def _sharded_suff(e, point):
        """``‖X - ZA‖²`` of sharded data from the statistics of ``Z`` that
        :class:`~pymc_ibp.DataParallelGibbs` publishes, ``‖X‖² - 2 tr(Aᵀ ZᵀX) + tr(Aᵀ ZᵀZ A)``
        (no pass over the data)."""
        data = e["sharded"]
        [(c0, c1, a_name, _, _)] = e["blocks"]
        stats = data.statistics_at(e["spec"].z_value(point, e["z_name"]))
        if stats is None:
            return None
        G, RX = stats
        A = np.asarray(point[a_name], dtype=np.float64)
        colsq = np.asarray(data.summary().colsq)[c0:c1]
        ss = float(colsq.sum() - 2.0 * np.sum(A * RX[:, c0:c1]) + np.sum(A * (G @ A)))
        return data.shape[0] * (c1 - c0), max(ss, 0.0)

    def _start(self, point):
        """Data-driven start of each scale the user gave no initial value for (PyMC's default
        start is the prior's support point, which can be far from the data's scale): the
        spread ``s`` of the column-centred data for ``sigma_a`` and ``s/2`` for ``sigma_x``,
        until its first update starts it from the drawn ``Z`` and ``A`` (``pending``)."""
        self.started = True
        for j, e in enumerate(self.entries):
            if not e["has_initval"] and float(point[e["name"]]) == e["default_u"]:
                self.pending[j] = True
                start_u = e["start_u"]
                if start_u is None:  # sharded data: the spread from the shards' column sums
                    start = data_start(None, e["role"], e["sharded"].summary().spread)
                    start_u = float(e["fwd_fn"](max(start, 1e-3)))
                point[e["name"]] = np.asarray(start_u, dtype=point[e["name"]].dtype)

    def step(self, point):
        point = dict(point)
        if not self.started:
            self._start(point)
        evals = 0
        for j, e in enumerate(self.entries):
            if self._a_at_zero_start(e, point):
                continue  # this update is left out (identity) until A has been drawn
            suff = self._suff(e, point)
            if suff is None:  # nothing to condition on yet: this update is left out (identity)
                continue
            count, ss = suff
            name = e["name"]
            dtype = point[name].dtype
            if e["role"] == "sigma_x" and count > 0 and not ss > 0:
                rv_name = e["rv_name"]
                raise DataError(
                    f"The residuals X - Z @ A of the data whose noise is {rv_name!r} are all "
                    f"exactly 0 (e.g. data that are 0 everywhere): the conditional of "
                    f"{rv_name!r} is then improper, p(σ) ∝ prior · σ^-{count:g}, and piles up "
                    f"at 0. Fix {rv_name!r} at a value (e.g. sigma=0.1 in the likelihood) or "
                    "check the data.")
            if self.pending[j]:  # the scale's own start: its likelihood term's maximiser
                self.pending[j] = False
                start = max(math.sqrt(ss / count), 1e-3)
                point[name] = np.asarray(float(e["fwd_fn"](start)), dtype=dtype)

            def logp(u, e=e, count=count, ss=ss, name=name, dtype=dtype):
                sigma = float(e["back_fn"](u))
                if not sigma > 0:
                    return -np.inf
                pt_ = {**point, name: np.asarray(u, dtype=dtype)}
                prior = float(e["prior_fn"](pt_))
                return prior - count * math.log(sigma) - ss / (2.0 * sigma * sigma)

            u0 = float(point[name])
            u1, n = self._slice(logp, u0, self.widths[j], repr(name))
            evals += n
            if self.tune:  # adapt the width to the typical move (Neal 2003 §4.1)
                self.n_tuned[j] += 1
                self.widths[j] = adapt_width(self.widths[j], u1 - u0, self.n_tuned[j])
            point[name] = np.asarray(u1, dtype=dtype)
        return point, [{self._stat_names["ibp_scale_evals"]: evals}]

    @staticmethod
    def _a_at_zero_start(e, point):
        """Whether every feature matrix of the scale's blocks is exactly zero: PyMC's start of
        ``A``, before the step of ``Z`` and ``A`` has run (it draws every slot, empty ones
        from the prior, so a drawn ``A`` is never all zero).  That happens at a chain's first
        iteration when this step runs first (the scales declared before ``Z``): an update there
        would condition on ``A = 0``, where ``σa``'s conditional piles up at 0, and ``A``,
        drawn next at that scale, would keep it there (the features vanish and the chain does
        not recover)."""
        return not any(np.any(point[a_name]) for _, _, a_name, _, _ in e["blocks"])

    def _slice(self, logp, x0, w, name):
        return slice_sample(self.rng, logp, x0, w, name=name)

    def setup_chain(self, rng, tune, draws):
        super().setup_chain(rng, tune, draws)
        self.tune = bool(tune)
        self.started = False
        self.pending[:] = False
        # per-chain adaptation: chains must not share tuning history
        self.widths = np.full(len(self.entries), self.init_width)
        self.n_tuned = np.zeros(len(self.entries), dtype=np.int64)

    def stop_tuning(self):
        self.tune = False

    def reset_tuning(self):
        pass

    @staticmethod
    def competence(var, has_grad):
        if var.ndim != 0 or var.dtype not in ("float64", "float32"):
            return Competence.INCOMPATIBLE
        try:
            _match_scale(pm.modelcontext(None), var)
        except (TypeError, ModelPatternError):
            return Competence.INCOMPATIBLE
        return Competence.IDEAL
