"""pymc_ibp: Indian Buffet Process latent feature models for PyMC.

Import as ``import pymc_ibp as pmi``.  Importing registers the step methods so that
``pm.sample()`` picks them for IBP models.
"""

from pymc_ibp import datasets, distributed, inference, likelihoods
from pymc_ibp.datasets import ShardedData
from pymc_ibp.diagnostics import (
    bernoulli_heldout_metrics,
    chain_summary,
    check_chains,
    compare_models,
    cusum,
    entry_folds,
    hairiness,
    hairiness_index,
    heldout_metrics,
    holdout_mask,
    logit_heldout_metrics,
    plot_assignments,
    plot_features,
    relabel,
    row_folds,
    summary,
)
from pymc_ibp.distributed import DataParallelGibbs
from pymc_ibp.distributions import (
    CRP,
    CRPRV,
    IBP,
    IBPRV,
    DependentIBP,
    DependentIBPModel,
    DependentIBPRV,
    IBPStickBreaking,
    IBPStickBreakingRV,
    dependent_ibp,
    dp_ibp,
    ibp_ibp,
    noisy_or_ibp_ibp,
)
from pymc_ibp.exceptions import (
    DataError,
    ModelPatternError,
    ShardFailure,
    ShardRecoveryWarning,
    TruncationWarning,
    UntrustedChainsWarning,
)
from pymc_ibp.inference import log_predictive_rows, predict_rows, sample_smc
from pymc_ibp.step_methods import (
    AcceleratedGibbs,
    BinaryFeatureGibbs,
    CollapsedGibbs,
    CRPAlphaGibbs,
    CRPGibbs,
    DependentIBPGibbs,
    DetectionRateGibbs,
    ExponentialRateGibbs,
    GaussianFeatureGibbs,
    GPLengthScaleHMC,
    IBPAlphaGibbs,
    IBPGibbs,
    IBPOffsetGibbs,
    IBPScaleSlice,
    NoisyOrQSlice,
    NonNegativeFeatureGibbs,
    PolyaGammaGibbs,
)
from pymc_ibp.thinning import KeepEvery

__version__ = "0.1.0"

__all__ = [
    "CRP",
    "CRPRV",
    "IBP",
    "IBPRV",
    "AcceleratedGibbs",
    "BinaryFeatureGibbs",
    "CollapsedGibbs",
    "DataError",
    "DependentIBP",
    "DependentIBPModel",
    "DependentIBPRV",
    "DataParallelGibbs",
    "DependentIBPGibbs",
    "CRPAlphaGibbs",
    "DetectionRateGibbs",
    "ExponentialRateGibbs",
    "GaussianFeatureGibbs",
    "GPLengthScaleHMC",
    "IBPAlphaGibbs",
    "IBPGibbs",
    "CRPGibbs",
    "IBPOffsetGibbs",
    "IBPScaleSlice",
    "IBPStickBreaking",
    "IBPStickBreakingRV",
    "KeepEvery",
    "ModelPatternError",
    "NoisyOrQSlice",
    "NonNegativeFeatureGibbs",
    "PolyaGammaGibbs",
    "ShardFailure",
    "ShardedData",
    "ShardRecoveryWarning",
    "TruncationWarning",
    "UntrustedChainsWarning",
    "cusum",
    "datasets",
    "dependent_ibp",
    "dp_ibp",
    "ibp_ibp",
    "noisy_or_ibp_ibp",
    "distributed",
    "inference",
    "log_predictive_rows",
    "predict_rows",
    "sample_smc",
    "likelihoods",
    "hairiness",
    "hairiness_index",
    "bernoulli_heldout_metrics",
    "heldout_metrics",
    "holdout_mask",
    "logit_heldout_metrics",
    "plot_assignments",
    "plot_features",
    "relabel",
    "summary",
    "chain_summary",
    "check_chains",
    "compare_models",
    "entry_folds",
    "row_folds",
    "plot_cusum",
]


def __getattr__(name):
    # plotting imports arviz_plots (~2 s); load it on first use only
    if name == "plot_cusum":
        from pymc_ibp.diagnostics.plots import plot_cusum

        return plot_cusum
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
