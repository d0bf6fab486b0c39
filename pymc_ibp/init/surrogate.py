"""The surrogate start of the steps of models that are not linear-Gaussian.

``init_z="surrogate"`` of :class:`pymc_ibp.IBPGibbs` and :class:`pymc_ibp.PolyaGammaGibbs` (their
default for a :class:`pymc_ibp.IBP` when the user gives no ``Z``) treats the data as if they
were linear-Gaussian,

.. math:: X \\sim \\mathcal N(Z A + b,\\ \\sigma_x^2),\\qquad A \\sim \\mathcal N(0, \\sigma_a^2),
    \\qquad Z \\sim \\mathrm{IBP}(\\alpha, \\beta),

(under a log link, ``mu = exp(Z @ A + ...)`` as in a Poisson likelihood, with the counts
read as ``X = log(y + 1/2)``, the scale on which the features add) and runs the annealed
start search of the linear-Gaussian samplers (:class:`~pymc_ibp.init.search.AnnealedSearch`)
on it, then ``SURROGATE_SWEEPS`` iterations of accelerated Gibbs sweeps (Doshi-Velez &
Ghahramani 2009) with split–merge, birth/death, pair-swap and pair / triple moves, ``A`` drawn
from its Gaussian conditional, the scales by slice sampling (Neal 2003) and the offset from
its Gaussian conditional.  With ``s`` the standard deviation of
the observed entries: on 0/1 data ``σx = SURROGATE_SIGMA_X s`` and ``σa = SURROGATE_SIGMA_A s``
are fixed and there is no offset ``b``; on other data ``σx ~ HalfNormal(SURROGATE_SIGMA_X s)``
and ``σa ~ HalfNormal(SURROGATE_SIGMA_A s)`` are free, and where the likelihood's location is
``Z @ A`` plus other terms there is an offset ``b ~ Normal(mean, SURROGATE_SIGMA_B s0)``
(``s0`` the entries' root mean square), which the search fits beside ``Z``: one per column
where the model's other terms differ between columns, else one value (a per-column offset
would explain column baselines that the model's features must).  A model's
offset that is one free untransformed variable, the same for every row (or indexed by the
rows' groups, ``b[group]``), starts at the surrogate's unless the user gave it.  Where the
model fixes the features' scale (``A ~ Normal(0, σa)``, ``σa`` a number, no link), the
sweeps after the search keep that ``σa``; at the end, merged triples (two features found as
their union and two corrections on the rows owning one alone, up to a few stray rows) are
replaced by the pair they stand for while that raises the surrogate's collapsed log joint
(:func:`unmerge_triples`).  Under the identity link on continuous data a start keeps the best
of ``SURROGATE_TRIES`` such runs by the surrogate's log density.

It runs on arrays and the kernels alone (no PyMC model, no step), with the chain's generator.
It only chooses where a chain starts; the chain's own step then targets the model's posterior.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np
from pytensor.graph.traversal import ancestors
from pytensor.scalar import Exp
from pytensor.tensor.random.op import RandomVariable

from pymc_ibp import kernels
from pymc_ibp.exceptions import ModelPatternError
from pymc_ibp.inference.k_max import probe_k_max
from pymc_ibp.init.given import initial_value_given
from pymc_ibp.init.search import AnnealedSearch
from pymc_ibp.kernels.moves import Moves, linear_gaussian_moves
from pymc_ibp.kernels.slice import slice_sample
from pymc_ibp.matching.graph import (
    fixed_normal_scale,
    linked_mean_terms,
    observed_data,
    row_constant_variable,
    row_indexed_variable,
)
from pymc_ibp.matching.prior_modes import prior_mode
from pymc_ibp.matching.priors import IBPPrior

__all__ = ["SURROGATE_SIGMA_A", "SURROGATE_SIGMA_B", "SURROGATE_SIGMA_X", "SURROGATE_SWEEPS",
           "SURROGATE_TRIES", "UNMERGE_TOL", "SurrogateDraw", "SurrogateStart", "merged_triples",
           "unmerge_triples"]


#: the linear-Gaussian surrogate: noise and feature scales as multiples of the standard
#: deviation of the observed entries (on 0/1 data the scales themselves, on continuous data
#: the scales of their half-normal priors)
SURROGATE_SIGMA_X = 1.0
SURROGATE_SIGMA_A = 2.0
#: the prior scale of the surrogate's offset (centred at the data's mean), as a multiple of
#: the spread of the observed entries about zero
SURROGATE_SIGMA_B = 10.0
#: the share of stray rows of a correction feature outside the union (or in both corrections)
#: that :func:`unmerge_triples` allows (the surrogate's merged triples leave one or two)
UNMERGE_TOL = 0.1
#: the most unmerges at the end of a surrogate draw, and the most triples scored for each
UNMERGE_PASSES, UNMERGE_CANDIDATES = 4, 32
#: iterations on the surrogate after its start search
SURROGATE_SWEEPS = 50
#: runs of the search and sweeps per chain start, the best by the surrogate's log density
#: (where the surrogate's likelihood is the model's own: :attr:`SurrogateStart.tries`)
SURROGATE_TRIES = 2
#: the surrogate's moves per sweep (the defaults of pmi.AcceleratedGibbs, and moves between
#: a pair of features and its merged triple: kernels.pair_triple_moves)
SURROGATE_MOVES = Moves(split_merge=5, birth_death=3, pair_swaps=3, pair_triples=5)


class SurrogateDraw(NamedTuple):
    """What :meth:`SurrogateStart.draw` returns: ``z`` (int8) the chain's first ``Z``;
    ``offsets`` ``{name: value}`` for the model's offset that starts at the surrogate's (else
    empty); ``features`` the surrogate's ``A`` (``K_max x D``, on the data's scale) on
    continuous data, ``None`` on 0/1 data."""

    z: np.ndarray
    offsets: dict
    features: np.ndarray | None


class _SurrogateData(NamedTuple):
    """The surrogate's data as the start search reads them (one block, complete, local)."""

    X: np.ndarray
    k_max: int
    missing_mask: None = None
    sharded: None = None

    @property
    def shape(self):
        return self.X.shape


def _linear_predictor(z_rv, like_rv):
    """``(offset, links, features)`` of a likelihood whose parameter is ``Z @ A`` plus other
    terms, possibly through element-wise links: ``offset`` the other terms (symbolic; ``None``
    when there are none or no parameter has that form), ``links`` the links' scalar ops
    (outermost first; ``[Exp]`` is a log link, as in ``Poisson(mu=exp(Z @ A + b))``) and
    ``features`` the graph of ``A`` (``None`` when no parameter has that form)."""
    if like_rv.owner is None or not isinstance(like_rv.owner.op, RandomVariable):
        return None, [], None
    for param in like_rv.owner.inputs[2:]:  # after rng and size
        if z_rv in set(ancestors([param])):
            terms, links = linked_mean_terms(param, z_rv, left=z_rv)
            if terms is not None:
                return terms[2], links, terms[1]
    return None, [], None


def _offset_handover(model, offset, initial_point, shape):
    """``(name, groups)`` for ``offset`` when it is one free untransformed variable whose
    initial value the user did not give, with ``name`` its value's name: the same for every
    row (``groups`` is ``False``), it starts at the surrogate's offset; indexed by the rows'
    groups (``b[group]``; ``groups`` is ``True``), every group's row starts there.
    ``(None, False)`` otherwise."""
    rv = row_constant_variable(model, offset)
    groups = rv is None
    if groups:
        rv = row_indexed_variable(model, offset, *shape)
    if rv is None or initial_value_given(model, [rv], initial_point):
        return None, False
    return model.rvs_to_values[rv].name, groups


def _halfnormal_log_scale(u, s):
    """``log HalfNormal(e^u; s) + u``: the log density of a half-normal scale's log."""
    sigma = math.exp(u)
    return -0.5 * (sigma / s) ** 2 + 0.5 * math.log(2.0 / math.pi) - math.log(s) + u


class SurrogateStart:
    """The surrogate start of ``who`` (``"IBPGibbs"``, ``"PolyaGammaGibbs"``) for the
    ``pmi.IBP`` variable ``z_rv`` of shape ``shape = (N, K_max)`` with parameters ``alpha``,
    ``beta``, whose likelihood terms are ``children`` (module docstring).  Raises
    :class:`~pymc_ibp.exceptions.ModelPatternError` unless the likelihood is one observed
    ``N x D`` matrix without missing entries.  :meth:`draw` runs it for one chain."""

    def __init__(self, model, z_rv, children, shape, alpha, beta, who, initial_point=None):
        observed = [c for c in children if c in set(model.observed_RVs)]
        data = None
        if len(children) == 1 and len(observed) == 1:
            try:
                data = observed_data(model.rvs_to_values[observed[0]])
            except ModelPatternError:
                data = None
        n, k_max = shape
        if (data is None or data.ndim != 2 or data.shape[0] != n
                or not np.all(np.isfinite(data))):
            raise ModelPatternError(
                f"{who}(init_z='surrogate') needs the likelihood of {z_rv.name!r} to be one "
                f"observed N x D matrix (N = {n} rows, one per row of {z_rv.name!r}) without "
                f"missing entries; found {[c.name for c in children]} below {z_rv.name!r}.")
        self.X = np.ascontiguousarray(data, dtype=np.float64)
        self.n, self.d = self.X.shape
        self.k_max = int(k_max)
        self.binary = bool(np.all((self.X == 0) | (self.X == 1)))
        offset, links, features = ((None, [], None) if self.binary
                                   else _linear_predictor(z_rv, observed[0]))
        #: the data on the linear predictor's scale: log(x + 1/2) under a log link
        self.log_link = bool(len(links) == 1 and isinstance(links[0], Exp)
                             and np.all(self.X >= 0))
        #: the model's own feature scale where it fixes one, ``A ~ Normal(0, σa)`` with the
        #: data on the predictor's scale (no link): the sweeps after the start search keep
        #: it (a merged triple of features and the pair it stands for can fit about equally
        #: well under a fitted σa; the model's own prior decides)
        self.fixed_sa = (fixed_normal_scale(model, features)
                         if features is not None and not links else None)
        #: runs per start: several where the surrogate's likelihood is the model's own up to
        #: its scales (continuous data, no link), so that its density ranks them as the
        #: model would; one under a link or on 0/1 data, where it need not (on the log scale
        #: of Poisson counts it preferred a spurious fourth feature)
        self.tries = SURROGATE_TRIES if not links and not self.binary else 1
        if self.log_link:
            self.X = np.log(self.X + 0.5)
        scale = float(np.std(self.X)) or 1.0
        self.has_offset = offset is not None
        #: whether the model's offset differs between columns (else the surrogate's is one
        #: value: a per-column offset would explain column baselines the model cannot)
        self.per_column = self.has_offset and offset.type.ndim > 0 and \
            not offset.type.broadcastable[-1]
        # the scales: fixed on 0/1 data, else the scales of their half-normal priors
        self.sx, self.sa = SURROGATE_SIGMA_X * scale, SURROGATE_SIGMA_A * scale
        self.b_mean = float(np.mean(self.X))
        self.b_sd = SURROGATE_SIGMA_B * float(np.sqrt(np.mean(self.X ** 2)))
        self.mode = prior_mode(IBPPrior(alpha, beta), self.n, self.k_max)
        self.mode.set_params(float(alpha), float(beta))
        self.search = AnnealedSearch(
            spec=_SurrogateData(self.X, self.k_max), mode=self.mode, starts=None, z_name="Z",
            init_z="prior",
            moves=(SURROGATE_MOVES.split_merge, 5, SURROGATE_MOVES.birth_death, 5),
            baselines=(((0, self.d, self.per_column, "b", False, None),)
                       if self.has_offset else ()),
            free_sx=not self.binary, free_sa=not self.binary,
            # no hill climbing on the surrogate's score, which is not the model's: on
            # log(y + 1/2) it added a feature of every row for the transform's column bias
            refine=False)
        self.handover, self.groups = ((None, False) if offset is None else
                                      _offset_handover(model, offset, initial_point,
                                                       self.X.shape))

    def draw(self, rng, point=None, tries=None):
        """The :class:`SurrogateDraw` of one chain: of ``tries`` (default :attr:`tries`) runs
        of the start search and ``SURROGATE_SWEEPS`` iterations, the one whose final state has
        the highest surrogate log density (:meth:`_run`), with the chain's own generator
        ``rng`` (the same draws under any number of cores); the offset is shaped as
        ``point[name]``."""
        best = None
        for _ in range(self.tries if tries is None else int(tries)):
            found, score = self._run(rng, point)
            if best is None or score > best[1]:
                best = (found, score)
        return best[0]

    def _run(self, rng, point):
        """One run of the start search and ``SURROGATE_SWEEPS`` iterations: its
        :class:`SurrogateDraw` and the surrogate's log density at its final state (the
        collapsed ``log p(X, Z | σx, σa, b)`` plus the log prior densities of the free
        scales), by which :meth:`draw` compares runs."""
        self.search.reset()
        sx, sa = self.sx, self.sa
        b = np.full(self.d, self.b_mean)
        X, noise = self._blocks(sx, sa, b)
        Z = np.zeros((self.n, self.k_max), dtype=np.int8)
        Z, base, noise = self.search.start(rng, Z, X, noise, 0, owned=self.has_offset)
        if base is not None:  # the search took its baseline off X (in place): b follows it
            b = b + base.table[0]
        A = kernels.draw_features(rng, Z, X, noise)
        refresh = kernels.refresh_interval(self.n)
        for sweep in range(SURROGATE_SWEEPS + 1):
            if sweep:
                X, noise = self._blocks(sx, sa, b)
                m = Z.sum(axis=0).astype(np.int64)
                kernels.accelerated_sweep(rng, Z, X, m, noise, self.mode.sweep_prior, refresh)
                linear_gaussian_moves(rng, Z, X, m, noise, self.mode.alpha, self.mode.beta,
                                      kernels.block_sq_norms(X, noise), SURROGATE_MOVES)
                A = kernels.draw_features(rng, Z, X, noise)
            if not self.binary:
                sx = self._scale(rng, sweep == 0, sx, SURROGATE_SIGMA_X * self.sx,
                                 X.size, self._residual_ss(Z, A, b))
                sa = (self.fixed_sa if self.fixed_sa is not None else
                      self._scale(rng, sweep == 0, sa, self.sa, A.size, float(np.sum(A * A))))
            if self.has_offset:
                b = self._offset(rng, Z, A, sx)
        X, noise = self._blocks(sx, sa, b)  # at the scales and offset of the last updates
        trXX = kernels.block_sq_norms(X, noise)
        joints = {}  # Z's bytes -> its collapsed log joint (the unmerge scores Z first)

        def log_joint(z):
            key = z.tobytes()
            if key not in joints:
                joints[key] = kernels.log_joint_of(z, X, noise, None, self.mode.alpha,
                                                   self.mode.beta, trXX)[0]
            return joints[key]

        unmerged = unmerge_triples(Z, log_joint)
        if unmerged is not Z:
            Z = unmerged
            A = kernels.draw_features(rng, Z, X, noise)
        score = log_joint(Z)
        if not self.binary:  # the free scales' prior densities (on the scale, not its log)
            score += _halfnormal_log_scale(math.log(sx), SURROGATE_SIGMA_X * self.sx)
            score -= math.log(sx)
            if self.fixed_sa is None:
                score += _halfnormal_log_scale(math.log(sa), self.sa) - math.log(sa)
        return SurrogateDraw(Z, self._offsets(b, point), None if self.binary else A), score

    def probe_k_max(self, rng, Z, alpha, beta, sweeps=30):
        """How many features the data want where a chain's ``K_max`` binds: the
        linear-Gaussian kernels run on the surrogate's data from the chain's ``Z`` with room for
        more features (:func:`pymc_ibp.inference.k_max.probe_k_max`; the scales re-estimated
        from ``Z`` after each sweep as in the start search, fixed on 0/1 data; the offset the
        data's mean).  An estimate for the advice of a truncation warning, not a draw."""
        X = self.X
        if self.has_offset:
            X = X - (X.mean(axis=0) if self.per_column else X.mean())
        X = np.ascontiguousarray(X)
        Z8 = np.asarray(Z != 0, dtype=np.int8)
        noise = kernels.noise_blocks(self.sx * self.sx, self.sa * self.sa, self.d)
        estimate = None
        if not self.binary:
            v0 = kernels.block_variances(X, tuple(noise.cols))

            def estimate(Z_, X_, m_, nz):
                return self.search.noise_estimate(Z_, X_, m_, nz, v0)

            noise = estimate(Z8, X, Z8.sum(axis=0).astype(np.int64), noise)
        return probe_k_max(rng, Z8, X, noise, alpha, beta, sweeps=sweeps,
                           estimate_noise=estimate)

    def _blocks(self, sx, sa, b):
        """``(X, noise)``: the surrogate's data less the offset ``b`` and its noise blocks at
        the scales ``sx``, ``sa``."""
        X = self.X - b if self.has_offset else self.X
        return X, kernels.noise_blocks(sx * sx, sa * sa, self.d)

    def _residual_ss(self, Z, A, b):
        """``‖X - b - Z A‖²``."""
        off = b[None] if self.has_offset else np.zeros((1, self.d))
        return kernels.residual_sq_sum(self.X, 0, Z, A, off, 0, kernels.NO_ROWS)

    @staticmethod
    def _scale(rng, first, sigma, prior_sd, count, ss):
        """One slice update of a free scale on its log (Neal 2003) given ``count`` Gaussian
        terms with sum of squares ``ss``; its first update starts from the value its
        likelihood term favours, ``sqrt(ss / count)``."""
        if first:
            sigma = max(math.sqrt(ss / count), 1e-3)

        def logp(u):
            s = math.exp(u)
            return (_halfnormal_log_scale(u, prior_sd) - count * math.log(s)
                    - ss / (2.0 * s * s))

        u, _ = slice_sample(rng, logp, math.log(sigma), 1.0, name="the surrogate's scale")
        return math.exp(u)

    def _offset(self, rng, Z, A, sx):
        """The per-column offset from its Gaussian conditional given ``Z``, ``A`` and ``σx``."""
        w = 1.0 / (sx * sx)
        sums = (self.X.sum(axis=0) - Z.sum(axis=0, dtype=np.int64) @ A) * w
        count = self.n
        if not self.per_column:  # one value: the sums over every column
            sums, count = np.full(1, sums.sum()), self.n * self.d
        prec = 1.0 / self.b_sd ** 2 + count * w
        mean = (self.b_mean / self.b_sd ** 2 + sums) / prec
        return np.broadcast_to(mean + rng.standard_normal(mean.size) / np.sqrt(prec),
                               (self.d,)).copy()

    def _offsets(self, b, point):
        """``{name: value}``: the model's offset at the surrogate's ``b``, shaped as
        ``point[name]`` (every group's row for ``b[group]``)."""
        name = self.handover
        if name is None or point is None:
            return {}
        v = np.asarray(point[name])
        if self.groups:
            b = np.tile(b if v.size == v.shape[0] * b.size else b.mean(), v.shape[0])
        return {name: (b.reshape(v.shape) if v.size == b.size else np.asarray(b.mean())
                       ).astype(v.dtype)}


def merged_triples(Z, tol=0.0):
    """The triples ``(s1, s2, s3)`` of active columns of ``Z`` (``s2 < s3``) where ``u = z_s2``
    and ``v = z_s3`` are disjoint, inside ``F = z_s1`` and leave rows of ``F``: two features
    ``F ∧ ¬v`` and ``F ∧ ¬u`` found as their union and two corrections on the rows owning
    one alone (:func:`pymc_ibp.kernels.pair_triple_moves`).  ``tol``: the share of the rows
    of ``u`` (``v``) that may lie outside ``F`` or in both (a start search leaves a few
    stray rows)."""
    Z = np.asarray(Z)
    nz = Z != 0
    act = np.flatnonzero(nz.any(axis=0))
    size = nz.sum(axis=0)
    out = []
    for s1 in act:  # the candidates of u and v first: inside F up to tol, and smaller
        f = nz[:, s1]
        inside = [s for s in act
                  if s != s1 and np.sum(nz[:, s] & ~f) <= tol * size[s] and size[s] < size[s1]]
        for i, s2 in enumerate(inside):
            for s3 in inside[i + 1:]:
                if kernels.is_merged_triple(Z, s1, s2, s3, tol):
                    out.append((int(s1), int(s2), int(s3)))
    return out


def unmerge_triples(Z, score, tol=UNMERGE_TOL):
    """``Z`` with merged triples (:func:`merged_triples`, up to ``tol`` stray rows) replaced,
    greedily, by the pair they stand for (``z_s1 = F ∧ ¬v``, ``z_s2 = F ∧ ¬u``, ``s3``
    emptied) while that raises ``score(Z)`` (the surrogate's collapsed log joint); ``Z``
    itself (the same object) when no unmerge does.  At most ``UNMERGE_PASSES`` unmerges, each
    the best of at most ``UNMERGE_CANDIDATES`` triples, those with the largest smaller
    correction first (a feature owned by almost every row holds many pairs of small disjoint
    features, which are not merged glyphs)."""
    best, current = score(Z), Z
    for _ in range(UNMERGE_PASSES):
        triples = merged_triples(current, tol)
        size = (current != 0).sum(axis=0)
        triples.sort(key=lambda t: -min(size[t[1]], size[t[2]]))
        top, top_z = best, None
        for s1, s2, s3 in triples[:UNMERGE_CANDIDATES]:
            cand = current.copy()
            kernels.unmerge_columns(current, cand, s1, s2, s3)
            value = score(cand)
            if np.isfinite(value) and value > top:
                top, top_z = value, cand
        if top_z is None:
            break
        best, current = top, top_z
    return current
