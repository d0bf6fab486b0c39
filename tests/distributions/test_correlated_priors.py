"""Prior moments of the correlated feature models (Doshi-Velez 2009, §7.2.1-7.2.3, eq. 7.4):
the number of occupied categories N_C and, given N_C, the number of features N_f used by those
categories, N_f | N_C ~ Poisson(α_M H_{N_C}), by Monte Carlo over exact prior draws."""

import numpy as np
import pymc as pm
import pytest

import pymc_ibp as pmi
from pymc_ibp.distributions.ibp_math import harmonic_mass, ibp_mass

N, L_MAX, K_MAX = 20, 20, 30
ALPHA_C, ALPHA_M = 1.5, 1.2
DRAWS = 3000


def _draws(builder):
    with pm.Model() as model:
        if builder == "dp_ibp":
            pmi.dp_ibp("Z", ALPHA_C, ALPHA_M, l_max=L_MAX, shape=(N, K_MAX))
            names = ("Z_c", "Z_M")
        else:
            build = pmi.ibp_ibp if builder == "ibp_ibp" else pmi.noisy_or_ibp_ibp
            args = (ALPHA_C, ALPHA_M) if builder == "ibp_ibp" else (ALPHA_C, ALPHA_M, 0.3)
            build("Z", *args, l_max=L_MAX, shape=(N, K_MAX))
            names = ("Z_C", "Z_M")
    return pm.draw([model[v] for v in names], draws=DRAWS, random_seed=5)


def _counts(builder, cats, M):
    if builder == "dp_ibp":
        occupied = np.unique(cats)
    else:
        occupied = np.flatnonzero(cats.sum(axis=0) > 0)
    return occupied.size, int((M[occupied].sum(axis=0) > 0).sum())


@pytest.mark.parametrize("builder", ["dp_ibp", "ibp_ibp", "noisy_or_ibp_ibp"])
def test_categories_and_features_have_the_prior_means(builder):
    n_c, n_f = np.array([_counts(builder, c, M) for c, M in zip(*_draws(builder), strict=True)]).T
    # E[N_C]: CRP tables Σ α/(α+i-1) (l_max = N: no truncation), or IBP columns α H_N
    expected_c = (harmonic_mass(ALPHA_C, N) if builder == "dp_ibp"
                  else ibp_mass(ALPHA_C, 1.0, N))
    se = n_c.std(ddof=1) / np.sqrt(DRAWS)
    assert abs(n_c.mean() - expected_c) < 4 * se, (n_c.mean(), expected_c)
    # N_f | N_C ~ Poisson(α_M H_{N_C}): the residual has mean 0 and the Poisson variance
    lam = np.array([ibp_mass(ALPHA_M, 1.0, int(k)) for k in n_c])
    resid = n_f - lam
    assert abs(resid.mean()) < 4 * np.sqrt(lam.mean() / DRAWS), resid.mean()
    assert abs(np.mean(resid**2) / lam.mean() - 1.0) < 0.1
