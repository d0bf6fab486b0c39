"""The shard kernel of the data-parallel sampler: an exact Gibbs scan of a shard's rows given
the other rows' statistics, and the feature token."""

import numpy as np

import pymc_ibp as pmi
from pymc_ibp import kernels
from pymc_ibp.distributed import shard_stats, shard_sweeps
from pymc_ibp.distributed.shards import apply_changes, exact_propose, proposal_summary
from tests._helpers import ENUM_X, chi2_pooled, codes, exact_posterior

SX, SA, ALPHA = 0.7, 1.0, 1.0


def noise(d):
    return kernels.noise_blocks(np.array([SX**2]), np.array([SA**2]), d)


def test_sequential_shard_scans_sample_the_exact_posterior():
    """Shards {row 0} and {rows 1, 2} of the 3 x 2 enumeration data, swept one after the other
    (each given the other's statistics and the global counts), with the feature token moving
    between them: the visit frequencies of the 512 labelled 3 x 3 matrices match the exact
    posterior (χ²).  Fails if a shard uses its own row count for the IBP's N, or ignores the
    other shard's statistics."""
    X, k_max = ENUM_X, 3
    mats, post = exact_posterior(X, k_max, ALPHA, SX, SA)
    bounds = [(0, 1), (1, 3)]
    Xs = [np.ascontiguousarray(X[a:b]) for a, b in bounds]
    Z = np.zeros((3, k_max), dtype=np.int8)
    nz = noise(X.shape[1])
    rng = np.random.default_rng(0)
    draws = []
    for t in range(40_000):
        p, token = t % 2, (t // 2) % 2
        a, b = bounds[p]
        full = shard_stats(X, Z)
        r = shard_sweeps(Xs[p], Z[a:b], full.m, full.G, full.RX, nz, ALPHA,
                         1.0, 3, 1, int(rng.integers(2**62)), p == token)
        Z[a:b] = r.Z
        if t % 2 == 1:
            draws.append(Z.copy())
    draws = np.array(draws)
    idx = {c: i for i, c in enumerate(codes(mats))}
    counts = np.bincount([idx[c] for c in codes(draws.astype(np.int64))], minlength=len(mats))
    res = chi2_pooled(counts, post * len(draws))
    assert res.pvalue > 1e-3, res


def test_statistics_add_over_shards():
    rng = np.random.default_rng(1)
    X = rng.normal(size=(50, 4))
    Z = (rng.random((50, 6)) < 0.3).astype(np.int8)
    whole = shard_stats(X, Z)
    parts = [shard_stats(X[a:b], Z[a:b]) for a, b in [(0, 20), (20, 21), (21, 50)]]
    np.testing.assert_allclose(sum(p.G for p in parts), whole.G)
    np.testing.assert_allclose(sum(p.RX for p in parts), whole.RX)
    np.testing.assert_array_equal(sum(p.m for p in parts), whole.m)


def test_only_the_token_shard_creates_features():
    """Two shards swept from the same state at the same time (the synchronous mode): new
    features appear only on the token holder, so no slot is claimed twice; with births on
    both shards (what the token forbids) two shards soon claim one slot."""
    rng = np.random.default_rng(2)
    X = rng.normal(0.0, 2.0, size=(40, 3))  # unexplained data: births are likely
    k_max = 12
    nz = noise(3)
    halves = [(0, 20), (20, 40)]

    def collisions(both):
        Z = np.zeros((40, k_max), dtype=np.int8)
        clashes = 0
        for t in range(30):
            full = shard_stats(X, Z)
            new = []
            for p, (a, b) in enumerate(halves):
                r = shard_sweeps(X[a:b], Z[a:b], full.m, full.G, full.RX, nz,
                                 2.0, 1.0, 40, 1, int(rng.integers(2**62)),
                                 both or p == t % 2)
                new.append((full.m == 0) & (r.m > 0))
                Z[a:b] = r.Z
            clashes += int(np.sum(new[0] & new[1]))
            if not both:
                assert not new[1 - t % 2].any()
        return clashes

    assert collisions(both=False) == 0
    assert collisions(both=True) > 0


def local(fn, args):
    values = [fn(*a) for a in args]
    return values, values


def push_exact_draws(X, bounds, post, mats, n_draws, seed, eps=0.1, n_change=1, sweeps=1):
    """i.i.d. draws of the exact posterior, each pushed through one iteration of the exact
    mode (the token alternating): an invariant move leaves them distributed as the
    posterior, and the draws stay independent (unlike a chain's visits), so a χ² test on them
    is valid."""
    from pymc_ibp.distributed.shards import _z_of, exact_iteration

    nz = noise(X.shape[1])
    trXX = kernels.block_sq_norms(X, nz)
    xs = [np.ascontiguousarray(X[a:b]) for a, b in bounds]
    rng = np.random.default_rng(seed)
    starts = rng.choice(len(mats), size=n_draws, p=post)
    out, acc = [], 0
    for t, j in enumerate(starts):
        Z = mats[j].astype(np.int8)
        sources = [Z[a:b] for a, b in bounds]
        stats = [tuple(shard_stats(x, z))[1:4] for x, z in zip(xs, sources, strict=True)]
        ok, sources, _, _, _ = exact_iteration(local, xs, sources, stats, rng, nz, ALPHA, 1.0,
                                               X.shape[0], trXX, sweeps, n_change,
                                               t % len(xs), eps)
        acc += ok
        out.append(np.concatenate([_z_of(s) for s in sources]))
    return np.array(out), acc / n_draws


def test_exact_parallel_mh_leaves_the_posterior_invariant():
    """The exact mode (shared seed r, f_r = a Gibbs sweep of one row per shard given the
    global state, noisy proposal, global accept/reject) with 2 shards: exact posterior draws
    of the 512 labelled 3 x 3 matrices pushed through one iteration are still distributed as
    the posterior (χ²).  Fails when the proposal terms Q are left out of the ratio (p of
    order 1e-53 with these 10,000 draws)."""
    mats, post = exact_posterior(ENUM_X, 3, ALPHA, SX, SA)
    draws, acc = push_exact_draws(ENUM_X, [(0, 1), (1, 3)], post, mats, 10_000, seed=4)
    assert 0.05 < acc < 0.95
    idx = {c: i for i, c in enumerate(codes(mats))}
    counts = np.bincount([idx[c] for c in codes(draws.astype(np.int64))], minlength=len(mats))
    res = chi2_pooled(counts, post * len(draws))
    assert res.pvalue > 1e-3, res


def test_one_shard_draws_what_the_serial_sweep_draws():
    """The synchronous mode with P = 1: the shard's inner sweeps (the other rows' statistics
    zero, the IBP's N its own rows, births on) draw the same Z, bit for bit, as the serial
    accelerated sweep given the same random generator.  Fails with N + 1 for the IBP's N."""
    data = pmi.datasets.ibp_linear_gaussian(60, 5, alpha=2.0, sigma_x=0.5, sigma_a=1.0, seed=3)
    X, k_max = data.X, 10
    n, d = X.shape
    Z0 = np.zeros((n, k_max), dtype=np.int8)
    Z0[:, 0] = 1
    nz = kernels.noise_blocks(np.array([0.25]), np.array([1.0]), d)
    full = shard_stats(X, Z0)
    shard = shard_sweeps(X, Z0, full.m, full.G, full.RX, nz, ALPHA, 1.0, n, 10, 123, True)
    Z, m, rng = Z0.copy(), Z0.sum(axis=0).astype(np.int64), np.random.default_rng(123)
    for _ in range(10):
        kernels.accelerated_sweep(rng, Z, X, m, nz, kernels.SweepPrior.counts(ALPHA, 1.0),
                                  max(5, n // 10))
    assert shard.flips > 0 and shard.births > 0
    np.testing.assert_array_equal(shard.Z, Z)
    np.testing.assert_array_equal(shard.m, m)


def test_exact_proposals_reach_the_driver_as_changes():
    """The exact mode's driver receives a proposal without its Z'_p, plus the entries of Z_p it
    changes: patching Z with them gives Z'_p."""
    data = pmi.datasets.block_images(40, seed=4)
    X, k_max = data.X, 6
    Z = np.zeros((40, k_max), dtype=np.int8)
    Z[:, :4] = data.Z
    cur = shard_stats(X, Z)
    prop = exact_propose(X, cur, cur.m, cur.G, cur.RX, noise(X.shape[1]), ALPHA, 1.0, 40, 2, 5,
                         6, True, 10, 0.2)
    summary, changes = proposal_summary(prop, cur)
    assert summary.result.Z is None and changes.size > 0
    np.testing.assert_array_equal(summary.result.RX, prop.result.RX)
    np.testing.assert_array_equal(summary.rows, prop.rows)
    apply_changes(Z, 0, changes)
    np.testing.assert_array_equal(Z, prop.result.Z)
