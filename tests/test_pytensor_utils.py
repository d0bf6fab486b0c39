"""pymc_ibp._pytensor_utils: the compiled point functions every step uses give PyMC's
PointFunc's values, and refuse (or convert) what PyTensor's own validation refuses (or
converts)."""

import pickle

import numpy as np
import pymc as pm
import pytensor.tensor as pt
import pytest

import pymc_ibp as pmi
from pymc_ibp._pytensor_utils import compile_point_fn


@pytest.fixture
def model():
    with pm.Model(coords={"obs": range(3), "feature": range(2), "dim": range(4)}) as m:
        alpha = pm.Gamma("alpha", 2.0, 1.0)
        Z = pmi.IBP("Z", alpha, dims=("obs", "feature"))
        A = pm.Normal("A", 0.0, 1.0, dims=("feature", "dim"))
        sigma = pm.HalfNormal("sigma", 1.0)
        pm.Normal("X", mu=Z @ A, sigma=sigma, observed=np.arange(12.0).reshape(3, 4) / 10,
                  dims=("obs", "dim"))
    return m


def _point(model):
    point = model.initial_point()
    point["Z"] = np.array([[1, 0], [1, 1], [0, 1]], dtype=point["Z"].dtype)
    point["A"] = np.linspace(-1, 1, 8).reshape(2, 4)
    return point


def _row_ll(model):
    [ll] = model.logp(vars=model.observed_RVs, sum=False)
    return ll.sum(axis=1)


def test_values_are_those_of_pymc_point_func(model):
    """With the point's own arrays (the trusted path), with extra keys, and with a Python
    scalar or a wider integer array (converted as PyTensor converts them)."""
    outs = [_row_ll(model), model.logp()]
    reference = model.compile_fn(outs, inputs=model.value_vars, on_unused_input="ignore",
                                 point_fn=True)
    fn = compile_point_fn(model, outs)
    point = _point(model)
    expected = reference(point)
    assert expected[0].shape == (3,)
    for value, ref in zip(fn(point), expected, strict=True):
        np.testing.assert_array_equal(value, ref)
    np.testing.assert_array_equal(fn({**point, "unrelated": 1.0})[1], expected[1])
    scalar = {**point, "sigma_log__": float(point["sigma_log__"]),
              "Z": point["Z"].astype(np.int64)}
    np.testing.assert_array_equal(fn(scalar)[0], reference(scalar)[0])
    again = pickle.loads(pickle.dumps(fn))  # as pm.sample sends steps to its workers
    assert again.f.trust_input
    np.testing.assert_array_equal(again(point)[0], expected[0])


def test_other_values_go_through_pytensors_validation(model):
    """A value of the wrong number of dimensions is PyTensor's error; a float array for the
    integer Z is converted as PointFunc converts it (PyMC compiles with
    ``allow_input_downcast``), never passed unchecked to the compiled code."""
    outs = _row_ll(model)
    reference = model.compile_fn(outs, inputs=model.value_vars, on_unused_input="ignore",
                                 point_fn=True)
    fn = compile_point_fn(model, outs)
    point = _point(model)
    with pytest.raises(TypeError, match="dimension|ndim"):
        fn({**point, "A": point["A"][0]})
    floats = {**point, "Z": point["Z"] + 0.25}
    np.testing.assert_array_equal(fn(floats), reference(floats))
    np.testing.assert_array_equal(fn(floats), reference(point))


def test_static_shapes_are_checked():
    with pm.Model() as m:
        a = pm.Normal("a", shape=(3,))
    fn = compile_point_fn(m, 2 * m.rvs_to_values[a])
    np.testing.assert_array_equal(fn({"a": np.ones(3)}), 2.0)
    with pytest.raises(TypeError, match="shape"):
        fn({"a": np.ones(2)})


def test_extra_inputs_are_read_from_the_point(model):
    d = pt.matrix("__direction")
    fn = compile_point_fn(model, (d * model.rvs_to_values[model["A"]]).sum(), extra_inputs=[d])
    point = _point(model)
    assert float(fn({**point, "__direction": np.ones((2, 4))})) == pytest.approx(
        point["A"].sum())
    with pytest.raises(ValueError, match="name"):
        compile_point_fn(model, d.sum(), extra_inputs=[pt.matrix()])
    for clash in ([pt.matrix("A")], [d, pt.matrix("__direction")]):  # would overwrite a value
        with pytest.raises(ValueError, match="has the name of a value variable"):
            compile_point_fn(model, d.sum(), extra_inputs=clash)


def _point_functions(obj, seen=None):
    """Every PointFunction reachable from a step through the attributes of pymc_ibp objects,
    lists, tuples and dicts."""
    from pymc_ibp._pytensor_utils import PointFunction

    seen = set() if seen is None else seen
    if id(obj) in seen:
        return []
    seen.add(id(obj))
    if isinstance(obj, PointFunction):
        return [obj]
    if isinstance(obj, list | tuple):
        children = list(obj)
    elif isinstance(obj, dict):
        children = list(obj.values())
    elif type(obj).__module__.startswith(("pymc_ibp", "pymc.step_methods.compound")):
        children = list(getattr(obj, "__dict__", {}).values())
    else:
        return []
    return [f for c in children for f in _point_functions(c, seen)]


@pytest.mark.parametrize("likelihood", ["normal", "student_t", "bernoulli_logit"])
def test_steps_compile_with_the_compile_kwargs_of_pm_sample(likelihood):
    """pm.sample hands its ``compile_kwargs`` to every step it assigns; each of the steps'
    compiled point functions (the surrogate start's and the feature moves' too) is compiled
    with them (here: PyTensor's Python linker instead of the default C / numba one)."""
    from pymc.sampling.mcmc import assign_step_methods, instantiate_steppers
    from pytensor.compile.mode import Mode
    from pytensor.link.basic import PerformLinker

    rng = np.random.default_rng(1)
    X = rng.normal(size=(6, 3))
    with pm.Model() as m:
        alpha = pm.Gamma("alpha", 2.0, 1.0)
        Z = pmi.IBP("Z", alpha, shape=(6, 4))
        A = pm.Normal("A", 0.0, 1.0, shape=(4, 3))
        if likelihood == "normal":
            sigma = pm.HalfNormal("sigma", 1.0)
            pm.Normal("X", mu=Z @ A, sigma=sigma, observed=X)
        elif likelihood == "student_t":
            pm.StudentT("X", nu=4, mu=Z @ A, sigma=1.0, observed=X)
        else:
            pm.Bernoulli("X", logit_p=Z @ A, observed=(X > 0).astype(int))
        steps, selected = assign_step_methods(m, None)  # as pm.sample does, in the model
        mode = Mode(linker="py", optimizer="fast_compile")
        step = instantiate_steppers(m, steps, selected, compile_kwargs={"mode": mode})
    assert {type(s).__name__ for s in step} >= {"normal": {"AcceleratedGibbs"},
                                                "student_t": {"IBPGibbs", "NUTS"},
                                                "bernoulli_logit": {"PolyaGammaGibbs"}
                                                }[likelihood]
    fns = _point_functions(step)
    assert len(fns) >= 3
    assert all(type(f.f.maker.linker) is PerformLinker for f in fns)  # not its subclasses



def test_constant_values_are_read_without_a_numba_compile(monkeypatch):
    """Dimension lengths, constant hyperparameters and data graphs are read without compiling
    a function through the default (numba) backend: each such compile took 0.1-0.3 s per model
    built, more on a machine whose PyTensor cache is empty."""
    import pytensor
    import pytensor.compile.maker as maker

    from pymc_ibp._pytensor_utils import constant_value, dim_lengths

    modes = []
    original = maker.function

    def spy(*args, **kwargs):
        modes.append(kwargs.get("mode"))
        return original(*args, **kwargs)

    monkeypatch.setattr(maker, "function", spy)
    shared = pytensor.shared(np.array([1.0, 2.0]))
    assert constant_value(pt.as_tensor(3.5)) == 3.5
    np.testing.assert_array_equal(constant_value(shared), [1.0, 2.0])
    np.testing.assert_allclose(constant_value(pt.exp(pt.as_tensor(2.0)) * shared + 1.0),
                               np.exp(2.0) * np.array([1.0, 2.0]) + 1.0)
    assert constant_value(4) == 4
    with pm.Model(coords={"obs": range(5), "feature": range(3)}) as m:
        assert dim_lengths(m, ("obs", "feature")) == (5, 3)
        alpha = pm.Gamma("alpha", 2.0, 1.0)
        assert pmi.IBP("Z", alpha, dims=("obs", "feature")).type.shape == (5, 3)
        pmi.IBPAlphaGibbs([alpha])
    assert modes and all(mode == "FAST_COMPILE" for mode in modes), modes
