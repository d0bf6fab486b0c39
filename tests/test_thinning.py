"""pmi.KeepEvery: Z kept at every k-th draw outside pm.sample's trace, and Z's int8 dtype."""

import numpy as np
import pymc as pm
import pytest

import pymc_ibp as pmi
from tests._helpers import readme_model

X = pmi.datasets.block_images(40, seed=3).X
SCALARS = ["alpha", "sigma_x", "sigma_a"]


def run(model, **kwargs):
    with model:
        return pm.sample(tune=10, draws=21, chains=2, random_seed=11, progressbar=False,
                         compute_convergence_checks=False, **kwargs)


@pytest.mark.filterwarnings("ignore::pymc_ibp.TruncationWarning")  # K_max = 8 at N = 40
@pytest.mark.filterwarnings("ignore::pymc_ibp.UntrustedChainsWarning")  # summary's K_max line
@pytest.mark.parametrize("cores", [1, 2])
def test_thinned_z_matches_the_full_trace(cores):
    """Leaving Z out of the trace does not change the chain: the thinned Z equals the full
    trace's Z at draws 0, 5, 10, 15, 20, with the other variables and stats at the same draws;
    the int8 dtype is kept end to end."""
    model = readme_model(X)
    full = run(model, cores=1)
    assert full["posterior"]["Z"].dtype == np.int8
    with model:
        keep = pmi.KeepEvery(5, var_names=["Z"])
    out = keep.thin(run(model, cores=cores, var_names=SCALARS + ["A"], callback=keep))
    post = out["posterior"]
    np.testing.assert_array_equal(post["draw"].values, [0, 5, 10, 15, 20])
    assert post["Z"].dims == ("chain", "draw", "obs", "feature")
    assert post["Z"].dtype == np.int8
    sel = full["posterior"].isel(draw=[0, 5, 10, 15, 20])
    for name in ["Z", "A", *SCALARS]:
        np.testing.assert_array_equal(post[name].values, sel[name].values)
    np.testing.assert_array_equal(out["sample_stats"]["ibp_log_joint"].values,
                                  full["sample_stats"]["ibp_log_joint"].isel(
                                      draw=[0, 5, 10, 15, 20]).values)
    # the diagnostics read it like a full trace
    assert "ibp_n_active" in pmi.summary(out).index


def test_refuses_what_it_cannot_keep():
    model = readme_model(X)
    with model:
        with pytest.raises(ValueError, match="transformed"):
            pmi.KeepEvery(2, var_names=["sigma_x"])
        with pytest.raises(ValueError, match="not a variable"):
            pmi.KeepEvery(2, var_names=["W"])
        with pytest.raises(ValueError, match="every >= 1"):
            pmi.KeepEvery(0)
        keep = pmi.KeepEvery(2)
    with pytest.raises(ValueError, match="kept nothing"):
        keep.thin(None)
