"""Complete step state (checkpoint and resume) and the initialisation policy."""

import pickle

import numpy as np
import pymc as pm
import pytest
from pymc.step_methods import CompoundStep
from pymc.step_methods.state import equal_dataclass_values

import pymc_ibp as pmi
from tests._helpers import noise_of, readme_model


def make_step(model, **kwargs):
    with model:
        return CompoundStep([
            pmi.AcceleratedGibbs([model["Z"]], **kwargs),
            pmi.IBPAlphaGibbs([model["alpha"]]),
            pmi.IBPScaleSlice([model["sigma_a"], model["sigma_x"]]),
        ])


def assert_same_state(first, resumed):
    """Completeness of the steps' saved state: every plain attribute of every step of a
    restored CompoundStep equals the checkpointed run's."""
    for a, b in zip(first.methods, resumed.methods, strict=True):
        for name, val in vars(a).items():
            if isinstance(val, (bool, int, float, np.ndarray, list, np.random.Generator)):
                other = getattr(b, name)
                if isinstance(val, np.random.Generator):
                    val, other = val.bit_generator.state, other.bit_generator.state
                assert equal_dataclass_values(val, other), (type(a).__name__, name)


def drive(step, point, start, stop, tune):
    """What pm.sample does per iteration (stop_tuning at the end of tuning)."""
    out = []
    for i in range(start, stop):
        if i == tune:
            step.stop_tuning()
        point, _ = step.step(point)
        out.append({k: np.copy(v) for k, v in point.items()})
    return point, out


@pytest.mark.filterwarnings("ignore::pymc_ibp.TruncationWarning")
@pytest.mark.parametrize("init_sweeps", [0, 100], ids=["segments", "start-search"])
def test_checkpoint_and_resume_gives_the_same_draws(init_sweeps):
    """A run of 120 iterations (100 tuning, with slice-width adaptation and, with
    init_sweeps=0, the multi-start segments in flight at the split) equals 25 iterations, a
    pickled checkpoint of (point, step.sampling_state), a fresh step restored from it and 95
    more iterations."""
    data = pmi.datasets.block_images(40, seed=1)
    model = readme_model(data.X)
    tune, total, split = 100, 120, 25

    def build(model):
        return make_step(model, init_sweeps=init_sweeps)

    full = build(model)
    full.setup_chain(np.random.default_rng(7), tune, total - tune)
    _, ref = drive(full, model.initial_point(), 0, total, tune)

    first = build(model)
    first.setup_chain(np.random.default_rng(7), tune, total - tune)
    point, part1 = drive(first, model.initial_point(), 0, split, tune)
    zstep = first.methods[0]
    if init_sweeps == 0:
        # restarts in flight at the checkpoint
        assert 0 < zstep.search.segment and zstep.search.candidates
    else:
        assert zstep.update.started and zstep.search.segment == 0  # the start search is done
    blob = pickle.dumps((point, first.sampling_state))

    resumed = build(model)  # a new process would build the step again from the model
    point, state = pickle.loads(blob)
    resumed.sampling_state = state
    assert_same_state(first, resumed)
    _, part2 = drive(resumed, point, split, total, tune)
    got = part1 + part2
    for a, b in zip(ref, got, strict=True):
        for k in a:
            np.testing.assert_array_equal(a[k], b[k], err_msg=k)


def test_sampling_state_round_trips():
    data = pmi.datasets.block_images(20, seed=1)
    model = readme_model(data.X)
    step = make_step(model)
    step.setup_chain(np.random.default_rng(1), 30, 5)
    drive(step, model.initial_point(), 0, 12, 30)
    state = step.sampling_state
    other = make_step(model)
    other.sampling_state = state
    again = other.sampling_state
    assert equal_dataclass_values(state, again)


@pytest.mark.filterwarnings("ignore::pymc_ibp.TruncationWarning")
def test_initvals_for_z_are_honoured():
    """pm.sample(initvals={"Z": Z0}) and Z's own initval= start the chain at Z0 (no prior
    redraw, no restarts); without them the chain starts from a prior draw."""
    data = pmi.datasets.block_images(60, noise=0.05, seed=3)
    model = readme_model(data.X, k_max=6)
    Z0 = np.zeros((60, 6), dtype=np.int64)
    Z0[:, :4] = data.Z
    common = dict(tune=0, draws=1, chains=1, random_seed=2, progressbar=False,
                  compute_convergence_checks=False)
    with model:
        given = pm.sample(initvals={"Z": Z0, "sigma_x": 0.05, "sigma_a": 1.0}, **common)
        default = pm.sample(initvals={"sigma_x": 0.05, "sigma_a": 1.0}, **common)
    # at noise 0.05 one sweep from the truth stays at the truth; from a prior draw it does not
    np.testing.assert_array_equal(given["posterior"]["Z"].values[0, 0], Z0)
    assert not np.array_equal(default["posterior"]["Z"].values[0, 0], Z0)
    # the variable's own initial value (initval= / model.set_initval) counts as given too,
    # even when it equals PyMC's default start (all zeros)
    with model:
        assert pmi.AcceleratedGibbs([model["Z"]]).search.from_prior(0 * Z0)
    model.set_initval(model["Z"], np.zeros_like(Z0, dtype=np.int8))
    with model:
        assert not pmi.AcceleratedGibbs([model["Z"]]).search.from_prior(0 * Z0)


@pytest.mark.filterwarnings("ignore::pymc_ibp.TruncationWarning")  # K_max = 4 binds
@pytest.mark.parametrize("likelihood", ["normal", "student_t", "bernoulli_logit",
                                        "stick_breaking"])
@pytest.mark.parametrize("bad", [2, -1])
def test_a_non_binary_start_of_z_is_an_error(likelihood, bad):
    """pm.sample(initvals={"Z": Z0}) with an entry of Z0 that is not 0 or 1: the step that
    updates Z (AcceleratedGibbs, IBPGibbs, PolyaGammaGibbs) refuses to start from it, naming
    the entry (PyMC checks start values only for NUTS), also where NUTS on the sticks of
    pmi.IBPStickBreaking runs first (it failed there with "Bad initial energy")."""
    rng = np.random.default_rng(0)
    X = rng.normal(size=(8, 3))
    Z0 = np.zeros((8, 4), dtype=np.int8)
    Z0[:, 0] = 1
    Z0[5, 2] = bad
    with pm.Model():
        if likelihood == "stick_breaking":
            Z = pm.Bernoulli("Z", p=pmi.IBPStickBreaking("pi", 1.0, shape=4), shape=(8, 4))
        else:
            Z = pmi.IBP("Z", 1.0, shape=(8, 4))
        A = pm.Normal("A", 0.0, 1.0, shape=(4, 3))
        if likelihood in ("normal", "stick_breaking"):
            pm.Normal("X", mu=Z @ A, sigma=0.5, observed=X)
        elif likelihood == "student_t":
            pm.StudentT("X", nu=4, mu=Z @ A, sigma=0.5, observed=X)
        else:
            pm.Bernoulli("X", logit_p=Z @ A, observed=(X > 0).astype(int))
        kw = dict(tune=0, draws=2, chains=1, cores=1, progressbar=False,
                  compute_convergence_checks=False, random_seed=1)
        with pytest.raises(pmi.DataError, match=r"'Z' must be a binary matrix.*\(5, 2\)"):
            pm.sample(initvals={"Z": Z0}, **kw)
        Z0[5, 2] = 1
        pm.sample(initvals={"Z": Z0}, **kw)  # a binary start is fine


def _student_t_data():
    rng = np.random.default_rng(0)
    n, d, k, k_max = 40, 8, 3, 8
    z_true = (rng.random((n, k)) < 0.5).astype(np.int64)
    a_true = rng.normal(0.0, 2.0, (k, d))
    X = z_true @ a_true + 0.5 * rng.standard_t(5, (n, d))
    Z0 = np.zeros((n, k_max), dtype=np.int64)
    Z0[:, 5:] = z_true
    return X, Z0, a_true


def test_a_given_z_under_ibpgibbs_gets_its_features_fitted():
    """pm.sample(initvals={"Z": Z0}) for a Student-t model (IBPGibbs on Z, NUTS on A), A not
    given: the first iteration keeps Z0 and sets A's active rows to their mode given it, so
    the chain stays at Z0 (before: A stayed at 0, where the likelihood does not see Z, and
    the first sweep redrew Z from its prior, about 1000 nats below)."""
    X, Z0, a_true = _student_t_data()
    with pm.Model():
        Z = pmi.IBP("Z", pm.Gamma("alpha", 1.0, 1.0), shape=Z0.shape)
        A = pm.Normal("A", 0.0, 2.0, shape=(Z0.shape[1], X.shape[1]))
        pm.StudentT("X", nu=5, mu=Z @ A, sigma=0.5, observed=X)
        idata = pm.sample(tune=0, draws=5, chains=1, cores=1, random_seed=3,
                          initvals={"Z": Z0}, progressbar=False,
                          compute_convergence_checks=False)
    zs = idata["posterior"]["Z"].values[0]
    np.testing.assert_array_equal(zs[0], Z0)
    assert np.mean(zs[-1] == Z0) > 0.97, np.mean(zs[-1] == Z0)
    assert np.abs(idata["posterior"]["A"].values[0, 0, 5:] - a_true).max() < 1.0
    assert idata["sample_stats"]["ibp_log_lik"].values[0, 0] > -350.0


@pytest.mark.filterwarnings("ignore::pymc_ibp.TruncationWarning")
@pytest.mark.parametrize("likelihood", ["normal", "student_t", "bernoulli_logit"])
def test_initvals_per_chain(likelihood):
    """pm.sample(initvals=[{"Z": Z0}, {}]): chain 0 starts at Z0 and chain 1, given nothing,
    is the chain a run given nothing at all draws with the same seed (its start search or
    surrogate start included).  PyMC builds the steps at chain 0's start, which once made
    every chain count as given (AcceleratedGibbs, IBPGibbs, PolyaGammaGibbs)."""
    X, Z0, _ = _student_t_data()
    with pm.Model():
        Z = pmi.IBP("Z", 1.0, shape=Z0.shape)
        A = pm.Normal("A", 0.0, 2.0, shape=(Z0.shape[1], X.shape[1]))
        if likelihood == "normal":
            pm.Normal("X", mu=Z @ A, sigma=0.5, observed=X)
        elif likelihood == "student_t":
            pm.StudentT("X", nu=5, mu=Z @ A, sigma=0.5, observed=X)
        else:
            pm.Bernoulli("X", logit_p=Z @ A, observed=(X > 0).astype(np.int64))
        kw = dict(tune=0, draws=2, chains=2, cores=1, random_seed=3, progressbar=False,
                  compute_convergence_checks=False)
        mixed = pm.sample(initvals=[{"Z": Z0}, {}], **kw)["posterior"]["Z"].values
        none = pm.sample(**kw)["posterior"]["Z"].values
    # (PolyaGammaGibbs' first iteration is a sweep from Z0, not a start iteration)
    assert np.mean(mixed[0, 0] == Z0) > (0.9 if likelihood == "bernoulli_logit" else 0.999)
    np.testing.assert_array_equal(mixed[1], none[1])
    assert mixed[1, 0].any()  # a start search / surrogate start, not the all-zero default


def test_init_z_policy_unit():
    data = pmi.datasets.block_images(30, seed=3)
    model = readme_model(data.X, k_max=6)
    Z0 = np.zeros((30, 6), dtype=np.int64)
    Z0[:, :4] = data.Z
    for init_z, given, expect_same in [("auto", Z0, True), ("auto", 0 * Z0, False),
                                       ("prior", Z0, False), ("point", 0 * Z0, True)]:
        with model:
            step = pmi.AcceleratedGibbs([model["Z"]], init_z=init_z)
        step.setup_chain(np.random.default_rng(0), 100, 10)
        out, *_ = step.search.start(step.rng, given.copy(), step.update.data.X, noise_of(step),
                                    n_tune=step.update.n_tune)
        assert np.array_equal(out, given) == expect_same, init_z
        # the start search replaces segments
        assert step.search.restarts == 1 and step.search.segment == 0
    with pytest.raises(ValueError, match="init_z"):
        with model:
            pmi.AcceleratedGibbs([model["Z"]], init_z="nope")


def test_bernoulli_support_point_start_counts_as_not_given():
    """Under a Bernoulli prior PyMC's default Z is its support point (p >= 1/2), not zeros: it
    must still count as "not given", so the chain starts from the start search (features by
    decreasing use), or with ``init_sweeps=0`` from a prior draw with restarts."""
    rng = np.random.default_rng(0)
    X = rng.normal(size=(30, 3))
    p = np.tile([0.8, 0.3, 0.6], (30, 1))
    for sweeps in (100, 0):
        with pm.Model() as model:
            Z = pm.Bernoulli("Z", p=p, shape=(30, 3))
            A = pm.Normal("A", 0.0, 1.0, shape=(3, 3))
            pm.Normal("X", mu=Z @ A, sigma=0.5, observed=X)
            step = pmi.AcceleratedGibbs([Z], init_sweeps=sweeps)
        point = model.initial_point()
        np.testing.assert_array_equal(point["Z"], p >= 0.5)
        step.setup_chain(np.random.default_rng(1), 100, 10)
        step.update.noise(point)
        assert step.search.will_search(point["Z"]) == (sweeps > 0)
        out, *_ = step.search.start(step.rng, point["Z"].copy(), step.update.data.X, noise_of(step),
                                    n_tune=step.update.n_tune)
        assert not np.array_equal(out, point["Z"])
        if sweeps:
            assert step.search.restarts == 1 and np.all(np.diff(out.sum(axis=0)) <= 0)
        else:
            assert step.search.restarts > 1


def test_vi_start_policy():
    """init_method="vi": a chain without a given Z starts from a variational fit (no
    multi-start burn-in) that already holds the glyphs; a given Z is still honoured."""
    data = pmi.datasets.block_images(300, noise=0.5, seed=3)
    model = readme_model(data.X, k_max=8)
    with model:
        step = pmi.AcceleratedGibbs([model["Z"]], init_method="vi")
    step.setup_chain(np.random.default_rng(0), 0, 10)
    out, *_ = step.search.start(step.rng, np.zeros((300, 8), dtype=np.int8), step.update.data.X,
                                noise_of(step, 0.25, 1.0), n_tune=step.update.n_tune)
    assert step.search.restarts == 1 and step.search.segment == 0
    Zb = out.astype(bool)
    for k in range(4):
        t = data.Z[:, k].astype(bool)
        jac = (Zb & t[:, None]).sum(0) / np.maximum((Zb | t[:, None]).sum(0), 1)
        assert jac.max() > 0.9
    Z0 = np.zeros((300, 8), dtype=np.int64)
    Z0[:, :4] = data.Z
    step.setup_chain(np.random.default_rng(0), 0, 10)
    assert np.array_equal(step.search.start(step.rng, Z0.copy(), step.update.data.X, noise_of(step),
                                            n_tune=step.update.n_tune)[0], Z0)
    with pytest.raises(ValueError, match="init_method"):
        with model:
            pmi.AcceleratedGibbs([model["Z"]], init_method="nope")


def test_vi_start_on_a_subset_assigns_the_other_rows():
    """init_method="vi" with N > 2 init_subsample: the fit runs on a row subset, then one
    sweep without births gives the other rows the fitted features."""
    data = pmi.datasets.block_images(300, noise=0.5, seed=3)
    model = readme_model(data.X, k_max=8)
    with model:
        step = pmi.AcceleratedGibbs([model["Z"]], init_method="vi", init_subsample=100)
    step.setup_chain(np.random.default_rng(0), 0, 10)
    out, *_ = step.search.start(step.rng, np.zeros((300, 8), dtype=np.int8), step.update.data.X,
                                noise_of(step, 0.25, 1.0), n_tune=step.update.n_tune)
    assert (out.sum(axis=1) > 0).sum() > 250  # not only the 100 fitted rows (281 have glyphs)
    m = out.sum(axis=0)
    assert (m > 0).sum() >= 3 and m.max() > 120  # features of the fit, given to other rows


@pytest.mark.filterwarnings("ignore::pymc_ibp.TruncationWarning")
@pytest.mark.parametrize("split", [0, 4], ids=["before-the-start", "after-the-start"])
def test_ibpgibbs_checkpoint_and_resume_gives_the_same_draws(split):
    """IBPGibbs (its first iteration the linear-Gaussian start search) beside the exact A
    draw: a run of 12 iterations equals ``split`` iterations, a pickled checkpoint of (point,
    sampling_state), a fresh CompoundStep restored from it and the rest; restored with
    ``started`` the chain does not search again."""
    data = pmi.datasets.block_images(30, seed=1)
    with pm.Model() as model:
        Z = pmi.IBP("Z", 1.0, shape=(30, 6))
        A = pm.Normal("A", 0.0, 1.0, shape=(6, 36))
        pm.Normal("X", mu=Z @ A, sigma=0.5, observed=data.X)

    def build():
        with model:
            return CompoundStep([pmi.IBPGibbs([model["Z"]]), pmi.AcceleratedGibbs([model["A"]])])

    total = 12
    full = build()
    full.setup_chain(np.random.default_rng(7), 6, total - 6)
    _, ref = drive(full, model.initial_point(), 0, total, 6)
    first = build()
    first.setup_chain(np.random.default_rng(7), 6, total - 6)
    point, part1 = drive(first, model.initial_point(), 0, split, 6)
    assert first.methods[0].started == (split > 0)
    blob = pickle.dumps((point, first.sampling_state))
    resumed = build()
    point, state = pickle.loads(blob)
    resumed.sampling_state = state
    assert_same_state(first, resumed)
    _, part2 = drive(resumed, point, split, total, 6)
    for a, b in zip(ref, part1 + part2, strict=True):
        for k in a:
            np.testing.assert_array_equal(a[k], b[k], err_msg=k)
