"""pmi.likelihoods: the binary leaky noisy-or and noisy-detection probabilities, and IBPGibbs
sampling the exact posterior of Z under each (enumeration, A fixed)."""

import numpy as np
import pymc as pm
import pytensor
import pytensor.tensor as pt
import pytest
from scipy import special

import pymc_ibp as pmi
from tests._helpers import all_binary_matrices, chi2_pooled, codes

A_BIN = np.array([[1, 1, 0], [0, 1, 1], [1, 0, 0]])
X_BIN = np.array([[1, 1, 0], [0, 1, 1], [1, 1, 1]])


def test_probabilities_follow_their_formulas():
    Z = np.array([[1, 0, 1], [0, 0, 0], [1, 1, 1]])
    s = Z @ A_BIN
    p = pmi.likelihoods.leaky_noisy_or(Z, A_BIN, 0.1, np.array([0.8, 0.6, 0.7])).eval()
    np.testing.assert_allclose(p, 1 - 0.9 * np.array([0.2, 0.4, 0.3]) ** s)
    assert np.allclose(p[1], 0.1)  # no parent: the leak only
    q = pmi.likelihoods.noisy_detection(Z, A_BIN, np.array([0.05, 0.1, 0.2]), 0.3).eval()
    np.testing.assert_allclose(q, np.where(s > 0, 0.7, [0.05, 0.1, 0.2]))
    with pytest.raises(ValueError, match="leak"):
        pmi.likelihoods.leaky_noisy_or(Z, A_BIN, 1.5, 0.5)
    with pytest.raises(ValueError, match="miss_rate"):
        pmi.likelihoods.noisy_detection(Z, A_BIN, 0.1, np.nan)


@pytest.mark.filterwarnings("ignore::pymc_ibp.TruncationWarning")  # K_max = 3 binds by design
@pytest.mark.parametrize("kind", ["noisy_or", "detection"])
def test_ibpgibbs_samples_the_exact_posterior(kind):
    with pm.Model() as model:
        Z = pmi.IBP("Z", 1.5, shape=(3, 3))
        if kind == "noisy_or":
            p = pmi.likelihoods.leaky_noisy_or(Z, A_BIN, 0.1, 0.8)
        else:
            p = pmi.likelihoods.noisy_detection(Z, A_BIN, 0.1, 0.2)
        pm.Bernoulli("X", p=p, observed=X_BIN)
        step = pmi.IBPGibbs([Z])
    mats = all_binary_matrices(3, 3)
    value = pt.tensor3("v", dtype="int64")
    lp = pytensor.function([value], pm.logp(pmi.IBP.dist(1.5, shape=(3, 3)), value))(mats)
    s = mats @ A_BIN
    if kind == "noisy_or":
        pz = 1 - 0.9 * 0.2**s
    else:
        pz = np.where(s > 0, 0.8, 0.1)
    lp += np.sum(X_BIN * np.log(pz) + (1 - X_BIN) * np.log1p(-pz), axis=(1, 2))
    post = np.exp(lp - special.logsumexp(lp))
    step.setup_chain(np.random.default_rng(2), tune=0, draws=1)
    point = model.initial_point()
    out = []
    for it in range(8_000):
        point, _ = step.step(point)
        if it % 2 == 0:
            out.append(codes(point["Z"][None])[0])
    counts = np.bincount(out, minlength=len(mats))[codes(mats)]
    res = chi2_pooled(counts, post * len(out))
    assert res.pvalue > 1e-3, res
