"""The steps pm.sample assigns travel to spawned workers without their numba kernels.

PyMC sends every chain's step to its worker by pickling it (``mp_ctx="spawn"``, the default
on macOS and Windows).  A numba dispatcher reachable from a step's attributes is pickled by
value and rebuilt in the worker without its on-disk cache, so the worker compiles it again:
the split–merge kernel that ``AcceleratedGibbs`` once held as an attribute cost about 26 s in
every spawned worker (``pm.sample(cores=2, mp_ctx="spawn")`` on a 20-row model: 34 s against
3 s for a plain PyMC model).  Kernels must be reached through their modules, which a worker
imports (and whose compiled code it loads from the cache).
"""

import io

import cloudpickle
import numpy as np
import pymc as pm
import pytest
from numba.core.dispatcher import Dispatcher
from pymc.sampling.mcmc import assign_step_methods, instantiate_steppers

import pymc_ibp as pmi
from pymc_ibp import kernels
from tests._helpers import readme_model


def dispatchers_in_pickle(obj):
    """Names of the numba dispatchers that pickling ``obj`` (as PyMC does) serialises."""
    found = []

    class Spy(cloudpickle.Pickler):
        def reducer_override(self, o):
            if isinstance(o, Dispatcher):
                found.append(o.py_func.__qualname__)
            return super().reducer_override(o)

    Spy(io.BytesIO()).dump(obj)
    return found


def _linear_gaussian(rng):
    return readme_model(rng.normal(size=(12, 4)), k_max=5)


def _offset(rng):
    X = rng.normal(size=(12, 4)) + 3.0
    with pm.Model() as model:
        Z = pmi.IBP("Z", 1.0, shape=(12, 5))
        A = pm.Normal("A", 0.0, 1.0, shape=(5, 4))
        b = pm.Normal("b", 0.0, 2.0, shape=4)
        sigma_x = pm.HalfNormal("sigma_x", 1.0)
        pm.Normal("X", Z @ A + b, sigma_x, observed=X)
    return model


def _noisy_detection(rng):
    X = rng.integers(0, 2, size=(10, 4))
    with pm.Model() as model:
        C = pmi.IBP("C", 1.0, shape=(10, 3))
        A = pm.Bernoulli("A", pm.Beta("rho", 1.0, 3.0), shape=(3, 4))
        f, m = pm.Beta("f", 1.0, 9.0), pm.Beta("m", 1.0, 9.0, shape=4)
        pm.Bernoulli("X", p=pmi.likelihoods.noisy_detection(C, A, f, m), observed=X)
    return model


def _logit(rng):
    X = (rng.random((12, 4)) < 0.3).astype("int64")
    with pm.Model() as model:
        Z = pmi.IBP("Z", 1.0, shape=(12, 5))
        A = pm.Normal("A", 0.0, 2.0, shape=(5, 4))
        b = pm.Normal("b", -1.0, 2.0, shape=4)
        pm.Bernoulli("X", logit_p=Z @ A + b, observed=X)
    return model


def _student_t(rng):
    X = rng.normal(size=(12, 4))
    with pm.Model() as model:
        Z = pmi.IBP("Z", 1.0, shape=(12, 5))
        A = pm.Normal("A", 0.0, 1.0, shape=(5, 4))
        pm.StudentT("X", nu=4, mu=Z @ A, sigma=0.5, observed=X)
    return model


def _stick_breaking(rng):
    X = rng.normal(size=(12, 4))
    with pm.Model() as model:
        pi = pmi.IBPStickBreaking("pi", 2.0, shape=(5,))
        Z = pm.Bernoulli("Z", p=pi, shape=(12, 5))
        A = pm.Normal("A", 0.0, 1.0, shape=(5, 4))
        pm.Normal("X", Z @ A, 0.5, observed=X)
    return model


def _dp_ibp_nonnegative(rng):
    X = rng.exponential(size=(12, 3))
    with pm.Model() as model:
        Z = pmi.dp_ibp("Z", 1.0, 1.0, l_max=4, shape=(12, 3))
        A = pm.Exponential("A", 1.0, shape=(3, 3))
        s = pm.HalfNormal("s", 1.0)
        pm.Normal("X", mu=Z @ A, sigma=s, observed=X)
    return model


def _noisy_or(rng):
    X = rng.normal(size=(6, 2))
    with pm.Model() as model:
        q = pm.Beta("q", 1.0, 1.0)
        Z = pmi.noisy_or_ibp_ibp("Z", 1.5, 1.2, q, l_max=2, shape=(6, 2))
        pm.Normal("X", mu=Z @ np.eye(2), sigma=0.5, observed=X)
    return model


def _dependent(rng):
    X = rng.normal(size=(15, 2))
    with pm.Model(coords={"obs": range(15), "feature": range(3)}) as model:
        alpha = pm.Gamma("alpha", 2.0, 1.0)
        mod = pmi.dependent_ibp("Z", np.repeat(np.arange(5.0), 3), alpha=alpha,
                                dims=("obs", "feature"))
        A = pm.Normal("A", 0, 1, shape=(3, 2))
        pm.Normal("X", mod.Z @ A, 0.5, observed=X)
    return model


MODELS = {"linear-gaussian": _linear_gaussian, "offset": _offset,
          "noisy-detection": _noisy_detection, "logit": _logit, "student-t": _student_t,
          "stick-breaking": _stick_breaking, "dp-ibp-nonnegative": _dp_ibp_nonnegative,
          "noisy-or": _noisy_or, "dependent-ibp": _dependent}


@pytest.mark.filterwarnings("ignore::UserWarning")  # PyMC's notes on the assigned samplers
@pytest.mark.parametrize("name", list(MODELS))
def test_assigned_steps_pickle_without_numba_dispatchers(name):
    model = MODELS[name](np.random.default_rng(0))
    with model:
        steps, selected = assign_step_methods(model)
        step = instantiate_steppers(model, steps, selected)
    methods = step if isinstance(step, list) else getattr(step, "methods", [step])
    assert any(type(s).__module__.startswith("pymc_ibp") for s in methods), methods
    assert dispatchers_in_pickle(step) == [], [type(s).__name__ for s in methods]


def test_the_check_sees_a_held_kernel():
    """The check itself: a step holding a kernel as an attribute is caught."""
    model = _linear_gaussian(np.random.default_rng(0))
    with model:
        step = pmi.AcceleratedGibbs([model["Z"]])
    step.held = kernels.sequential_split_merge
    assert dispatchers_in_pickle(step) == ["sequential_split_merge"]
