"""PyTensor's numba cache of a random variable follows the source of its kernels."""

import pymc_ibp.distributions.ibp as ibp_module
from pymc_ibp._numba_utils import source_cache_key


def test_source_cache_key_changes_with_the_kernel_source(tmp_path):
    f = tmp_path / "kernel.py"
    f.write_text("def core(): return 1\n")
    k1 = source_cache_key(f)
    assert source_cache_key(f) == k1 and isinstance(k1, int) and 0 <= k1 < 2**60
    f.write_text("def core(): return 2\n")
    assert source_cache_key(f) != k1


def test_the_ibp_draw_registers_a_source_key():
    """The key numba_core_rv_funcify returns for pmi.IBP is the source key of its modules
    (a constant key kept serving an edited ibp_draw_core from PyTensor's cache)."""
    from pytensor.link.numba.dispatch.random import numba_core_rv_funcify

    _, key = numba_core_rv_funcify(ibp_module.ibp_rv, None)
    assert key == source_cache_key(ibp_module.__file__, ibp_module.ibp_math.__file__)
