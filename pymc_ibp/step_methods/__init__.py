"""Step methods for IBP models (see the docs page *Step methods*).  Importing registers them for
automatic assignment."""

from pymc.step_methods import STEP_METHODS

from pymc_ibp.step_methods.binary_features import BinaryFeatureGibbs
from pymc_ibp.step_methods.crp_gibbs import CRPGibbs
from pymc_ibp.step_methods.dependent_ibp import DependentIBPGibbs
from pymc_ibp.step_methods.gaussian_features import GaussianFeatureGibbs
from pymc_ibp.step_methods.gp_length_scales import GPLengthScaleHMC
from pymc_ibp.step_methods.hyperparameters import (
    CRPAlphaGibbs,
    DetectionRateGibbs,
    ExponentialRateGibbs,
    IBPAlphaGibbs,
)
from pymc_ibp.step_methods.linear_gaussian import AcceleratedGibbs, CollapsedGibbs
from pymc_ibp.step_methods.noisy_or import NoisyOrQSlice
from pymc_ibp.step_methods.nonnegative import NonNegativeFeatureGibbs
from pymc_ibp.step_methods.offsets import IBPOffsetGibbs
from pymc_ibp.step_methods.polya_gamma import PolyaGammaGibbs
from pymc_ibp.step_methods.scales import IBPScaleSlice
from pymc_ibp.step_methods.uncollapsed import IBPGibbs

__all__ = ["AcceleratedGibbs", "BinaryFeatureGibbs", "CRPAlphaGibbs", "CRPGibbs",
           "CollapsedGibbs", "DependentIBPGibbs",
           "DetectionRateGibbs", "ExponentialRateGibbs", "GPLengthScaleHMC",
           "GaussianFeatureGibbs",
           "IBPAlphaGibbs", "IBPGibbs", "IBPOffsetGibbs", "IBPScaleSlice",
           "NoisyOrQSlice", "NonNegativeFeatureGibbs", "PolyaGammaGibbs"]

# Competence is IDEAL only for the plugin's own patterns, so going first is safe; it must go
# first because pm.sample takes the first of equally competent steps, and PyMC's
# BinaryGibbsMetropolis is also IDEAL for a Bernoulli Z (e.g. under IBPStickBreaking).
for _cls in reversed((AcceleratedGibbs, PolyaGammaGibbs, IBPAlphaGibbs, IBPScaleSlice,
                      IBPOffsetGibbs, IBPGibbs,
                      CRPGibbs, NonNegativeFeatureGibbs, GaussianFeatureGibbs,
                      ExponentialRateGibbs,
                      DependentIBPGibbs, GPLengthScaleHMC, DetectionRateGibbs,
                      CRPAlphaGibbs, NoisyOrQSlice, BinaryFeatureGibbs)):
    if _cls not in STEP_METHODS:
        STEP_METHODS.insert(0, _cls)
