"""The one ``init_z`` vocabulary of the steps that start a binary matrix ``Z``
(:class:`pymc_ibp.AcceleratedGibbs`, :class:`pymc_ibp.CollapsedGibbs`,
:class:`pymc_ibp.DataParallelGibbs`, :class:`pymc_ibp.IBPGibbs`,
:class:`pymc_ibp.PolyaGammaGibbs`):

* ``"auto"`` (the default): the ``Z`` the user gave (``pm.sample(initvals=...)`` or the
  variable's ``initval=``), else the step's start search;
* ``"point"``: the chain's initial point, whatever it is (PyMC's default: an empty ``Z``);
* ``"prior"``: the step's start search from prior draws, whatever the initial point;
* ``"surrogate"``: the start search on a linear-Gaussian surrogate of the data, whatever the
  initial point.

A linear-Gaussian model is its own surrogate, so there ``"surrogate"`` is ``"prior"``; a step
whose search runs on the surrogate (the Bernoulli-logit and other likelihoods) reads
``"prior"`` as ``"surrogate"``.
"""

from __future__ import annotations

__all__ = ["INIT_Z", "init_z_policy"]

#: the values ``init_z`` takes
INIT_Z = ("auto", "point", "prior", "surrogate")


def init_z_policy(init_z, step, on_the_model):
    """``init_z`` checked against :data:`INIT_Z` (a ``ValueError`` naming ``step`` otherwise)
    and read for a step whose start search runs on the model itself (``on_the_model``: both
    searches are ``"prior"``) or on the surrogate (both are ``"surrogate"``)."""
    if init_z not in INIT_Z:
        raise ValueError(f"{step}: init_z must be 'auto', 'point', 'prior' or 'surrogate'; got "
                         f"{init_z!r}.")
    if init_z in ("prior", "surrogate"):
        return "prior" if on_the_model else "surrogate"
    return init_z
