r"""Gibbs / Metropolis updates of the sticks and the Gaussian processes of a dependent IBP.

For ``Z ~ pmi.DependentIBP(b, g, ρ, index)`` (Williamson, Orbanz & Ghahramani 2010) with
``b ~ pmi.IBPStickBreaking(α)`` and ``g_k ~ pm.MvNormal(μ_k, Σ_k)``, one
:class:`DependentIBPGibbs` step does, in this order (the partially collapsed order of the
paper's §4; van Dyk & Park 2008):

1. **sticks** ``b_k | b_{-k}, Z, g`` with ``h`` integrated out (App. eq. 11 of the paper; its
   eq. 6 omits the ordering and the ``b_K^α`` term): random-walk Metropolis in
   ``η_k = Φ⁻¹(b_k)`` with the Jacobian ``φ(η_k)``, target

   .. math:: \frac{b_K^{\alpha}}{b_k}\prod_{l}\Phi(u_{kl})^{n^1_{kl}}\,
             \Phi(-u_{kl})^{n^0_{kl}}\ \mathbb 1[b_{k+1}\le b_k\le b_{k-1}],

   ``n¹_kl`` / ``n⁰_kl`` the rows at GP location ``l`` with / without feature ``k``; the step
   size of each stick adapts towards 40% acceptance during tuning;
2. **auxiliary** ``h_nk | z, b, g``: ``N(g_k(l_n), ρ²)`` truncated below the threshold
   ``b̃_k(l_n)`` when ``z_nk = 1`` and above it when ``z_nk = 0``, for every entry, by the
   tail-safe sampler of :mod:`pymc_ibp.kernels.truncnorm`;
3. **processes** ``g_k | h``: conjugate Gaussian.  Only the location means
   ``h̄_kl ~ N(g_k(l), ρ²/N_l)`` matter, and the draw uses Matheron's rule (pathwise
   conditioning): a prior draw ``f ~ N(μ, Σ)`` is moved by
   ``Σ_{·O}(Σ_{OO} + ρ² diag(1/N_O))^{-1}(h̄_O - f_O - ε_O)``, ``ε_O ~ N(0, ρ²/N_O)``, over
   the locations ``O`` that have rows.  It needs Cholesky factors of ``Σ`` and of the
   well-conditioned ``Σ_OO + ρ²/N_O`` only, never ``Σ⁻¹``, and locations without rows are
   drawn from the GP conditional in the same pass.  When ``g`` is a sum of processes (eq. 4's
   general hierarchy: a shared process per feature plus one per item), each is drawn in turn
   given ``h`` minus the others.

Between 1 and 2, when ``Z`` is a free variable whose likelihood factorises over rows, the
**joint moves** update each feature's processes and its column of ``Z`` together: with
``Δ_n`` the row log-likelihood ratio of ``z_nk = 1`` to ``0`` (the model's own row
likelihood, compiled as in :class:`pymc_ibp.IBPGibbs`), ``g_k`` takes an elliptical slice
sampling update (Murray, Adams & MacKay 2010) under
``Π_n (Φ(u_nk) e^{Δ_n} + Φ(-u_nk))`` (the column summed out), then ``z_·k | g_k`` is drawn
exactly.  Without them ``Z`` and ``g`` lock each other when ``ρ`` is small against the GP
amplitude.

``Z`` itself is also updated by another step, with ``h`` integrated out as well (per-entry prior
log-odds ``log Φ(u) - log Φ(-u)``): :class:`pymc_ibp.AcceleratedGibbs` for a linear-Gaussian
likelihood, :class:`pymc_ibp.IBPGibbs` for any other.  Because neither the ``Z`` step nor the
sticks condition on ``h``, and ``h`` is drawn right before ``g``, the sweep leaves the joint
posterior of ``(b, Z, g)`` invariant in whichever order PyMC runs the steps.  The GP length
scales are sampled by :class:`pymc_ibp.GPLengthScaleHMC` given ``g``; the IBP mass by
:class:`pymc_ibp.IBPAlphaGibbs` given the sticks.

Cost per sweep: ``O(N K)`` for ``h``, ``O(K M)`` for the sticks and ``O(K T³)`` for the
processes (``T`` covariate values per process, ``M`` GP locations in all); the joint moves add
``2K`` evaluations of the row likelihood and ``O(N)`` per slice evaluation (a few per
feature).

References
----------
S. Williamson, P. Orbanz and Z. Ghahramani (2010). Dependent Indian buffet processes. *AISTATS
2010*, JMLR W&CP 9, 924-931 (§4 and Appendix A).

I. Murray, R. P. Adams and D. J. C. MacKay (2010). Elliptical slice sampling. *AISTATS 2010*,
JMLR W&CP 9, 541-548.

D. A. van Dyk and T. Park (2008). Partially collapsed Gibbs samplers: theory and methods.
*Journal of the American Statistical Association* 103(482), 790-796.

J. T. Wilson, V. Borovitskiy, A. Terenin, P. Mostowsky and M. P. Deisenroth (2020). Efficiently
sampling functions from Gaussian process posteriors. *ICML 2020* (Matheron's rule).
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
from pytensor.tensor.random.basic import MvNormalRV
from scipy.special import expit as sp_expit
from scipy.special import log_ndtr as sp_log_ndtr

from pymc_ibp._numba_utils import interrupt_safe
from pymc_ibp._pytensor_utils import compile_point_fn
from pymc_ibp.distributions.dependent import (
    dibp_support_point,
    dibp_threshold,
    sticks_from_z,
)
from pymc_ibp.distributions.stick_breaking import IBPStickBreakingRV
from pymc_ibp.exceptions import ModelPatternError
from pymc_ibp.init.given import StartDefaults
from pymc_ibp.kernels.gp import (
    draw_h_sums,
    elliptical_slice,
    gp_cholesky,
    gp_conditional_draw,
    marginal_z_loglik,
    stick_sweep,
)
from pymc_ibp.matching.dependent_ibp import match_dependent_ibp, triples
from pymc_ibp.matching.graph import observed_data
from pymc_ibp.matching.potentials import potential_names, potentials_on
from pymc_ibp.matching.rows import RowLikelihood
from pymc_ibp.step_methods.potentials import refuses_potentials

__all__ = ["DependentIBPGibbs"]


_TARGET_ACCEPT = 0.4


# --------------------------------------------------------------------------------------------
# numba kernels
# --------------------------------------------------------------------------------------------


# --------------------------------------------------------------------------------------------
# model matching
# --------------------------------------------------------------------------------------------


@dataclass_state
class DependentIBPGibbsState(StepMethodState):
    """``rng``, the adapted stick step sizes (log scale), the adaptation count, whether the
    chain is still tuning, whether it has had its first sweep, the kept ``h`` (empty unless
    ``keep_h``), the chain's default start of ``Z`` (empty unless it started there), whether
    the user gave the chain's start of the sticks or processes, and whether they have been
    fitted to the first ``Z`` that differs from the default start."""

    log_step: np.ndarray
    adapt_iter: int
    tune: bool
    started: bool
    h: np.ndarray
    z_first: np.ndarray
    bg_given: bool
    fitted_start: bool


@refuses_potentials
class DependentIBPGibbs(BlockedStep):
    r"""Sticks, auxiliary ``h`` and Gaussian processes of a dependent IBP (Williamson, Orbanz &
    Ghahramani 2010, §4): Metropolis in ``Φ⁻¹(b)`` space for the sticks, the exact truncated
    Gaussian for ``h`` and the conjugate Gaussian for ``g`` (details and cost: module
    docstring; docs page *Step methods → pmi.DependentIBPGibbs*).  Assigned automatically to
    the sticks and the processes of a :class:`pymc_ibp.DependentIBP`.

    Parameters
    ----------
    vars : list
        The sticks (optional) and the processes ``g`` of one dependent IBP.
    joint_moves : bool, optional
        Before the data-augmentation update of ``g``, move each feature's processes and its
        column of ``Z`` jointly: ``g_k`` by elliptical slice sampling with ``z_·k`` summed out
        (the row likelihood of ``z_nk = 1`` against ``0`` from the model's own logp, as in
        :class:`pymc_ibp.IBPGibbs`), then ``z_·k | g_k`` exactly.  Without it, ``Z`` and ``g``
        lock each other when ``ρ`` is small against the GP amplitude (each ``z_nk`` is then
        almost fixed by ``g_k``).  ``True`` turns them on (and raises if ``Z`` is not a free
        variable whose likelihood factorises over its rows), ``None`` turns them on where
        they can be done.  Default ``False``: they cost ``2K`` evaluations of the row
        likelihood per sweep, about 20 times the rest of this step at ``N = 10^5`` (``K =
        20``, ``D = 64``; ``benchmarks/dibp_speed.py``), and have not yet been shown to
        improve a fit (docs: the dependent IBP's tracking experiment).  A chain whose ``Z`` is
        PyMC's default start skips them in its first sweep, so that the ``Z`` step's start
        search sees that start (:class:`pymc_ibp.AcceleratedGibbs`, ``init_sweeps``).
    keep_h : bool, default False
        Keep the latest auxiliary ``h`` (``N x K``) in ``step.h`` (and in the step's sampling
        state).  PyMC's default trace backend records scalar sample stats only, so ``h`` is
        not written to the trace.
    stick_step : float, default 0.5
        Initial random-walk step in ``Φ⁻¹(b)`` (adapted per stick during tuning).
    start_rounds : int, default 20
        A chain that starts at PyMC's default ``Z`` and whose ``Z`` step then replaces it
        during tuning (the start search of :class:`pymc_ibp.AcceleratedGibbs`) gets its sticks
        set to that ``Z``'s feature frequencies (made decreasing) and this many rounds of the
        exact ``h`` and ``g`` updates given it, once (:meth:`_fit_start`; tuning only, and
        not when the sticks or processes were given as initial values).  0: the processes
        are left where they are (the sticks are still set).
    """

    name = "ibp_dependent_gibbs"
    default_blocked = True
    _state_class = DependentIBPGibbsState
    stats_dtypes_shapes = {
        "ibp_stick_accept": (np.float64, []),
        "ibp_stick_step": (np.float64, []),
        "ibp_dibp_logp": (np.float64, []),
        "ibp_dibp_joint_flips": (np.int64, []),
        "ibp_dibp_ess_evals": (np.float64, []),
    }

    def __init__(self, vars, *, model=None, rng=None, initial_point=None, compile_kwargs=None,
                 blocked=True, joint_moves=False, keep_h=False, stick_step=0.5,
                 start_rounds=20):
        model = pm.modelcontext(model)
        value_vars = get_value_vars_from_user_vars(vars, model)
        rvs = [model.values_to_rvs[v] for v in value_vars]
        matches = [match_dependent_ibp(model, rv) for rv in rvs]
        if len({m[0] for m in matches}) != 1:
            raise ModelPatternError("DependentIBPGibbs updates the sticks and processes of one "
                                    "pmi.DependentIBP at a time; got variables of several.")
        z_rv, sticks_rv, comps = matches[0]
        self.update_sticks = sticks_rv is not None and sticks_rv in rvs
        comps = [c for c in comps or [] if c.rv in rvs]
        missing = [c.rv.name for c in matches[0][2] or [] if c.rv not in rvs]
        if comps and missing:
            raise ModelPatternError(f"DependentIBPGibbs updates all processes of {z_rv.name!r} "
                                    f"together; {missing} were not given.")
        self.update_g = bool(comps)
        self.vars = value_vars
        ip0 = model.initial_point()
        ip = ip0 if initial_point is None else initial_point

        # whether the user gave a chain's start (its own initval= or pm.sample's initvals,
        # which may differ between chains while PyMC builds the steps at chain 0's start):
        # told per chain at its first sweep.  Z, so that its first sweep's joint moves are not
        # left out; the sticks or processes, kept as they are (no fitted start)
        bg_rvs = ([sticks_rv] if self.update_sticks else []) + [c.rv for c in comps]
        self._bg_names = [model.rvs_to_values[rv].name for rv in bg_rvs]
        z_rvs = [] if z_rv in model.observed_RVs else [z_rv]
        self._starts = StartDefaults(model, z_rvs + bg_rvs, initial_point, ip0)
        sticks, g_in, g_var, rho, index = z_rv.owner.inputs[2:]
        outs = [sticks, g_in, g_var, rho, index]
        self._comps = []
        for c in comps:
            name = model.rvs_to_values[c.rv].name
            shape = np.shape(ip[name])
            self._comps.append({"name": name, "shape": shape, "T": shape[-1],
                                "n_gp": int(np.prod(shape[1:-1], dtype=int)), "index": c.index})
            outs += [c.rv, *c.rv.owner.inputs[2:4]]  # value, mu, cov
        if z_rv in model.observed_RVs:
            self.z_name, self._z_data = None, np.asarray(observed_data(model.rvs_to_values[z_rv]))
        else:
            self.z_name, self._z_data = model.rvs_to_values[z_rv].name, None
        alpha = sticks_rv.owner.inputs[2] if sticks_rv is not None else pt.constant(1.0)
        self._params = compile_point_fn(model, model.replace_rvs_by_values([alpha, *outs]),
                                        compile_kwargs=compile_kwargs)
        self.k_max = int(np.asarray(self._params(ip)[1]).shape[0])
        if self.update_sticks:
            self.sticks_name = model.rvs_to_values[sticks_rv].name
            transform = model.rvs_to_transforms.get(sticks_rv)
            x = pt.dvector("x")
            fwd = transform.forward(x, *sticks_rv.owner.inputs) if transform else x
            self._sticks_fwd = pytensor.function([x], fwd, mode="FAST_COMPILE")
        self._z_rows = self._row_likelihood(model, z_rv, ip, joint_moves, compile_kwargs)
        self.keep_h = bool(keep_h)
        self.h = np.empty((0, 0))
        if not stick_step > 0:
            raise ValueError(f"stick_step must be > 0; got {stick_step!r}.")
        self.stick_step = float(stick_step)
        self.log_step = np.full(self.k_max, math.log(stick_step))
        self.adapt_iter = 0
        self.tune = True  # set by PyMC's stop_tuning()
        self.started = False  # whether this chain has had its first sweep
        self.z_first = np.empty((0, 0), dtype=np.int8)
        self.bg_given = False
        self.fitted_start = False
        if start_rounds < 0:
            raise ValueError(f"start_rounds must be >= 0; got {start_rounds!r}.")
        self.start_rounds = int(start_rounds)
        self.rng = get_random_generator(rng)

    @interrupt_safe
    def step(self, point):
        alpha, b, g_flat, g_var, rho, index, *gp = self._params(point)
        b = np.array(b, dtype=np.float64)
        rho = float(rho)
        index = np.ascontiguousarray(index, dtype=np.int64)
        Z = self._z_data if self._z_data is not None else np.asarray(point[self.z_name])
        g_flat = np.ascontiguousarray(g_flat, dtype=np.float64)
        g_var = np.ascontiguousarray(np.broadcast_to(g_var, g_flat.shape), dtype=np.float64)
        n_loc = np.bincount(index, minlength=g_flat.shape[1]).astype(np.int64)
        new = dict(point)
        acc = np.zeros(self.k_max, dtype=np.int64)
        # a chain whose Z is PyMC's default start (each entry at its more probable value) leaves
        # its first joint moves out, so that the Z step's start search sees that start (the
        # joint moves would turn it into what looks like a user's Z); initialisation only
        first, self.started = not self.started, True
        if first:  # this chain's start: the sticks and processes are this step's alone
            self.bg_given = any(self._starts.given(point, n) for n in self._bg_names)
            if self.z_name is not None:  # a Z step before this one may have moved Z already

                def looks_default(value):
                    return self._is_default_z(value, b, g_flat, g_var, rho, index)

                if (not self._starts.given(point, self.z_name, looks_default)
                        and looks_default(Z)):
                    self.z_first = np.array(Z, dtype=np.int8)
        skip_joint = first and self._z_rows is not None and self.z_first.size > 0
        if (not first and self.tune and not self.fitted_start and self.z_first.size
                and not self.bg_given and not np.array_equal(Z, self.z_first)):
            b, g_flat, gp = self._fit_start(point, gp, np.asarray(Z), b, g_flat, g_var, rho,
                                            index, n_loc, new)
        if self.update_sticks:
            n1 = np.zeros(g_flat.shape, dtype=np.int64)
            for k in range(self.k_max):
                n1[k] = np.bincount(index, weights=Z[:, k], minlength=g_flat.shape[1])
            stick_sweep(self.rng, b, g_flat, g_var, rho, n1, n_loc, float(alpha),
                        self.log_step, acc)
            if self.tune:  # Robbins–Monro towards the target acceptance, per stick
                self.adapt_iter += 1
                gain = min(0.5, 5.0 / self.adapt_iter**0.6)
                self.log_step += gain * (acc - _TARGET_ACCEPT)
            new[self.sticks_name] = np.asarray(self._sticks_fwd(b),
                                               dtype=point[self.sticks_name].dtype)
        thr = np.ascontiguousarray(dibp_threshold(b, g_var, rho))
        joint_flips, ess_evals = 0, np.nan
        if self._z_rows is not None and not skip_joint:
            Z = np.array(Z, copy=True)
            g_flat, values, joint_flips, ess_evals = self._joint_moves(point, gp, Z, thr,
                                                                       g_flat, rho, index)
            new[self.z_name] = Z
            gp = list(gp)
            for i, (c, v) in enumerate(zip(self._comps, values, strict=True)):
                new[c["name"]] = v.reshape(c["shape"]).astype(point[c["name"]].dtype)
                gp[3 * i] = new[c["name"]]
        h = np.empty(Z.shape) if self.keep_h else np.empty((0, 0))
        if self.update_g or self.keep_h:
            sums = draw_h_sums(self.rng, np.ascontiguousarray(Z), g_flat, thr, rho, index, h,
                               self.keep_h)
        if self.update_g:
            g_flat = self._draw_g(point, gp, sums, n_loc, rho, new)
        u = (thr - g_flat)[:, index].T / rho
        logp = float(np.where(Z != 0, sp_log_ndtr(u), sp_log_ndtr(-u)).sum())
        stats = {"ibp_stick_accept": float(acc.mean()) if self.update_sticks else np.nan,
                 "ibp_stick_step": float(np.exp(self.log_step).mean()),
                 "ibp_dibp_logp": logp, "ibp_dibp_joint_flips": int(joint_flips),
                 "ibp_dibp_ess_evals": float(ess_evals)}
        if self.keep_h:
            self.h = h
        return new, [stats]

    def _fit_start(self, point, gp, Z, b, g_flat, g_var, rho, index, n_loc, new):
        """Initialisation (tuning only, once per chain): when the chain started at PyMC's
        default ``Z`` and the ``Z`` step has since replaced it (e.g. by the start search of
        :class:`pymc_ibp.AcceleratedGibbs`), set the sticks to that ``Z``'s feature frequencies
        (clipped to [0.01, 0.99], made decreasing) and run ``start_rounds`` rounds of the
        exact ``h | Z, b, g`` and ``g | h`` updates, so that the per-entry prior the next ``Z``
        sweep sees agrees with the ``Z`` it starts from; the chain's sticks and processes are
        otherwise still at their initial values, whose prior switches most features of the
        searched ``Z`` off before they can adapt.  The chained start of the tracking example
        (``examples/dependent_ibp_synthetic.py``: a plain IBP fit, then sticks and processes
        set from its ``Z``) does the same by hand.  Returns the new
        ``(b, g, gp)``; writes them into ``new``."""
        self.fitted_start = True
        if self.update_sticks:
            b = sticks_from_z(Z)
            new[self.sticks_name] = np.asarray(self._sticks_fwd(b),
                                               dtype=point[self.sticks_name].dtype)
        if not self.update_g:
            return b, g_flat, gp
        thr = np.ascontiguousarray(dibp_threshold(b, g_var, rho))
        gp = list(gp)
        Zc = np.ascontiguousarray(Z)
        for _ in range(self.start_rounds):
            sums = draw_h_sums(self.rng, Zc, g_flat, thr, rho, index, np.empty((0, 0)), False)
            g_flat = self._draw_g(point, gp, sums, n_loc, rho, new)
            for i, c in enumerate(self._comps):
                gp[3 * i] = new[c["name"]]
        return b, np.ascontiguousarray(g_flat), gp

    @staticmethod
    def _is_default_z(Z, b, g_flat, g_var, rho, index):
        """Whether ``Z`` is the dependent IBP's support point
        (:func:`pymc_ibp.distributions.dependent.dibp_support_point`) at ``b, g``."""
        return bool(np.array_equal(np.asarray(Z) != 0,
                                   dibp_support_point(b, g_flat, g_var, rho, index) != 0))

    def _row_likelihood(self, model, z_rv, ip, joint_moves, compile_kwargs):
        """The row log-likelihood of ``Z`` for the joint moves (compiled and checked as in
        :class:`pymc_ibp.IBPGibbs`), or ``None``."""
        if joint_moves is False:
            return None
        why = None
        if self.z_name is None:
            why = f"{z_rv.name!r} is observed"
        elif not self.update_g:
            why = "the processes g are not updated by this step"
        elif potentials_on(model, [z_rv]):  # the joint moves change Z: they would drop it
            why = (f"the model's pm.Potential {potential_names(potentials_on(model, [z_rv]))} "
                   f"depends on {z_rv.name!r}, which the joint moves change without it")
        if why is None:
            try:
                rows = RowLikelihood(model, z_rv, np.shape(ip[self.z_name])[0], ip,
                                     compile_kwargs=compile_kwargs,
                                     who="DependentIBPGibbs")
                rows.compile()
                rows.check_matrix_factorisation(ip)
                return rows
            except ModelPatternError as err:
                why = str(err)
        if joint_moves:
            raise ModelPatternError(f"DependentIBPGibbs(joint_moves=True): {why}.")
        return None

    def _joint_moves(self, point, gp, Z, thr, g_flat, rho, index):
        """For each feature ``k`` in random order: elliptical slice sampling of each process
        of ``g_k`` with ``z_·k`` summed out, then ``z_·k | g_k`` (in place in ``Z``).  Returns
        the new ``K x M`` total, the new values of the processes, the number of entries of
        ``Z`` that changed and the mean number of likelihood evaluations per slice update."""
        trial = dict(point)
        values, means, chols = [], [], []
        for c, (value, mu, cov) in zip(self._comps, triples(gp), strict=True):
            shape3 = (self.k_max, c["n_gp"], c["T"])
            values.append(np.array(value, dtype=np.float64).reshape(shape3))
            means.append(np.broadcast_to(np.asarray(mu, dtype=np.float64),
                                         c["shape"]).reshape(shape3))
            cov = np.asarray(cov, dtype=np.float64)
            cov = cov.reshape((1,) * (len(c["shape"]) + 1 - cov.ndim) + cov.shape)
            chols.append((cov.reshape(cov.shape[0], -1, c["T"], c["T"]), {}))
        g_flat = np.array(g_flat, dtype=np.float64, copy=True)
        n = Z.shape[0]
        flips = evals = moves = 0
        # the rows' log-likelihoods at the current Z; the likelihood factorises over rows, so
        # one evaluation with column k flipped in every row gives each row's other option
        cur = self._z_rows.at(trial, Z)
        for k in self.rng.permutation(self.k_max):
            col = Z[:, k].copy()
            Z[:, k] = col == 0
            flipped = self._z_rows.at(trial, Z)
            Z[:, k] = col
            ll1 = np.where(col == 1, cur, flipped)
            ll0 = np.where(col == 1, flipped, cur)
            with np.errstate(invalid="ignore"):
                delta = ll1 - ll0
            if np.isnan(delta).any():
                r = int(np.flatnonzero(np.isnan(delta))[0])
                raise ValueError(f"DependentIBPGibbs: the likelihood of row {r} of "
                                 f"{self.z_name!r} is not finite with z[{r}, {k}] = 1 or 0 "
                                 f"({ll1[r]}, {ll0[r]}).")
            thr_rows = thr[k, index]
            gk = g_flat[k]
            cur = marginal_z_loglik(delta, thr_rows, gk[index], rho)
            for i, c in enumerate(self._comps):
                other = gk - self._contribution_k(c, values[i][k])
                mu_k = means[i][k]
                cov_r, cache = chols[i]
                nu = np.empty_like(mu_k)
                for j in range(c["n_gp"]):
                    key = (min(k, cov_r.shape[0] - 1), min(j, cov_r.shape[1] - 1))
                    if key not in cache:
                        cache[key] = gp_cholesky(cov_r[key], "GP covariance")
                    nu[j] = cache[key] @ self.rng.standard_normal(c["T"])

                def loglik(f, c=c, other=other, mu_k=mu_k, delta=delta, thr_rows=thr_rows):
                    g_new = other + self._contribution_k(c, mu_k + f)
                    return marginal_z_loglik(delta, thr_rows, g_new[index], rho)

                f, cur, e = elliptical_slice(self.rng, values[i][k] - mu_k, nu, loglik, cur)
                values[i][k] = mu_k + f
                gk = other + self._contribution_k(c, values[i][k])
                evals += e
                moves += 1
            g_flat[k] = gk
            u = (thr_rows - gk[index]) / rho
            with np.errstate(invalid="ignore"):
                lo = delta + sp_log_ndtr(u) - sp_log_ndtr(-u)
            new_col = (self.rng.random(n) < sp_expit(lo)).astype(Z.dtype)
            flips += int((new_col != col).sum())
            Z[:, k] = new_col
            cur = np.where(new_col == 1, ll1, ll0)
        return g_flat, values, flips, evals / max(moves, 1)

    def _contribution_k(self, c, value_k):
        """Feature ``k``'s process ``value_k`` (``n_gp x T``) at the ``M`` GP locations."""
        flat = value_k.reshape(-1)
        return flat if c["index"] is None else flat[c["index"]]

    def _draw_g(self, point, gp, sums, n_loc, rho, new):
        """Each process given ``h`` and the other processes (one Gibbs scan over the additive
        components); writes the new values into ``new`` and returns the total ``K x M``."""
        parts = []  # each component's current contribution at the M GP locations
        for c, (value, _, _) in zip(self._comps, triples(gp), strict=True):
            parts.append(self._contribution(c, np.asarray(value, dtype=np.float64)))
        for i, (c, (_, mu, cov)) in enumerate(zip(self._comps, triples(gp), strict=True)):
            other = sum(parts[j] for j in range(len(parts)) if j != i) if len(parts) > 1 \
                else 0.0
            resid = sums - n_loc[None, :] * other  # Σ over rows of h - other components
            loc = np.arange(sums.shape[1]) if c["index"] is None else c["index"]
            width = c["n_gp"] * c["T"]
            r_sum = np.zeros((self.k_max, width))
            for k in range(self.k_max):
                r_sum[k] = np.bincount(loc, weights=resid[k], minlength=width)
            cnt = np.bincount(loc, weights=n_loc, minlength=width)
            shape = c["shape"]
            mu = np.broadcast_to(np.asarray(mu, dtype=np.float64), shape)
            cov = np.asarray(cov, dtype=np.float64)
            cov = cov.reshape((1,) * (len(shape) + 1 - cov.ndim) + cov.shape)
            T, n_gp = c["T"], c["n_gp"]
            mu_r = mu.reshape(self.k_max, n_gp, T)
            cov_r = cov.reshape(cov.shape[0], -1, T, T)
            s_r = r_sum.reshape(self.k_max, n_gp, T)
            n_r = cnt.reshape(n_gp, T)
            out = np.empty((self.k_max, n_gp, T))
            for k in range(self.k_max):
                ck = cov_r[min(k, cov_r.shape[0] - 1)]
                for j in range(n_gp):
                    out[k, j] = gp_conditional_draw(self.rng, mu_r[k, j],
                                                    ck[min(j, ck.shape[0] - 1)], s_r[k, j],
                                                    n_r[j], rho)
            new[c["name"]] = out.reshape(shape).astype(point[c["name"]].dtype)
            parts[i] = self._contribution(c, out.reshape(shape))
        return sum(parts)

    def _contribution(self, c, value):
        flat = value.reshape(self.k_max, -1)
        return flat if c["index"] is None else flat[:, c["index"]]

    def setup_chain(self, rng, tune, draws):
        super().setup_chain(rng, tune, draws)
        self.log_step = np.full(self.k_max, math.log(self.stick_step))
        self.adapt_iter = 0
        self.tune = True
        self.started = False
        self.z_first = np.empty((0, 0), dtype=np.int8)
        self.bg_given = False
        self.fitted_start = False

    def reset_tuning(self):
        pass

    @staticmethod
    def competence(var, has_grad):
        if var.owner is None or not isinstance(var.owner.op, (MvNormalRV, IBPStickBreakingRV)):
            return Competence.INCOMPATIBLE
        try:
            match_dependent_ibp(pm.modelcontext(None), var)
        except (TypeError, ModelPatternError):
            return Competence.INCOMPATIBLE
        return Competence.IDEAL
