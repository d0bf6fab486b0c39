"""pmi.check_chains: one line per untrustworthy aspect of a posterior (docs/diagnostics.md)."""

import numpy as np
import pytest
import xarray as xr

import pymc_ibp as pmi

N, K_MAX, N_CHAINS, N_DRAWS = 50, 6, 4, 200


def _trace(Z, log_joint=None, kmax_hit=None, dims=("obs", "feature"), suggested=None):
    """A DataTree as pm.sample returns it: Z (chain, draw, obs, feature) and sample stats."""
    c, t = Z.shape[:2]
    coords = {"chain": np.arange(c), "draw": np.arange(t)}
    post = xr.Dataset({"Z": (("chain", "draw", *dims), Z)}, coords=coords)
    stats = {}
    if log_joint is not None:
        stats["ibp_log_joint"] = (("chain", "draw"), log_joint)
    if kmax_hit is not None:
        stats["ibp_kmax_hit"] = (("chain", "draw"), kmax_hit)
    if suggested is not None:
        stats["ibp_kmax_suggested"] = (("chain", "draw"), suggested)
    tree = {"posterior": post}
    if stats:
        tree["sample_stats"] = xr.Dataset(stats, coords=coords)
    return xr.DataTree.from_dict(tree)


def _z(seed=0, k=3):
    """Chains of a 3-feature Z (distinct columns of 40%, 30%, 20% of the rows) with 1% flips."""
    rng = np.random.default_rng(seed)
    base = np.zeros((N, K_MAX), dtype=np.int8)
    base[:, :k] = rng.random((N, k)) < np.array([0.4, 0.3, 0.2, 0.5, 0.5, 0.5])[:k]
    Z = np.broadcast_to(base, (N_CHAINS, N_DRAWS, N, K_MAX)).copy()
    flips = (rng.random(Z.shape) < 0.01) & (np.arange(K_MAX) < k)
    Z[flips] = 1 - Z[flips]
    return Z


def test_agreeing_chains_raise_nothing():
    rng = np.random.default_rng(1)
    trace = _trace(_z(), log_joint=-1000.0 + rng.normal(size=(N_CHAINS, N_DRAWS)))
    assert pmi.check_chains(trace) == []


def test_chains_in_different_modes_are_reported_with_what_to_do():
    rng = np.random.default_rng(2)
    lj = -1000.0 + rng.normal(size=(N_CHAINS, N_DRAWS))
    lj[2] -= 50.0  # chain 2 sits 50 nats below the others
    trace = _trace(_z(), log_joint=lj)
    with pytest.warns(pmi.UntrustedChainsWarning, match="chain 2 lowest") as rec:
        issues = pmi.check_chains(trace)
    assert [i.kind for i in issues] == ["disagree"] and issues[0].value > 1.05
    assert len(rec) == 1 and "\n" not in str(rec[0].message)
    assert "pmi.chain_summary(idata)" in issues[0].message


def test_chains_constant_within_and_different_between_disagree():
    """A quantity constant in every chain has a NaN R-hat: unequal chain values disagree."""
    Z = _z()
    Z[1, :, :, 3] = 0
    Z[1, :, :5, 3] = 1  # chain 1 holds a fourth feature in every draw
    issues = pmi.check_chains(_trace(Z), warn=False)  # no stats: K+ from Z
    assert [i.kind for i in issues] == ["disagree"] and issues[0].value > 10
    assert "R-hat of K+" in issues[0].message


def test_binding_truncation_names_k_max_and_the_dim():
    Z = _z()
    Z[3, 100:, :, 3:] = 0
    Z[3, 100:, :4, 3:] = 1  # every slot in use in half of chain 3's draws
    Z[:3, :, :4, 3:] = 1  # and in all of the others'
    issues = pmi.check_chains(_trace(Z), warn=False)
    (issue,) = [i for i in issues if i.kind == "k_max"]
    assert issue.value == 1.0 and issue.chains == (0, 1, 2, 3)
    assert f"K_max = {K_MAX} binds" in issue.message and f"at least {2 * K_MAX}" in issue.message
    assert "'feature' dim" in issue.message


def test_binding_truncation_names_the_k_max_the_probe_suggested():
    """With the linear-Gaussian steps' ibp_kmax_suggested stat, the line names the largest
    suggestion of any chain instead of twice K_max."""
    Z = _z()
    Z[:, :, :4, 3:] = 1
    suggested = np.zeros((N_CHAINS, N_DRAWS), dtype=np.int64)
    suggested[1, 50:] = 17
    suggested[2, 10:] = 23
    (issue,) = [i for i in pmi.check_chains(_trace(Z, suggested=suggested), warn=False)
                if i.kind == "k_max"]
    assert "at least 23" in issue.message and "ibp_kmax_suggested" in issue.message


def test_truncation_from_the_stat_when_z_is_left_out():
    hit = np.zeros((N_CHAINS, N_DRAWS), dtype=bool)
    hit[0, :10] = True
    trace = _trace(_z(), kmax_hit=hit)
    trace = xr.DataTree.from_dict({"posterior": xr.Dataset(coords=trace["posterior"].coords),
                                   "sample_stats": trace["sample_stats"].to_dataset()})
    issues = pmi.check_chains(trace, warn=False)
    assert [(i.kind, i.chains) for i in issues] == [("k_max", (0,))]


def test_a_full_crp_truncation_names_l_max():
    """CRPGibbs's ibp_lmax_hit (plain, and suffixed per CRP with two of them, stacked by
    PyMC when two steps emit it): one l_max line naming the chains and the variable."""
    rng = np.random.default_rng(1)
    trace = _trace(_z(), log_joint=-1000.0 + rng.normal(size=(N_CHAINS, N_DRAWS)))
    stats = trace["sample_stats"].to_dataset()
    hit = np.zeros((N_CHAINS, N_DRAWS, 2), dtype=bool)
    hit[1, :50, 1] = True
    for name, value in (("ibp_lmax_hit", (("chain", "draw", "ibp_lmax_hit_dim_0"), hit)),
                        ("ibp_lmax_hit__Z_c", (("chain", "draw"), hit[..., 1]))):
        tree = xr.DataTree.from_dict({"posterior": trace["posterior"].to_dataset(),
                                      "sample_stats": stats.assign({name: value})})
        issues = pmi.check_chains(tree, warn=False)
        (issue,) = issues
        assert (issue.kind, issue.chains, issue.value) == ("l_max", (1,), 0.25)
        assert "raise l_max=" in issue.message
        assert ("'Z_c'" in issue.message) == name.endswith("Z_c")
    tree = xr.DataTree.from_dict({"posterior": trace["posterior"].to_dataset(),
                                  "sample_stats": stats.assign(
                                      ibp_lmax_hit=(("chain", "draw"), hit[..., 0]))})
    assert pmi.check_chains(tree, warn=False) == []


def test_duplicated_features_are_reported_per_chain():
    Z = _z()
    Z[1, :, :, 4] = Z[1, :, :, 0]  # chain 1: feature 0 split in two identical columns
    issues = pmi.check_chains(_trace(Z), warn=False)
    dup = [i for i in issues if i.kind == "duplicates"]
    assert len(dup) == 1 and dup[0].chains == (1,) and dup[0].value >= 0.9
    assert "one feature split in two" in dup[0].message


def test_small_identical_columns_are_not_duplicates():
    """Two singleton features of one row are a plausible posterior state, not a split."""
    Z = _z()
    Z[:, :, :, 4:] = 0
    Z[:, :, 7, 4:] = 1
    assert not [i for i in pmi.check_chains(_trace(Z), warn=False) if i.kind == "duplicates"]


def test_one_chain_is_checked_for_truncation_and_duplicates_only():
    Z = _z()[:1]
    Z[0, :, :, 4] = Z[0, :, :, 1]
    kinds = [i.kind for i in pmi.check_chains(_trace(Z), warn=False)]
    assert kinds == ["duplicates"]
