"""``pm.Potential`` is honoured or refused, never dropped: IBPGibbs includes the potentials on
what it changes (each entry's conditional, a second acceptance stage of each move); every
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
from tests._helpers import all_binary_matrices, chi2_pooled, codes, exact_posterior

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
    fails: without them in the entries' conditionals p = 0 (χ² 4118), without the second
    acceptance stage of the moves p = 1e-14 (measured)."""
    model = _logit_model()
    with model:
        step = pmi.IBPGibbs([model["Z"]], factorise=factorise)
    mats, post = _exact_logit_posterior()
    draws = _visits(step, model, 6000, seed=3)
    counts = np.bincount(codes(draws), minlength=len(mats))[codes(mats)]
    res = chi2_pooled(counts, post * len(draws))
    assert res.pvalue > 1e-3, res


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
