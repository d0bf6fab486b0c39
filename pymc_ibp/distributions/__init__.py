"""Priors over binary feature matrices and feature probabilities.

:class:`IBP` is the Indian buffet process (Griffiths & Ghahramani 2011; two-parameter form of
Ghahramani, Griffiths & Sollich 2007); :class:`IBPStickBreaking` is its truncated
stick-breaking construction (Teh, Görür & Ghahramani 2007).  Full references are on the docs
page *References*.
"""

from pymc_ibp.distributions.ibp import IBP, IBPRV
from pymc_ibp.distributions.stick_breaking import IBPStickBreaking, IBPStickBreakingRV

__all__ = ["IBP", "IBPRV", "IBPStickBreaking", "IBPStickBreakingRV"]
