"""The priors' parameters are checked at each chain's start (:mod:`pymc_ibp.init.parameters`):
a ``pm.Data`` parameter moved out of its support by ``pm.set_data`` is an error naming it and
its value, whichever of the plugin's steps samples the matrix; constant parameters are
checked when the model is built."""

import numpy as np
import pymc as pm
import pytest

import pymc_ibp as pmi
from pymc_ibp.exceptions import DataError

DATA = pmi.datasets.block_images(40, noise=0.5, seed=1)
RUN = dict(tune=2, draws=2, chains=1, random_seed=1, progressbar=False,
           compute_convergence_checks=False)


@pytest.mark.parametrize("value", [-1.0, 0.0, np.nan])
@pytest.mark.parametrize("likelihood", ["normal", "poisson", "logit"])
def test_a_set_data_alpha_outside_its_support_is_an_error_naming_it(value, likelihood):
    """A pm.Data alpha set to -1, 0 or NaN after the model was built: AcceleratedGibbs (a
    Gaussian likelihood), IBPGibbs (Poisson) and PolyaGammaGibbs (logistic) each stop at the
    chain's start naming alpha and its value (the run used to go on, K+ = K_max)."""
    X = DATA.X if likelihood == "normal" else (DATA.X > 0.5).astype(np.int64)
    with pm.Model():
        a = pm.Data("a", 1.0)
        Z = pmi.IBP("Z", a, shape=(40, 6))
        A = pm.Normal("A", 0.0, 1.0, shape=(6, 36))
        if likelihood == "normal":
            pm.Normal("X", Z @ A, 0.5, observed=X)
        elif likelihood == "poisson":
            pm.Poisson("X", pm.math.exp(Z @ A - 1.0), observed=X)
        else:
            pm.Bernoulli("X", logit_p=Z @ A - 1.0, observed=X)
        pm.set_data({"a": value})
        with pytest.raises(DataError, match=rf"pmi.IBP 'Z': alpha = {value!r} \(it must be > 0\)"
                                            r".*pm.set_data"):
            pm.sample(**RUN)


def test_a_set_data_alpha_of_the_sticks_and_of_a_crp():
    """The sticks' alpha of a stick-breaking matrix is checked by the step of Z, and a
    pmi.CRP's alpha by CRPGibbs."""
    with pm.Model():
        a = pm.Data("a", 2.0)
        pi = pmi.IBPStickBreaking("pi", a, shape=6)
        Z = pm.Bernoulli("Z", p=pi, shape=(40, 6))
        A = pm.Normal("A", 0.0, 1.0, shape=(6, 36))
        pm.Normal("X", Z @ A, 0.5, observed=DATA.X)
        pm.set_data({"a": -2.0})
        with pytest.raises(DataError, match=r"pmi.IBPStickBreaking 'pi': alpha = -2.0"):
            pmi.AcceleratedGibbs([Z]).step(pm.modelcontext(None).initial_point())
    with pm.Model():
        a = pm.Data("a", 1.0)
        c = pmi.CRP("c", a, l_max=4, shape=40)
        mu = pm.Normal("mu", 0.0, 3.0, shape=4)
        pm.Normal("y", mu[c], 1.0, observed=DATA.X[:, 0])
        pm.set_data({"a": 0.0})
        with pytest.raises(DataError, match=r"CRPGibbs: the concentration alpha of pmi.CRP "
                                            r"'c' is 0.0"):
            pmi.CRPGibbs([c]).step(pm.modelcontext(None).initial_point())


@pytest.mark.parametrize("length_scale", [-2.0, 0.0])
def test_a_constant_length_scale_outside_its_support_is_an_error(length_scale):
    """The dependent IBP's length_scale=-2.0 used to run as 2.0, and 0.0 ended in "The
    Bernoulli probabilities of Z must lie in [0, 1]"."""
    with pm.Model(), pytest.raises(ValueError, match=r"length_scale > 0"):
        pmi.dependent_ibp("Z", np.repeat([0.0, 1.0, 2.0], 4), alpha=2.0, k=3,
                          length_scale=length_scale)


@pytest.mark.parametrize("length_scale", [-2.0, 0.0])
def test_a_set_data_length_scale_outside_its_support_is_an_error(length_scale):
    """A pm.Data length scale of the dependent IBP set to -2 (which the kernel would run as
    2) or 0 after the model was built: the step of Z stops at the chain's start naming it."""
    t = np.repeat(np.arange(10.0), 4)
    X = np.random.default_rng(0).normal(size=(40, 5))
    with pm.Model():
        ls = pm.Data("ls", 3.0)
        dibp = pmi.dependent_ibp("Z", t, alpha=2.0, length_scale=ls, shape=(40, 4))
        A = pm.Normal("A", 0.0, 1.0, shape=(4, 5))
        pm.Normal("X", dibp.Z @ A, 0.5, observed=X)
        pm.set_data({"ls": length_scale})
        with pytest.raises(DataError, match=rf"pmi.dependent_ibp 'Z': length_scale = "
                                            rf"{length_scale!r} \(it must be > 0\)"):
            pm.sample(**RUN)
