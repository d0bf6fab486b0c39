"""Geweke joint-distribution test of the dependent IBP's updates (Geweke 2004): the sticks,
h and g (DependentIBPGibbs), Z (IBPGibbs with the dIBP's prior log-odds), alpha (IBPAlphaGibbs,
stick-breaking conditional) and, in the slow test, the GP length scales (GPLengthScaleHMC).

Marginal-conditional simulator: every variable from the prior by pm.draw.  Successive-
conditional simulator: the steps, then the data X | Z regenerated (a Bernoulli likelihood
through fixed weights, so that X is a pm.Data set between iterations).  Both leave the joint
distribution invariant, so the means of the test functions agree.
"""

import numpy as np
import pymc as pm
import pytest

import pymc_ibp as pmi
from tests._helpers import geweke_z

ROW_T = np.array([0.0, 1.0])
K = 2
W = np.array([[1.0, -0.5], [-0.5, 1.0]])


def build(free_ls):
    with pm.Model() as model:
        alpha = pm.Gamma("alpha", 3.0, 2.0)
        xd = pm.Data("xd", np.zeros((len(ROW_T), 2)))
        mod = pmi.dependent_ibp("Z", ROW_T, alpha=alpha, k=K, rho=0.5,
                                length_scale=None if free_ls else 1.3)
        pm.Bernoulli("X", logit_p=mod.Z @ W - 0.3, observed=xd)
    return model, mod


def functions(alpha, b, g, Z, ls):
    Zf = Z.astype(float)
    return np.concatenate([
        [alpha, np.log(b[-1]), ls[0], np.log(ls).mean()],
        b, Zf.mean(axis=0), [Zf[0, 0] * Zf[1, 0], Zf[0, 1] * Zf[1, 1], Zf[0, 0] * Zf[0, 1]],
        g.mean(axis=1), [(g**2).mean(), (g[:, 0] * (2 * Zf[0] - 1)).mean()],
    ])


def marginal(model, mod, n, seed):
    names = [model["alpha"], mod.sticks, mod.g, mod.Z, mod.length_scale]
    draws = pm.draw(names, n, random_seed=seed)
    return np.array([functions(*[d[i] for d in draws]) for i in range(n)])


def successive(model, mod, n, seed, free_ls):
    rng = np.random.default_rng(seed)
    with model:
        steps = [pmi.DependentIBPGibbs([mod.sticks, mod.g]), pmi.IBPGibbs([mod.Z]),
                 pmi.IBPAlphaGibbs([model["alpha"]])]
        if free_ls:
            steps.append(pmi.GPLengthScaleHMC([mod.length_scale]))
    for s in steps:
        s.setup_chain(rng, tune=0, draws=n)
        s.stop_tuning()
    start = pm.draw([model["alpha"], mod.sticks, mod.g, mod.Z, mod.length_scale],
                    random_seed=seed + 1)
    values = dict(zip(["alpha", "Z_sticks", "Z_g", "Z", "Z_ls"], start, strict=True))
    point = model.initial_point()
    for name, v in values.items():
        if name not in model.named_vars or model[name] not in model.free_RVs:
            continue
        rv = model[name]
        value_var = model.rvs_to_values[rv]
        tr = model.rvs_to_transforms.get(rv)
        point[value_var.name] = np.asarray(tr.forward(v, *rv.owner.inputs).eval()
                                           if tr is not None else v, dtype=value_var.dtype)
    value_of = model.compile_fn(
        model.replace_rvs_by_values([model["alpha"], mod.sticks, mod.g, mod.Z,
                                     mod.length_scale]),
        inputs=model.value_vars, on_unused_input="ignore", point_fn=True)
    out = np.empty((n, len(functions(*start))))
    xd = model["xd"]
    for it in range(n):
        Z = point["Z"]
        p = 1.0 / (1.0 + np.exp(-(Z @ W - 0.3)))
        xd.set_value((rng.random(p.shape) < p).astype(float))
        for s in steps:
            point, _ = s.step(point)
        out[it] = functions(*value_of(point))
    return out


def run(free_ls, n, seed=0):
    model, mod = build(free_ls)
    return geweke_z(marginal(model, mod, n, seed), successive(model, mod, n, seed, free_ls))


def test_geweke_dependent_ibp_sweep():
    z = run(free_ls=False, n=8000)  # breakages: see the docs page of DependentIBPGibbs
    assert np.all(np.abs(z) < 4.5), np.round(z, 2)


@pytest.mark.slow
def test_geweke_dependent_ibp_sweep_with_length_scales():
    z = run(free_ls=True, n=12_000, seed=1)
    assert np.all(np.abs(z) < 4.5), np.round(z, 2)
