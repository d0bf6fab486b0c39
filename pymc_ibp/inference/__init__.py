"""Point estimates and approximate inference for IBP models (not MCMC).

* :func:`greedy_map` — iterated conditional modes with the accelerated sweep: each entry of
  ``Z`` and each row's number of new features set to its most probable value (the
  deterministic variant of the accelerated sampler, Doshi-Velez 2009, §4.5).
* :func:`fit_variational` — mean-field variational IBP (infinite stick-breaking or finite
  approximation, multinomial or Taylor bound; Doshi-Velez et al. 2009), returning a
  :class:`VariationalResult` that draws a ``pm.sample``-shaped DataTree and gives initial
  values for ``pm.sample``.
* :func:`fit_meibp` — the maximisation–expectation IBP for non-negative features (Reed &
  Ghahramani 2013): submodular per-row maximisation (:mod:`~pymc_ibp.inference.submodular`)
  and a truncated-Gaussian ``q(A)``; :func:`fit_bp_means` — the BP-means++ baseline.
* :func:`chained_fit` — the correlated models fitted in a chain (DP, DP-IBP, IBP-IBP,
  noisy-or IBP-IBP; Doshi-Velez 2009, §7.3), each ``pm.sample`` started from the last draws
  of the one before: MCMC, used here to choose starting points.
* :func:`predict_rows` — new rows of a fitted linear-Gaussian model: drawn from the model, or
  the features of observed new rows, one set per posterior draw; :func:`log_predictive_rows`
  — the density of observed rows as new rows, per draw (held-out rows).
* :func:`sample_smc` — tempered sequential Monte Carlo and the log evidence.
"""

from pymc_ibp.inference.chained import ChainedFit, chained_fit
from pymc_ibp.inference.greedy import GreedyResult, greedy_map
from pymc_ibp.inference.meibp import BPMeansResult, MEIBPResult, fit_bp_means, fit_meibp
from pymc_ibp.inference.prediction import log_predictive_rows, predict_rows
from pymc_ibp.inference.smc import sample_smc
from pymc_ibp.inference.variational import (
    VariationalResult,
    fit_variational,
    truncation_bound,
    variational_elbo,
    variational_z,
)

__all__ = ["BPMeansResult", "ChainedFit", "GreedyResult", "MEIBPResult", "VariationalResult",
           "chained_fit", "fit_bp_means", "fit_meibp", "fit_variational", "greedy_map",
           "log_predictive_rows", "predict_rows", "sample_smc", "truncation_bound",
           "variational_elbo", "variational_z"]
