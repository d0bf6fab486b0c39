"""pm.sample's defaults on the correlated models start each chain by the chained start of the
category-feature matrix M (IBPGibbs with :class:`pymc_ibp.init.chained.ChainedStart`) and find
the planted glyphs in every chain; a start the user gives is kept."""

import numpy as np
import pymc as pm
import pytest

import pymc_ibp as pmi

DATA = pmi.datasets.block_combinations(150, noise=0.5, seed=7)


def _model(kind, likelihood_sigma=0.5):
    n, d = DATA.X.shape
    with pm.Model() as model:
        if kind == "dp_ibp":
            Z = pmi.dp_ibp("Z", pm.Gamma("alpha_c", 1, 1), pm.Gamma("alpha_m", 1, 1), l_max=15,
                           shape=(n, 8))
        elif kind == "ibp_ibp":
            Z = pmi.ibp_ibp("Z", 1.0, 1.0, l_max=10, shape=(n, 8))
        else:
            Z = pmi.noisy_or_ibp_ibp("Z", 1.0, 1.0, pm.Beta("q", 1, 1), l_max=10, shape=(n, 8))
        A = pm.Normal("A", 0.0, 1.0, shape=(8, d))
        pm.Normal("X", mu=Z @ A, sigma=likelihood_sigma, observed=DATA.X)
    return model


def _found(Z, truth, at=0.95):
    """Whether every planted feature has a column of ``Z`` agreeing with it on ``at`` of the
    rows and no other column is used by more than 3% of them."""
    act = np.flatnonzero(Z.sum(axis=0))
    if act.size < truth.shape[1]:
        return False
    agree = np.array([[np.mean(Z[:, k] == truth[:, g]) for g in range(truth.shape[1])]
                      for k in act])
    best = act[np.argmax(agree, axis=0)]
    others = np.setdiff1d(act, best)
    return (bool(np.all(agree.max(axis=0) >= at)) and len(set(best)) == truth.shape[1]
            and bool(np.all(Z[:, others].sum(axis=0) <= 0.03 * len(Z))))


@pytest.mark.filterwarnings("ignore::pymc_ibp.TruncationWarning")
@pytest.mark.parametrize("kind", ["dp_ibp", "ibp_ibp", "noisy_or"])
def test_every_chain_finds_the_planted_glyphs(kind):
    """Two chains of 60 + 40 iterations (pm.sample's step assignment): the last draw of each
    finds the four glyphs (without the chained start the DP-IBP's chains end with K+ of 2-3
    and the IBP-IBP's with 1)."""
    with _model(kind):
        idata = pm.sample(tune=60, draws=40, chains=2, cores=1, random_seed=4,
                          progressbar=False, compute_convergence_checks=False)
    Z = idata.posterior["Z"].values
    truth = np.asarray(DATA.Z)
    assert all(_found(Z[ch, -1], truth) for ch in range(2))


@pytest.mark.filterwarnings("ignore::pymc_ibp.TruncationWarning")
def test_a_given_start_or_init_z_point_is_kept():
    """init_z="point" and labels the user gives (pm.sample(initvals=...); all-zero labels are
    PyMC's own start, which counts as not given) start there: the first draw is one step from
    it, not the chained start's four glyphs."""
    n = DATA.X.shape[0]
    with _model("dp_ibp") as model:
        step = pmi.IBPGibbs([model["Z_M"]], init_z="point")
        idata = pm.sample(tune=0, draws=1, chains=1, step=[step], random_seed=4,
                          progressbar=False, compute_convergence_checks=False)
        given = pm.sample(tune=0, draws=1, chains=1, random_seed=4,
                          initvals={"Z_c": np.arange(n) % 2}, progressbar=False,
                          compute_convergence_checks=False)
    for run in (idata, given):
        assert not _found(run.posterior["Z"].values[0, 0], np.asarray(DATA.Z))
