"""Synthetic data generators with known ground truth: block images and draws from the
linear-Gaussian IBP model (see :mod:`pymc_ibp.datasets.synthetic`)."""

from pymc_ibp.datasets.synthetic import (
    BLOCK_COMBINATIONS,
    BLOCK_GLYPHS,
    IBPData,
    block_combinations,
    block_images,
    ibp_linear_gaussian,
)

__all__ = ["BLOCK_COMBINATIONS", "BLOCK_GLYPHS", "IBPData", "block_combinations", "block_images",
           "ibp_linear_gaussian"]
