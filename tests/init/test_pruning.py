"""prune_features: backward elimination of a start's features by the model's log density."""

import numpy as np

from pymc_ibp.init.pruning import prune_features

# column k explains VALUE[k] nats of data; each feature beyond two costs CAP nats
VALUE = np.array([5.0, 40.0, 1.0, 30.0])
CAP = 10.0


def _score(point):
    active = point["Z"].sum(axis=0) > 0
    return float(VALUE[active].sum() - CAP * max(active.sum() - 2, 0))


def _refit(point):
    return {**point, "refits": point["refits"] + 1}


def test_drops_the_cheapest_features_while_the_density_rises():
    """From four features, the two worth less than the cap go, the cheapest first; the two
    worth more stay; every candidate was refitted."""
    point = {"Z": np.ones((3, 4), dtype=np.int8), "refits": 0}
    out = prune_features(point, "Z", _score, _refit)
    assert out["Z"].sum(axis=0).tolist() == [0, 3, 0, 3]
    assert out["refits"] == 2  # the chosen candidate of each of two rounds
    assert out["Z"].dtype == np.int8


def test_keeps_the_point_when_no_removal_helps_and_skips_non_finite_candidates():
    point = {"Z": np.array([[1, 1, 0, 0]], dtype=np.int8), "refits": 0}
    assert prune_features(point, "Z", _score, _refit) is point

    def score(p):  # removing column 0 is -inf (e.g. a parameter's support): never chosen
        return -np.inf if p["Z"][0, 0] == 0 else _score(p) - 100.0 * p["Z"][0, 1]

    out = prune_features(point, "Z", score, _refit)
    assert out["Z"].tolist() == [[1, 0, 0, 0]]


def test_stops_after_max_rounds():
    point = {"Z": np.ones((2, 4), dtype=np.int8), "refits": 0}
    out = prune_features(point, "Z", _score, _refit, max_rounds=1)
    assert out["Z"].sum(axis=0).tolist() == [2, 2, 0, 2]
