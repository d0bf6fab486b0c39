"""pmi.sample_smc with the generic kernel (Metropolis-within-Gibbs on the model's own density):
the log evidence of tiny DP-IBP, stick-breaking, Bernoulli-likelihood and potential-carrying
models agrees with the exact one (a finite sum over every discrete value, with a quadrature
or a closed form for the continuous ones), and the particles follow the posterior."""

import itertools
import logging

import numpy as np
import pymc as pm
import pytensor
import pytensor.tensor as pt
import pytest
from scipy import special, stats

import pymc_ibp as pmi
from tests._helpers import ENUM_X, all_binary_matrices, ibp_logp_fn

RUNS, PARTICLES = 8, 300


def _gaussian_marginal(Z, X, sx=0.5, sa=1.0):
    """log p(X | Z), A ~ Normal(0, sa) integrated out column by column."""
    n = X.shape[0]
    cov = sa**2 * Z @ Z.T.astype(float) + sx**2 * np.eye(n)
    return sum(stats.multivariate_normal.logpdf(X[:, j], np.zeros(n), cov)
               for j in range(X.shape[1]))


def _ibp_logp_in_alpha(n, k):
    """log P(Z | alpha) of a batch of matrices, compiled once for any alpha."""
    a, v = pt.scalar("a"), pt.tensor3("v", dtype="int64")
    return pytensor.function([a, v], pm.logp(pmi.IBP.dist(a, 1.0, shape=(n, k)), v))


def _runs(model, **kwargs):
    """log p(X) of RUNS independent runs, their mean and standard error, and the result."""
    kwargs = {"draws": PARTICLES, "chains": RUNS, "cores": 1, "random_seed": 1, **kwargs}
    idata = pmi.sample_smc(model, **kwargs)
    logz = idata["sample_stats"]["log_marginal_likelihood"].values
    return logz.mean(), logz.std(ddof=1) / np.sqrt(logz.size), idata


def _agrees(model, exact, tol=0.1, **kwargs):
    mean, se, idata = _runs(model, **kwargs)
    assert abs(mean - exact) < max(4 * se, 0.06), (mean, exact, se)  # se of 8 runs is rough
    assert abs(mean - exact) < tol, (mean, exact, se)
    assert idata["posterior"].attrs["mutation_kernel"] == "gibbs"
    return idata


def test_the_generic_kernel_gives_the_linear_gaussian_evidence_with_a_potential():
    """The README pattern with a potential on Z (which the accelerated kernel cannot carry:
    the model takes the generic one): log p(X) = log sum_Z P(Z) e^pot(Z) p(X | Z), and the
    particles' means of K+ and of the total of A are the exact posterior means."""
    X, n = ENUM_X, ENUM_X.shape[0]
    mats = all_binary_matrices(n, 3)
    pot = -0.8 * mats.sum(axis=(1, 2))
    lp = ibp_logp_fn(n, 3, 1.5)(mats) + pot + np.array([_gaussian_marginal(Z, X)
                                                        for Z in mats])
    exact = special.logsumexp(lp)
    with pm.Model() as model:
        Z = pmi.IBP("Z", 1.5, shape=(n, 3))
        A = pm.Normal("A", 0.0, 1.0, shape=(3, 2))
        pm.Normal("X", Z @ A, 0.5, observed=X)
        pm.Potential("fewer_ones", -0.8 * Z.sum())
    idata = _agrees(model, exact)
    k_plus = (mats.sum(axis=1) > 0).sum(axis=1)
    exact_k = float(np.exp(special.logsumexp(lp, b=k_plus) - exact))
    got = float((idata["posterior"]["Z"].values.sum(axis=2) > 0).sum(axis=-1).mean())
    assert abs(got - exact_k) < 0.05, (got, exact_k)
    # A is integrated out and drawn at the end from its Gaussian conditional: the posterior
    # mean of its total, sum_Z p(Z | X) 1'(Z'Z + 0.25 I)^-1 Z'X
    post_z = np.exp(lp - exact)
    mean_a = sum(w * np.linalg.solve(Z.T @ Z + 0.25 * np.eye(3), Z.T @ X).sum()
                 for w, Z in zip(post_z, mats.astype(float), strict=True))
    assert abs(float(idata["posterior"]["A"].values.sum(axis=(2, 3)).mean()) - mean_a) < 0.1


def test_the_dp_ibp_evidence_agrees_with_enumeration():
    """Z = M[c], c ~ CRP(1) with at most 2 categories, M ~ IBP(1.5) of 2 x 2, N = 3: the sum
    over 8 labellings and 16 category matrices, A integrated out exactly; and the posterior
    probability that the first two rows share a category."""
    X, n = ENUM_X, ENUM_X.shape[0]
    labels = np.array(list(itertools.product(range(2), repeat=n)))
    crp = pm.logp(pmi.CRP.dist(1.0, l_max=2, shape=n), labels).eval()
    mats = all_binary_matrices(2, 2)
    ibp = ibp_logp_fn(2, 2, 1.5)(mats)
    lp = np.array([[crp[i] + ibp[j] + _gaussian_marginal(M[c], X)
                    for j, M in enumerate(mats)] for i, c in enumerate(labels)])
    exact = special.logsumexp(lp)
    with pm.Model() as model:
        Z = pmi.dp_ibp("Z", 1.0, 1.5, l_max=2, shape=(n, 2))
        A = pm.Normal("A", 0.0, 1.0, shape=(2, 2))
        pm.Normal("X", Z @ A, 0.5, observed=X)
    idata = _agrees(model, exact)
    same = (labels[:, 0] == labels[:, 1]).astype(float)
    exact_same = float(np.exp(special.logsumexp(lp, b=same[:, None]) - exact))
    c = idata["posterior"]["Z_c"].values
    assert abs(float((c[..., 0] == c[..., 1]).mean()) - exact_same) < 0.05
    assert idata["posterior"]["Z"].shape == (RUNS, PARTICLES, n, 2)


def _stick_breaking_log_pmf(Z, alpha):
    """log P(Z) under Z_nk ~ Bernoulli(pi_k), pi_k = prod_{j<=k} v_j, v_j ~ Beta(alpha, 1):
    (1 - pi_k)^(N - m_k) expanded binomially, then E[v^s] = alpha / (alpha + s)."""
    n, k = Z.shape
    m = Z.sum(axis=0)
    total = 0.0
    for r in itertools.product(*[range(n - mk + 1) for mk in m]):
        coef = np.prod([special.comb(n - mk, rk) * (-1) ** rk for mk, rk in zip(m, r,
                                                                                strict=True)])
        e = m + np.array(r)
        s = np.cumsum(e[::-1])[::-1]  # S_j = sum_{k >= j} e_k
        total += coef * np.prod(alpha / (alpha + s))
    return np.log(total)


def test_the_stick_breaking_evidence_agrees_with_its_closed_form():
    """pi ~ IBPStickBreaking(1.5) with 2 sticks, Z ~ Bernoulli(pi) (N = 3): P(Z) in closed
    form, A integrated out exactly; a one-stick check of the closed form against the Beta
    integral."""
    m, n, a = 2, 3, 1.5
    one = _stick_breaking_log_pmf(np.array([[1], [1], [0]]), a)
    np.testing.assert_allclose(one, special.betaln(a + m, n - m + 1) - special.betaln(a, 1))
    X = ENUM_X
    mats = all_binary_matrices(n, 2)
    lp = np.array([_stick_breaking_log_pmf(Z, a) + _gaussian_marginal(Z, X) for Z in mats])
    exact = special.logsumexp(lp)
    with pm.Model() as model:
        pi = pmi.IBPStickBreaking("pi", alpha=a, shape=2)
        Z = pm.Bernoulli("Z", p=pi, shape=(n, 2))
        A = pm.Normal("A", 0.0, 1.0, shape=(2, 2))
        pm.Normal("X", Z @ A, 0.5, observed=X)
    idata = _agrees(model, exact)
    assert np.nanmin(idata["sample_stats"]["accept_rate"].values) > 0.05


XB = np.array([[1, 0, 1], [1, 1, 0], [0, 0, 1]])


def test_a_noisy_or_bernoulli_likelihood_gives_the_exact_evidence():
    """Binary data, Z ~ IBP(1) (3 x 2), binary links Y ~ Bernoulli(0.5) (2 x 3), a leaky
    noisy-or: every one of the 4,096 (Z, Y) pairs summed."""
    n, d = XB.shape
    zs, ys = all_binary_matrices(n, 2), all_binary_matrices(2, d)
    lz = ibp_logp_fn(n, 2, 1.0)(zs)
    lp = np.empty((len(zs), len(ys)))
    for i, Z in enumerate(zs):
        for j, Y in enumerate(ys):
            p = 1.0 - 0.9 * 0.2 ** (Z @ Y)
            lp[i, j] = lz[i] + d * 2 * np.log(0.5) + stats.bernoulli.logpmf(XB, p).sum()
    exact = special.logsumexp(lp)
    with pm.Model() as model:
        Z = pmi.IBP("Z", 1.0, shape=(n, 2))
        Y = pm.Bernoulli("Y", 0.5, shape=(2, d))
        pm.Bernoulli("X", p=pmi.likelihoods.leaky_noisy_or(Z, Y, 0.1, 0.8), observed=XB)
    idata = _agrees(model, exact)
    assert np.isnan(idata["sample_stats"]["accept_rate"].values).all()  # nothing continuous


def test_a_logistic_likelihood_with_a_free_bias_and_alpha_gives_the_exact_evidence():
    """Binary data, Z ~ IBP(alpha) (3 x 2) with alpha ~ Gamma(2, 2), fixed weights W and a
    bias b ~ Normal(0, 1) on the logit scale: quadratures over alpha and b, summed over the
    64 matrices; and the posterior means of b and alpha."""
    n, d = XB.shape
    W = np.array([[2.0, -1.5, 1.0], [-1.0, 2.0, 1.5]])
    mats = all_binary_matrices(n, 2)
    al = np.linspace(1e-4, 12.0, 1501)
    ibp_lp = _ibp_logp_in_alpha(n, 2)
    la = np.array([ibp_lp(x, mats) for x in al]) + stats.gamma.logpdf(al, 2.0, scale=0.5)[:, None]
    prior_z = special.logsumexp(la, axis=0, b=np.gradient(al)[:, None])
    b = np.linspace(-8.0, 8.0, 2001)
    eta = np.einsum("mnk,kd->mnd", mats, W)[:, None] + b[None, :, None, None]
    lik = (XB * eta - np.logaddexp(0.0, eta)).sum(axis=(2, 3)) + stats.norm.logpdf(b)
    lik_z = special.logsumexp(lik, axis=1, b=b[1] - b[0])
    exact = special.logsumexp(prior_z + lik_z)
    post_b = np.exp(special.logsumexp(prior_z[:, None] + lik, axis=0) - exact) * (b[1] - b[0])
    mean_b = float((post_b * b).sum())
    mean_alpha = np.exp(special.logsumexp(special.logsumexp(
        la, axis=0, b=(al * np.gradient(al))[:, None]) + lik_z) - exact)
    with pm.Model() as model:
        Z = pmi.IBP("Z", pm.Gamma("alpha", 2.0, 2.0), shape=(n, 2))
        bias = pm.Normal("b", 0.0, 1.0)
        pm.Bernoulli("X", logit_p=Z @ W + bias, observed=XB)
    idata = _agrees(model, exact)
    assert abs(float(idata["posterior"]["b"].mean()) - mean_b) < 0.1
    assert abs(float(idata["posterior"]["alpha"].mean()) - mean_alpha) < 0.05, mean_alpha


def test_the_kernel_is_chosen_and_said():
    """auto: the accelerated kernel for the linear-Gaussian pattern, the generic one (with a
    log line saying why) otherwise; accelerated refuses a model without its pattern."""
    with pm.Model() as lg:
        Z = pmi.IBP("Z", 1.0, shape=(3, 2))
        pm.Normal("X", Z @ pm.Normal("A", 0.0, 1.0, shape=(2, 2)), 0.5, observed=ENUM_X)
    idata = pmi.sample_smc(lg, draws=20, chains=1, cores=1, random_seed=0)
    assert idata["posterior"].attrs["mutation_kernel"] == "accelerated"
    with pm.Model() as dp:
        Z = pmi.dp_ibp("Z", 1.0, 1.0, l_max=2, shape=(3, 2))
        pm.Normal("X", Z @ pm.Normal("A", 0.0, 1.0, shape=(2, 2)), 0.5, observed=ENUM_X)
    with pytest.raises(pmi.ModelPatternError):
        pmi.sample_smc(dp, kernel="accelerated")
    with pytest.raises(ValueError, match="kernel"):
        pmi.sample_smc(dp, kernel="nuts")
    records = []

    class Keep(logging.Handler):
        def emit(self, record):
            records.append(record.getMessage())

    handler, log = Keep(), logging.getLogger("pymc")
    level = log.level
    log.addHandler(handler)
    log.setLevel(logging.INFO)
    try:
        idata = pmi.sample_smc(dp, draws=20, chains=1, cores=1, random_seed=0)
    finally:
        log.removeHandler(handler)
        log.setLevel(level)
    assert any("generic Metropolis-within-Gibbs kernel" in r for r in records), records
    assert idata["posterior"].attrs["mutation_kernel"] == "gibbs"


@pytest.mark.filterwarnings("ignore::pymc_ibp.UntrustedChainsWarning")  # 30 particles
def test_one_seed_gives_one_answer_with_the_generic_kernel():
    """The same draws serially and with the chains in forked workers."""
    with pm.Model() as model:
        Z = pmi.dp_ibp("Z", 1.0, 1.0, l_max=2, shape=(3, 2))
        pm.Normal("X", Z @ pm.Normal("A", 0.0, 1.0, shape=(2, 2)), 0.5, observed=ENUM_X)
    a = pmi.sample_smc(model, draws=30, chains=2, cores=1, random_seed=3)
    b = pmi.sample_smc(model, draws=30, chains=2, cores=2, random_seed=3)
    np.testing.assert_array_equal(a["sample_stats"]["log_marginal_likelihood"].values,
                                  b["sample_stats"]["log_marginal_likelihood"].values)
    np.testing.assert_array_equal(a["posterior"]["Z_c"].values, b["posterior"]["Z_c"].values)


def test_an_unbounded_discrete_variable_moves_by_a_random_walk():
    """alpha - 1 ~ Poisson(2) (a ±1 random walk, refused at -1 by its density), Z ~ IBP(alpha)
    (3 x 2): the evidence summed over alpha up to 60 and the 64 matrices, A integrated out;
    and the posterior mean of alpha."""
    X, n = ENUM_X, ENUM_X.shape[0]
    mats = all_binary_matrices(n, 2)
    lik = np.array([_gaussian_marginal(Z, X) for Z in mats])
    ks = np.arange(61)
    ibp_lp = _ibp_logp_in_alpha(n, 2)
    lp = np.array([stats.poisson.logpmf(k, 2.0) + ibp_lp(k + 1.0, mats) + lik for k in ks])
    exact = special.logsumexp(lp)
    mean_alpha = np.exp(special.logsumexp(special.logsumexp(lp, axis=1), b=ks + 1.0) - exact)
    with pm.Model() as model:
        k = pm.Poisson("k", 2.0)
        Z = pmi.IBP("Z", k + 1.0, shape=(n, 2))
        pm.Normal("X", Z @ pm.Normal("A", 0.0, 1.0, shape=(2, 2)), 0.5, observed=X)
    idata = _agrees(model, exact)
    assert abs(float(idata["posterior"]["k"].mean()) + 1.0 - mean_alpha) < 0.15, mean_alpha


def test_a_model_beyond_the_generic_kernels_reach_says_so():
    """20 block images in a DP-IBP (136 alternatives per sweep: 5 other categories for each of
    20 labels, and the 36 entries of M; A integrated out): one line says that the generic
    kernel is not to be trusted there (its runs found at most 2 of the 4 features and agreed,
    benchmarks/results/smc_generic.md)."""
    X = pmi.datasets.block_combinations(20, noise=0.5, seed=7).X
    with pm.Model() as model:
        Z = pmi.dp_ibp("Z", 1.0, 1.0, l_max=6, shape=(20, 6))
        pm.Normal("X", Z @ pm.Normal("A", 0.0, 1.0, shape=(6, 36)), 0.5, observed=X)
    with pytest.warns(pmi.UntrustedChainsWarning, match="reliable only on small models"):
        pmi.sample_smc(model, draws=4, chains=1, cores=1, sweeps=1, random_seed=0)


def test_features_with_a_scale_per_feature_move_by_the_random_walk():
    """sigma_a of shape (K, 1) (one scale per feature: A is not integrated out, its entries
    move by the random walk), Z ~ IBP(1.2) of 3 x 2: the evidence with the covariance
    Z diag(sa²) Z' + sx² I per column, summed over the 64 matrices."""
    X, n = ENUM_X, ENUM_X.shape[0]
    sa = np.array([0.7, 1.6])
    mats = all_binary_matrices(n, 2)
    lp = ibp_logp_fn(n, 2, 1.2)(mats)
    for i, Z in enumerate(mats):
        cov = Z @ np.diag(sa**2) @ Z.T + 0.25 * np.eye(n)
        lp[i] += sum(stats.multivariate_normal.logpdf(X[:, j], np.zeros(n), cov)
                     for j in range(2))
    with pm.Model() as model:
        Z = pmi.IBP("Z", 1.2, shape=(n, 2))
        A = pm.Normal("A", 0.0, sa[:, None], shape=(2, 2))
        pm.Normal("X", Z @ A, 0.5, observed=X)
    idata = _agrees(model, special.logsumexp(lp))
    assert np.nanmin(idata["sample_stats"]["accept_rate"].values) > 0.05


@pytest.mark.slow  # about a minute: two kernels, 4 runs of 200 particles each
def test_the_generic_and_accelerated_kernels_agree_beyond_enumeration():
    """Planted data of two features, 10 x 12, K_max = 4 (too many matrices to enumerate):
    the generic kernel (A integrated out, single-entry Gibbs) and the accelerated one give
    the same evidence within 0.5 nats (measured: within 0.2; with A moved as one random-walk
    block instead of integrated out, 25-60 nats low)."""
    rng = np.random.default_rng(1)
    Z0 = (rng.random((10, 2)) < 0.5).astype(int)
    X = Z0 @ rng.normal(0.0, 1.5, (2, 12)) + 0.5 * rng.normal(size=(10, 12))
    with pm.Model() as model:
        Z = pmi.IBP("Z", 1.0, shape=(10, 4))
        pm.Normal("X", Z @ pm.Normal("A", 0.0, 1.0, shape=(4, 12)), 0.5, observed=X)
    z = {}
    for kernel in ("accelerated", "gibbs"):
        idata = pmi.sample_smc(model, draws=200, chains=4, cores=1, kernel=kernel,
                               random_seed=2)
        z[kernel] = idata["sample_stats"]["log_marginal_likelihood"].values
    assert abs(z["gibbs"].mean() - z["accelerated"].mean()) < 0.5, z
