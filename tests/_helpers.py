"""The shared exact-enumeration harness of the statistical tests: every binary matrix of a
tiny problem, its exact posterior, chain runners, the pooled χ² test, and the Monte Carlo
standard error of a chain's mean with the Geweke (2004) z-score built on it."""

import itertools

import numpy as np
import pymc as pm
import pytensor
import pytensor.tensor as pt
from arviz_stats.base import array_stats
from scipy import special, stats

import pymc_ibp as pmi

#: seconds the distributed tests wait for a shard's sweeps or a restarted worker: a slow,
#: loaded CI machine took over 60 s (a lost worker is still seen at once, through its futures)
DIST_WAIT = 180

#: the 3 x 2 data set of the exact-enumeration tests (512 labelled 3 x 3 matrices)
ENUM_X = np.array([[1.2, -0.3], [1.0, 0.9], [0.1, 1.1]])


def all_binary_matrices(n, k):
    """Every binary n x k matrix, shape (2**(n*k), n, k)."""
    bits = np.array(list(itertools.product([0, 1], repeat=n * k)), dtype=np.int64)
    return bits.reshape(-1, n, k)


def codes(mats):
    """Integer code of each binary matrix in a batch (row-major bits)."""
    flat = mats.reshape(mats.shape[0], -1)
    return flat @ (1 << np.arange(flat.shape[1])[::-1])


def chi2_pooled(observed, expected, min_expected=5.0):
    """Pearson χ² after pooling cells with expectation < min_expected into one cell."""
    observed = np.asarray(observed, float)
    expected = np.asarray(expected, float)
    small = expected < min_expected
    obs = np.append(observed[~small], observed[small].sum())
    exp = np.append(expected[~small], expected[small].sum())
    keep = exp > 0
    obs, exp = obs[keep], exp[keep]
    return stats.chisquare(obs, exp * obs.sum() / exp.sum())


def mcse_mean(x, n_batches=50):
    """Monte Carlo standard error of the mean of a correlated chain ``x`` (shape (n,) or
    (n, p), one column per test function): the larger of the batch-means estimate
    (``n_batches`` batches) and ArviZ's ESS-based one (sd / sqrt(ESS), Geyer's initial
    monotone sequence), so that neither a slow-mixing column (too few batches' worth of
    independent draws) nor a short batch length makes the error look smaller than it is."""
    x = np.asarray(x, dtype=float)
    cols = x.reshape(len(x), -1)
    b = cols[: len(cols) // n_batches * n_batches].reshape(n_batches, -1, cols.shape[1])
    se_batch = b.mean(axis=1).std(axis=0, ddof=1) / np.sqrt(n_batches)
    ess = np.array([array_stats.ess(cols[None, :, j], method="mean")
                    for j in range(cols.shape[1])])
    se_ess = cols.std(axis=0, ddof=1) / np.sqrt(ess)
    se = np.fmax(se_batch, se_ess)  # fmax: a constant column's ESS is nan
    return se.reshape(x.shape[1:]) if x.ndim > 1 else float(se[0])


def assert_follows_grid_density(chain, grid, logp, label=""):
    """The mean (within 5 MCSE) and standard deviation (within 5 %) of the draws ``chain`` of
    a scalar against those of the density ``exp(logp)`` (unnormalised) on the even ``grid``."""
    p = np.exp(logp - logp.max())
    p /= p.sum()
    mean = p @ grid
    sd = np.sqrt(p @ (grid - mean) ** 2)
    assert abs(chain.mean() - mean) < 5.0 * mcse_mean(chain), (label, chain.mean(), mean)
    assert abs(chain.std() / sd - 1.0) < 0.05, (label, chain.std(), sd)


def geweke_z(mc, sc):
    """Geweke (2004) z-scores of the differences between the means of the test functions
    (columns) under the marginal-conditional simulator ``mc`` (independent draws) and the
    successive-conditional one ``sc`` (a correlated chain, error by :func:`mcse_mean`)."""
    se_mc = mc.std(axis=0, ddof=1) / np.sqrt(len(mc))
    return (mc.mean(axis=0) - sc.mean(axis=0)) / np.sqrt(se_mc**2 + mcse_mean(sc)**2)


def readme_model(X, k_max=8, sigma_x_initval=None, sigma_x=None):
    """The README's model: IBP(alpha) with alpha ~ Gamma(1, 1), A ~ Normal(0, sigma_a), X ~
    Normal(Z @ A, sigma_x), sigma_a and sigma_x half-normal (all hyperparameters free; or
    the noise fixed at ``sigma_x``)."""
    n, d = X.shape
    with pm.Model(coords={"obs": range(n), "feature": range(k_max), "dim": range(d)}) as model:
        alpha = pm.Gamma("alpha", 1.0, 1.0)
        Z = pmi.IBP("Z", alpha, dims=("obs", "feature"))
        sigma_a = pm.HalfNormal("sigma_a", 2.0)
        A = pm.Normal("A", 0.0, sigma_a, dims=("feature", "dim"))
        if sigma_x is None:
            sigma_x = pm.HalfNormal("sigma_x", 1.0, initval=sigma_x_initval)
        pm.Normal("X", mu=Z @ A, sigma=sigma_x, observed=X, dims=("obs", "dim"))
    return model


def lg_model(X, k_max, alpha=1.0, sigma_x=0.7, sigma_a=1.0, beta=1.0):
    n, d = X.shape
    with pm.Model(coords={"obs": range(n), "feature": range(k_max), "dim": range(d)}) as model:
        Z = pmi.IBP("Z", alpha, beta, dims=("obs", "feature"))
        A = pm.Normal("A", 0.0, sigma_a, dims=("feature", "dim"))
        pm.Normal("X", mu=Z @ A, sigma=sigma_x, observed=X, dims=("obs", "dim"))
    return model

def ibp_logp_fn(n, k, alpha, beta=1.0):
    value = pt.tensor3("value", dtype="int64")
    lp = pm.logp(pmi.IBP.dist(alpha, beta, shape=(n, k)), value)
    return pytensor.function([value], lp)

def exact_posterior(X, k_max, alpha, sigma_x, sigma_a, beta=1.0, log_prior=None):
    """p(Z | X_obs) for every labelled Z by enumeration; A integrated out column by column
    (``sigma_x``, ``sigma_a``: scalars or one per column).  The prior is the IBP(alpha, beta)
    pmf, or ``log_prior(mats)`` when given."""
    n, d = X.shape
    sxs = np.broadcast_to(np.asarray(sigma_x, dtype=float), (d,))
    sas = np.broadcast_to(np.asarray(sigma_a, dtype=float), (d,))
    mats = all_binary_matrices(n, k_max)
    lp = ibp_logp_fn(n, k_max, alpha, beta)(mats) if log_prior is None else log_prior(mats)
    for i, Z in enumerate(mats):
        for j in range(d):
            obs = ~np.isnan(X[:, j])
            Zo = Z[obs].astype(float)
            cov = sas[j]**2 * Zo @ Zo.T + sxs[j]**2 * np.eye(obs.sum())
            lp[i] += stats.multivariate_normal.logpdf(X[obs, j], np.zeros(obs.sum()), cov)
    return mats, np.exp(lp - special.logsumexp(lp))

def run_chain(step, model, n_sweeps, seed, thin=1):
    step.setup_chain(np.random.default_rng(seed), tune=0, draws=n_sweeps)
    point = model.initial_point()
    out, stats_ = [], []
    for it in range(n_sweeps):
        point, st = step.step(point)
        if it % thin == 0:
            out.append(point["Z"].copy())
            stats_.append(st[0])
    return np.array(out), stats_

def rand_state(rng, n, k, d, p=0.4):
    Z = (rng.random((n, k)) < p).astype(np.int64)
    X = rng.normal(size=(n, d))
    return Z, X


def noise_of(step, sx2=0.25, sa2=1.0):
    """One-block :class:`kernels.Noise` for a linear-Gaussian step's data width."""
    from pymc_ibp import kernels

    return kernels.noise_blocks(sx2, sa2, step.d)
