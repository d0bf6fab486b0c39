"""Priors over binary feature matrices and feature probabilities (spec §2)."""

from pymc_ibp.distributions.ibp import IBP, IBPRV
from pymc_ibp.distributions.stick_breaking import IBPStickBreaking, IBPStickBreakingRV

__all__ = ["IBP", "IBPRV", "IBPStickBreaking", "IBPStickBreakingRV"]
