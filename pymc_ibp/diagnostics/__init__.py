"""Convergence diagnostics for IBP samplers.

CUSUM paths and the hairiness index (Brooks 1998; Brooks & Roberts 1998), which Doshi-Velez
(2009, §5.3) uses to monitor IBP samplers; label-invariant summaries and relabelling (label
switching, see the docs page *Diagnostics*); held-out metrics (the protocol of Doshi-Velez &
Ghahramani 2009, §6).  Full references are on the docs page *References*.
"""

from pymc_ibp.diagnostics.compare import compare_models, entry_folds, row_folds
from pymc_ibp.diagnostics.cusum import cusum, hairiness, hairiness_index
from pymc_ibp.diagnostics.feature_plots import plot_assignments, plot_features, posterior_features
from pymc_ibp.diagnostics.heldout import (
    bernoulli_heldout_metrics,
    heldout_metrics,
    holdout_mask,
    logit_heldout_metrics,
)
from pymc_ibp.diagnostics.relabel import relabel, relabel_permutations
from pymc_ibp.diagnostics.summary import (
    chain_summary,
    feature_sizes,
    sorted_feature_sizes,
    summary,
)
from pymc_ibp.diagnostics.trust import TrustIssue, check_chains


def __getattr__(name):
    # plotting needs arviz_plots' PlotCollection; import lazily so the numeric diagnostics work
    # without touching the plotting stack
    if name == "plot_cusum":
        from pymc_ibp.diagnostics.plots import plot_cusum

        return plot_cusum
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "TrustIssue",
    "chain_summary",
    "check_chains",
    "compare_models",
    "entry_folds",
    "row_folds",
    "cusum",
    "feature_sizes",
    "hairiness",
    "hairiness_index",
    "bernoulli_heldout_metrics",
    "heldout_metrics",
    "holdout_mask",
    "logit_heldout_metrics",
    "plot_assignments",
    "plot_cusum",
    "plot_features",
    "posterior_features",
    "relabel",
    "relabel_permutations",
    "sorted_feature_sizes",
    "summary",
]
