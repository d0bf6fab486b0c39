"""Data generators with ground truth (spec §12.5)."""

from pymc_ibp.datasets.synthetic import BLOCK_GLYPHS, IBPData, block_images, ibp_linear_gaussian

__all__ = ["BLOCK_GLYPHS", "IBPData", "block_images", "ibp_linear_gaussian"]
