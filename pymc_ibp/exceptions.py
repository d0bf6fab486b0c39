"""Exceptions and warnings shared by every part of :mod:`pymc_ibp`."""

from __future__ import annotations

__all__ = ["DataError", "ModelPatternError", "ShardFailure", "ShardRecoveryWarning",
           "TruncationWarning"]


class ModelPatternError(ValueError):
    """The model does not have the structure a step method needs.

    The message names the variable and the pattern the step expects.
    """


class DataError(ValueError):
    """Observed data a step cannot use (e.g. ``inf``, or ``NaN`` that PyMC does not impute).

    The message names the variable and the first bad position.
    """


class TruncationWarning(UserWarning):
    """All ``K_max`` feature slots of an IBP matrix were in use: the truncation may bind.

    The message names ``K_max`` and the variable; raise ``K_max`` (the length of the
    ``feature`` dim) and re-run.  The sample stat ``ibp_kmax_hit`` marks the affected draws.
    """


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
