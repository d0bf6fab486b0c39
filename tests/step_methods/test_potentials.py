"""``pm.Potential`` is honoured or refused, never dropped: IBPGibbs includes the potentials on
what it changes (each entry's conditional, the acceptance ratio of each move) and starts
where they put the chain; every
other step of the plugin declines the variables a potential depends on, and refuses them when
built explicitly."""

import logging

import numpy as np
import pymc as pm
import pytensor
import pytensor.tensor as pt
import pytest
from pymc.step_methods.compound import Competence
from scipy import special

import pymc_ibp as pmi
from pymc_ibp.exceptions import ModelPatternError
from tests._helpers import all_binary_matrices, chi2_pooled, codes, exact_posterior, ibp_logp_fn

N, K = 3, 2
A_FIXED = np.array([[2.0, -1.0], [-1.5, 2.0]])
B_FIXED = np.array([-0.5, -0.5])
X_BIN = np.array([[1, 0], [0, 1], [1, 1]])
ALPHA = 1.5


def _potential(Z):
    """Not a product over rows: a price per feature in use and a bonus for pairs."""
    return -1.2 * (Z.sum(axis=0) > 0).sum() + 0.8 * (Z[:, 0] * Z[:, 1]).sum()


def _logit_model():
    with pm.Model() as model:
        Z = pmi.IBP("Z", ALPHA, shape=(N, K))
        pm.Bernoulli("X", logit_p=Z @ A_FIXED + B_FIXED, observed=X_BIN)
        pm.Potential("phi", _potential(Z))
    return model


def _exact_logit_posterior():
    mats = all_binary_matrices(N, K)
    value = pt.tensor3("v", dtype="int64")
    prior = pytensor.function([value], pm.logp(pmi.IBP.dist(ALPHA, shape=(N, K)), value))(mats)
    logits = mats @ A_FIXED + B_FIXED
    loglik = np.sum(X_BIN * logits - np.logaddexp(0, logits), axis=(1, 2))
    phi = np.array([-1.2 * (z.sum(axis=0) > 0).sum() + 0.8 * (z[:, 0] * z[:, 1]).sum()
                    for z in mats])
    lp = prior + loglik + phi
    return mats, np.exp(lp - special.logsumexp(lp))


def _visits(step, model, sweeps, seed):
    step.setup_chain(np.random.default_rng(seed), tune=0, draws=sweeps)
    point = model.initial_point()
    out = []
    for _ in range(sweeps):
        point, _ = step.step(point)
        out.append(point["Z"].copy())
    return np.array(out)


@pytest.mark.filterwarnings("ignore::pymc_ibp.TruncationWarning")  # K_max = 2 binds by design
@pytest.mark.parametrize("factorise", [None, False])
def test_ibpgibbs_samples_the_posterior_with_a_potential_on_z(factorise):
    """A potential on Z that is not a product over rows, with a Bernoulli likelihood: IBPGibbs
    visits the 64 labelled matrices as often as the exact posterior (likelihood, IBP prior
    and potential) says, with its row-wise sweep and moves and with the entry-wise sweep of a
    likelihood taken as a whole (factorise=False).  Without the potential's terms the test
    fails: without them in the entries' conditionals p = 0 (χ² 4118), without them in the
    moves' acceptance ratios p = 8e-15 (measured)."""
    model = _logit_model()
    with model:
        step = pmi.IBPGibbs([model["Z"]], factorise=factorise)
    mats, post = _exact_logit_posterior()
    draws = _visits(step, model, 6000, seed=3)
    counts = np.bincount(codes(draws), minlength=len(mats))[codes(mats)]
    res = chi2_pooled(counts, post * len(draws))
    assert res.pvalue > 1e-3, res


@pytest.mark.filterwarnings("ignore::pymc_ibp.TruncationWarning")  # K_max = 4 at N = 12
def test_steps_that_cannot_include_a_potential_decline_and_refuse(caplog):
    """A potential on A of a linear-Gaussian model: AcceleratedGibbs declines Z (it
    integrates A out) and A, with one log line each; pm.sample gives Z to IBPGibbs (which
    includes it) and A to NUTS; AcceleratedGibbs built for Z raises, naming the potential and
    the fix.  A potential on alpha: IBPAlphaGibbs declines alpha."""
    X = pmi.datasets.block_images(12, noise=0.5, seed=1).X
    with pm.Model():
        alpha = pm.Gamma("alpha", 2.0, 2.0)
        Z = pmi.IBP("Z", alpha, shape=(12, 4))
        A = pm.Normal("A", 0.0, 1.0, shape=(4, 36))
        pm.Normal("X", Z @ A, 0.5, observed=X)
        pm.Potential("ridge", -2.0 * (A ** 2).sum())
        pm.Potential("a_cap", -alpha)
        with caplog.at_level(logging.INFO, logger="pymc"):
            assert pmi.AcceleratedGibbs.competence(Z, False) == Competence.INCOMPATIBLE
            assert pmi.AcceleratedGibbs.competence(A, True) == Competence.INCOMPATIBLE
            assert pmi.IBPAlphaGibbs.competence(alpha, True) == Competence.INCOMPATIBLE
        assert "AcceleratedGibbs declines 'Z': the model's pm.Potential 'ridge'" in caplog.text
        with pytest.raises(ModelPatternError, match=r"AcceleratedGibbs cannot include the "
                                                    r"model's pm.Potential 'ridge'.*'A'"):
            pmi.AcceleratedGibbs([Z])
        idata = pm.sample(tune=2, draws=2, chains=1, random_seed=1, progressbar=False,
                          compute_convergence_checks=False)
    names = set(idata["sample_stats"].data_vars)
    assert "ibp_combination_accepted" in names  # IBPGibbs on Z
    assert "step_size" in names  # NUTS on A (and alpha)


@pytest.mark.slow  # about 60 s
@pytest.mark.filterwarnings("ignore::pymc_ibp.TruncationWarning")  # K_max = 2 binds by design
def test_a_potential_on_a_is_honoured_by_the_steps_pm_sample_assigns():
    """A ridge potential on A with A ~ Normal(0, 1) is A ~ Normal(0, s) with 1/s² = 1 + 2c:
    pm.sample (IBPGibbs on Z with its feature moves, NUTS on A) visits Z as the exact
    posterior of that model (A integrated out) says."""
    X = np.array([[1.1, -0.2], [0.1, 0.9], [1.2, 0.8]])
    c = 1.5
    with pm.Model():
        Z = pmi.IBP("Z", ALPHA, shape=(N, K))
        A = pm.Normal("A", 0.0, 1.0, shape=(K, 2))
        pm.Normal("X", Z @ A, 0.5, observed=X)
        pm.Potential("ridge", -c * (A ** 2).sum())
        idata = pm.sample(tune=500, draws=12000, chains=1, random_seed=5, progressbar=False,
                          compute_convergence_checks=False)
    mats, post = exact_posterior(X, K, ALPHA, 0.5, (1.0 + 2.0 * c) ** -0.5)
    draws = idata["posterior"]["Z"].values[0, ::3]
    counts = np.bincount(codes(draws), minlength=len(mats))[codes(mats)]
    res = chi2_pooled(counts, post * len(draws))
    assert res.pvalue > 1e-3, res


@pytest.mark.filterwarnings("ignore::pymc_ibp.TruncationWarning")  # K_max = 2 binds by design
def test_feature_moves_include_a_potential_on_z():
    """A potential on Z of a linear-Gaussian model with A free: pm.sample (IBPGibbs on Z, whose
    feature moves change Z and A together, AcceleratedGibbs on A given Z) visits Z as the
    exact posterior (A integrated out, IBP prior times the potential) says.  With the
    potential left out of the moves' acceptance ratios (the entries' conditionals keep it)
    the test fails (measured)."""
    X = np.array([[1.1, -0.2], [0.1, 0.9], [1.2, 0.8]])
    with pm.Model():
        Z = pmi.IBP("Z", ALPHA, shape=(N, K))
        A = pm.Normal("A", 0.0, 1.0, shape=(K, 2))
        pm.Normal("X", Z @ A, 0.5, observed=X)
        pm.Potential("phi", _potential(Z))
        idata = pm.sample(tune=200, draws=6000, chains=1, random_seed=7, progressbar=False,
                          compute_convergence_checks=False)
    prior = ibp_logp_fn(N, K, ALPHA, 1.0)
    mats, post = exact_posterior(
        X, K, ALPHA, 0.5, 1.0,
        log_prior=lambda mats: prior(mats) + np.array([_potential(z) for z in mats]))
    draws = idata["posterior"]["Z"].values[0, ::2]
    counts = np.bincount(codes(draws), minlength=len(mats))[codes(mats)]
    res = chi2_pooled(counts, post * len(draws))
    assert res.pvalue > 1e-3, res


@pytest.mark.filterwarnings("ignore::pymc_ibp.TruncationWarning")  # K_max binds (12 of 12)
def test_a_potential_capping_the_features_is_honoured_from_the_start(caplog):
    """Issue 67's example: a potential allowing at most two features on 200 block images
    (four planted).  Dropping two features costs the likelihood 1191-1675 nats against the
    2000 the potential saves, so the posterior has K+ = 2; pm.sample's defaults give every
    draw K+ = 2, the start search's four features pruned by the model's log density.
    Without the pruning the chain starts at K+ = 4 and is still at 3 here (measured); the
    log line names the potential AcceleratedGibbs cannot include."""
    X = pmi.datasets.block_images(200, noise=0.5, seed=1).X
    with pm.Model():
        Z = pmi.IBP("Z", 1.0, shape=(200, 12))
        A = pm.Normal("A", 0, 1, shape=(12, 36))
        pm.Normal("X", Z @ A, 0.5, observed=X)
        pm.Potential("kcap", -1000.0 * pm.math.maximum((Z.sum(axis=0) > 0).sum() - 2, 0))
        with caplog.at_level(logging.INFO, logger="pymc"):
            idata = pm.sample(tune=30, draws=30, chains=1, random_seed=2, progressbar=False,
                              compute_convergence_checks=False)
    assert ("IBPGibbs for 'Z' (AcceleratedGibbs cannot include the model's pm.Potential "
            "'kcap')") in caplog.text
    k_plus = (idata["posterior"]["Z"].values.sum(axis=2) > 0).sum(axis=-1)
    assert np.all(k_plus == 2), np.bincount(k_plus.ravel())
