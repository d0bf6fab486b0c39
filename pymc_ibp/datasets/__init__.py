"""Synthetic data generators with known ground truth: block images and draws from the
linear-Gaussian IBP model (see :mod:`pymc_ibp.datasets.synthetic`); row-sharded data that
stays on its shards (:class:`ShardedData`, for :class:`pymc_ibp.DataParallelGibbs`)."""

from pymc_ibp.datasets.sharded import ShardedData, ShardedDataNotGathered
from pymc_ibp.datasets.synthetic import (
    BLOCK_COMBINATIONS,
    BLOCK_GLYPHS,
    GLYPHS_8X8,
    IBPData,
    binary_block_images,
    block_combinations,
    block_images,
    dependent_glyphs,
    ibp_linear_gaussian,
    markov_glyphs,
)

__all__ = ["BLOCK_COMBINATIONS", "BLOCK_GLYPHS", "GLYPHS_8X8", "IBPData", "ShardedData",
           "ShardedDataNotGathered", "binary_block_images", "block_combinations",
           "block_images", "dependent_glyphs", "ibp_linear_gaussian", "markov_glyphs"]
