"""One ``init_z`` vocabulary for every step that starts a binary matrix."""

import numpy as np
import pymc as pm
import pytest

import pymc_ibp as pmi
from pymc_ibp.init.policy import INIT_Z, init_z_policy


def _model(binary):
    rng = np.random.default_rng(0)
    X = (rng.random((20, 6)) < 0.4).astype(float) if binary else rng.normal(size=(20, 6))
    with pm.Model() as model:
        Z = pmi.IBP("Z", 1.0, shape=(20, 4))
        A = pm.Normal("A", 0.0, 1.0, shape=(4, 6))
        if binary:
            pm.Bernoulli("X", logit_p=Z @ A, observed=X)
        else:
            pm.Normal("X", mu=Z @ A, sigma=0.5, observed=X)
    return model


def test_the_vocabulary_and_its_reading():
    assert INIT_Z == ("auto", "point", "prior", "surrogate")
    assert init_z_policy("surrogate", "S", on_the_model=True) == "prior"
    assert init_z_policy("prior", "S", on_the_model=False) == "surrogate"
    assert init_z_policy("point", "S", on_the_model=True) == "point"
    with pytest.raises(ValueError, match="S: init_z must be 'auto', 'point', 'prior' or"):
        init_z_policy("search", "S", on_the_model=True)


@pytest.mark.parametrize("init_z", INIT_Z)
def test_every_step_that_starts_z_takes_every_value(init_z):
    lg, logit = _model(False), _model(True)
    with lg:
        acc = pmi.AcceleratedGibbs([lg["Z"]], init_z=init_z)
        ibp = pmi.IBPGibbs([lg["Z"]], init_z=init_z)
    with logit:
        pg = pmi.PolyaGammaGibbs([logit["Z"]], init_z=init_z)
    searched = init_z in ("prior", "surrogate")
    assert acc.search.init_z == ("prior" if searched else init_z)
    assert pg.init_z == ("surrogate" if searched else init_z)
    assert ibp.init_z == init_z  # both searches exist for IBPGibbs in a linear-Gaussian model


@pytest.mark.parametrize("step", ["AcceleratedGibbs", "IBPGibbs", "PolyaGammaGibbs"])
def test_an_unknown_value_names_the_step_and_the_values(step):
    model = _model(step == "PolyaGammaGibbs")
    with model, pytest.raises(ValueError, match=rf"{step}: init_z must be 'auto', 'point'"):
        getattr(pmi, step)([model["Z"]], init_z="search")
