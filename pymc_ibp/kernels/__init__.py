"""Numba kernels of the samplers, one concept per module.

========================  =====================================================================
module                    concept
========================  =====================================================================
``linalg``                Cholesky inverses and triangular solves
``gaussian``              the linear-Gaussian likelihood with ``A`` integrated out, by column
                          block (``Noise``): sufficient statistics, feature posterior,
                          collapsed likelihood and log joint, exact ``A | Z`` draws
``slots``                 bookkeeping of the active feature slots
``rows``                  per-row kernels shared by every prior (rank-one updates, Gibbs of a
                          row's entries given per-entry prior log-odds, birth counts)
``sweeps``                accelerated (two prior modes), windowed and classic collapsed sweeps
``allocation``            sequential allocation, the proposal the split–merge and birth–death
                          moves share, and their slot-indexed statistics
``split_merge``           split–merge Metropolis–Hastings moves
``pair_swaps``            pattern swaps of feature pairs (complement modes)
``moves``                 the moves after a linear-Gaussian sweep, in order (``Moves``)
``binary_features``       the Gibbs scan of binary links on cached counts ``S = Z A``
``polya_gamma``           exact Pólya-Gamma ``PG(1, c)`` draws (the logit augmentation)
``logit``                 the Bernoulli-logit model: given its Pólya-Gamma variables a ``Z``
                          sweep with ``A`` (and ``b``) integrated out (one posterior per
                          column) and exact ``(A, b)`` draws; a ``Z`` sweep given ``A`` under
                          the exact likelihood
``resampling``            the effective sample size and systematic resampling of particle
                          weights (the tempered SMC)
========================  =====================================================================

The IBP's own formulas (mass, log-Beta terms, prior log-odds, birth rate, truncation
normaliser, pmf) live in :mod:`pymc_ibp.distributions.ibp_math`.
"""

from pymc_ibp.kernels.gaussian import (
    NO_ROWS,
    Noise,
    block_sq_norms,
    block_variances,
    centred_spread,
    collapsed_log_joint,
    collapsed_loglik,
    collapsed_spectrum,
    column_moments,
    column_sq_norms,
    draw_active_blocks,
    draw_active_features,
    draw_features,
    log_joint_of,
    marchenko_pastur_median,
    noise_blocks,
    noise_scale_estimate,
    observed_loglik,
    posterior_from_stats,
    residual_sq_sum,
    stats_with_row,
    suff_stats,
    tempered_loglik,
    tempered_loglik_columns,
    tempered_loglik_slope_columns,
)
from pymc_ibp.kernels.linalg import backward_sub_t, chol_inverse, forward_sub
from pymc_ibp.kernels.logit import (
    draw_logit_weights,
    logit_collapsed_sweep,
    logit_feature_sweep,
    logit_linear_predictor,
    logit_log_lik,
    logit_offset_slice,
    logit_precisions,
    logit_targets,
)
from pymc_ibp.kernels.moves import Moves, MovesInfo, linear_gaussian_moves
from pymc_ibp.kernels.pair_swaps import (
    is_merged_triple,
    merge_columns,
    pair_overlap,
    pair_pattern_swaps,
    pair_triple_moves,
    unmerge_columns,
)
from pymc_ibp.kernels.polya_gamma import pg_mean, polya_gamma, polya_gamma_matrix
from pymc_ibp.kernels.resampling import effective_sample_size, systematic_resample
from pymc_ibp.kernels.rows import (
    NO_LOGODDS,
    ObservedRow,
    RowWork,
    SweepPrior,
    birth_count,
    birth_terms,
    draw_count,
    excess_count,
    gibbs_row_entries,
    residual,
    row_dims,
    row_loglik,
    row_moments,
    row_update,
    row_work,
    sig_z,
)
from pymc_ibp.kernels.slots import (
    active_slots,
    append_empty,
    random_free_slots,
    reset_to_prior,
    swap_remove,
    sweep_state,
    write_row,
)
from pymc_ibp.kernels.split_merge import (
    column_split_merge,
    random_split_merge,
    sequential_birth_death,
    sequential_split_merge,
)
from pymc_ibp.kernels.sweeps import (
    NO_EXT,
    NO_MISS,
    OtherRows,
    SweepOptions,
    SweepStats,
    accelerated_sweep,
    accelerated_sweep_core,
    accelerated_sweep_window,
    collapsed_sweep,
    refresh_interval,
    shard_sweep,
)

__all__ = [
    "Moves",
    "MovesInfo",
    "NO_EXT",
    "NO_LOGODDS",
    "NO_MISS",
    "NO_ROWS",
    "Noise",
    "ObservedRow",
    "OtherRows",
    "RowWork",
    "SweepOptions",
    "SweepPrior",
    "SweepStats",
    "accelerated_sweep",
    "accelerated_sweep_core",
    "accelerated_sweep_window",
    "active_slots",
    "append_empty",
    "backward_sub_t",
    "birth_count",
    "birth_terms",
    "block_sq_norms",
    "block_variances",
    "centred_spread",
    "chol_inverse",
    "collapsed_log_joint",
    "collapsed_loglik",
    "collapsed_spectrum",
    "collapsed_sweep",
    "column_moments",
    "column_split_merge",
    "column_sq_norms",
    "draw_active_blocks",
    "draw_active_features",
    "draw_count",
    "draw_features",
    "draw_logit_weights",
    "effective_sample_size",
    "excess_count",
    "forward_sub",
    "gibbs_row_entries",
    "is_merged_triple",
    "linear_gaussian_moves",
    "log_joint_of",
    "logit_collapsed_sweep",
    "logit_feature_sweep",
    "logit_linear_predictor",
    "logit_log_lik",
    "logit_offset_slice",
    "logit_precisions",
    "logit_targets",
    "merge_columns",
    "marchenko_pastur_median",
    "noise_blocks",
    "noise_scale_estimate",
    "observed_loglik",
    "pair_overlap",
    "pair_pattern_swaps",
    "pair_triple_moves",
    "pg_mean",
    "polya_gamma",
    "polya_gamma_matrix",
    "posterior_from_stats",
    "random_free_slots",
    "random_split_merge",
    "refresh_interval",
    "reset_to_prior",
    "residual",
    "residual_sq_sum",
    "row_dims",
    "row_loglik",
    "row_moments",
    "row_update",
    "row_work",
    "sequential_birth_death",
    "sequential_split_merge",
    "shard_sweep",
    "sig_z",
    "stats_with_row",
    "suff_stats",
    "swap_remove",
    "sweep_state",
    "systematic_resample",
    "tempered_loglik",
    "tempered_loglik_columns",
    "tempered_loglik_slope_columns",
    "unmerge_columns",
    "write_row",
]
