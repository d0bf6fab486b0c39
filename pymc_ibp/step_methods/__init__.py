"""Step methods for IBP models (spec §4).  Importing registers them for automatic assignment."""

from pymc.step_methods import STEP_METHODS

from pymc_ibp.step_methods.hyperparameters import IBPAlphaGibbs
from pymc_ibp.step_methods.linear_gaussian import AcceleratedGibbs, CollapsedGibbs
from pymc_ibp.step_methods.scales import IBPScaleSlice
from pymc_ibp.step_methods.uncollapsed import IBPGibbs

__all__ = ["AcceleratedGibbs", "CollapsedGibbs", "IBPAlphaGibbs", "IBPGibbs", "IBPScaleSlice"]

# Competence is IDEAL only for the plugin's own patterns, so appending is safe.
for _cls in (AcceleratedGibbs, IBPAlphaGibbs, IBPScaleSlice, IBPGibbs):
    if _cls not in STEP_METHODS:
        STEP_METHODS.append(_cls)
