"""Priors over binary feature matrices and feature probabilities.

:class:`IBP` is the Indian buffet process (Griffiths & Ghahramani 2011; two-parameter form of
Ghahramani, Griffiths & Sollich 2007); :class:`IBPStickBreaking` is its truncated
stick-breaking construction (Teh, Görür & Ghahramani 2007); :class:`CRP` is the Chinese
restaurant process over the labels of the observations (Aldous 1985; Pitman 2006);
:func:`dp_ibp` builds the DP-IBP correlated feature model (Doshi-Velez & Ghahramani 2009);
:class:`DependentIBP` and :func:`dependent_ibp` the dependent IBP over a covariate
(Williamson, Orbanz & Ghahramani 2010).  Full
references are on the docs page *References*.
"""

from pymc_ibp.distributions.correlated import dp_ibp, ibp_ibp, noisy_or_ibp_ibp
from pymc_ibp.distributions.crp import CRP, CRPRV
from pymc_ibp.distributions.dependent import (
    DependentIBP,
    DependentIBPModel,
    DependentIBPRV,
    dependent_ibp,
)
from pymc_ibp.distributions.ibp import IBP, IBPRV
from pymc_ibp.distributions.stick_breaking import IBPStickBreaking, IBPStickBreakingRV

__all__ = ["CRP", "CRPRV", "DependentIBP", "DependentIBPModel", "DependentIBPRV", "IBP",
           "IBPRV", "IBPStickBreaking", "IBPStickBreakingRV", "dependent_ibp", "dp_ibp",
           "ibp_ibp", "noisy_or_ibp_ibp"]
