"""Exceptions and warnings shared by every part of :mod:`pymc_ibp`."""

from __future__ import annotations

import warnings

__all__ = ["DataError", "ModelPatternError", "ShardFailure", "ShardRecoveryWarning",
           "TruncationWarning", "UntrustedChainsWarning", "warn_slots_in_use"]


class ModelPatternError(ValueError):
    """The model does not have the structure a step method needs.

    The message names the variable and the pattern the step expects.
    """

    #: where the message's statement of the pattern the step needs begins
    PATTERN_MARK = " Needed pattern:"

    @property
    def reason(self):
        """The message without the pattern the step needs (what a log line that says why a
        step does not apply quotes)."""
        return str(self).split(self.PATTERN_MARK)[0]


class DataError(ValueError):
    """Observed data a step cannot use (e.g. ``inf``, or ``NaN`` that PyMC does not impute).

    The message names the variable and the first bad position.
    """


class TruncationWarning(UserWarning):
    """All ``K_max`` feature slots of an IBP matrix were in use: the truncation may bind.

    The message names ``K_max`` and the variable; raise ``K_max`` (the length of the
    ``feature`` dim) and re-run.  The sample stat ``ibp_kmax_hit`` marks the affected draws.
    """


class UntrustedChainsWarning(UserWarning):
    """The chains of an IBP posterior cannot be trusted as they stand: they disagree, the
    truncation binds, or a chain holds duplicated features
    (:func:`pymc_ibp.check_chains`).  The message is one line naming what to do."""


def warn_slots_in_use(step, z_name, k_max, where=None, stacklevel=4, advice=None):
    """Emit the :class:`TruncationWarning` of a step whose ``K_max`` slots of ``z_name`` were
    all in use; ``where`` says what to raise (:func:`pymc_ibp.matching.graph.slot_knob`;
    default: the last entry of ``shape=``); ``advice``: a probe's estimate of the ``K_max``
    to use (:meth:`pymc_ibp.inference.k_max.KMaxProbe.advice`; default: twice ``K_max``).
    The default ``stacklevel`` points at the caller of the step's ``step()``, past
    :func:`~pymc_ibp._numba_utils.interrupt_safe`."""
    where = "the last entry of shape=" if where is None else where
    raise_to = f"e.g. to {2 * k_max}" if advice is None else advice
    warnings.warn(
        f"{step}: all K_max={k_max} feature slots of {z_name!r} were in use; the truncation "
        f"may bias the posterior. Raise K_max ({raise_to}: {where}) and re-run; the "
        "sample stat 'ibp_kmax_hit' marks the affected draws.", TruncationWarning,
        stacklevel=stacklevel)


class ShardFailure(RuntimeError):
    """A shard of the data-parallel sampler failed, timed out, or lost its worker.

    The message names the shard, its rows and its worker; the run stops instead of continuing
    with a wrong or partial state.
    """


class ShardRecoveryWarning(UserWarning):
    """A shard of the data-parallel sampler lost its worker and was rebuilt.

    The message names the shard, its rows and its worker.  The driver re-sent the shards'
    rows and ``Z`` from its last global state and repeated the iteration with the same
    seeds, so the chain is the one an uninterrupted run would have given.
    """
