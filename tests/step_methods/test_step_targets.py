"""Steps that update one variable say so, by name, when one instance is given several (one
home: :func:`pymc_ibp.matching.graph.one_value_var`)."""

import pymc as pm
import pytest

import pymc_ibp as pmi

ONE_VARIABLE_STEPS = [pmi.IBPAlphaGibbs, pmi.CRPAlphaGibbs, pmi.DetectionRateGibbs,
                      pmi.ExponentialRateGibbs, pmi.NoisyOrQSlice, pmi.IBPGibbs, pmi.CRPGibbs,
                      pmi.BinaryFeatureGibbs, pmi.NonNegativeFeatureGibbs]


@pytest.mark.parametrize("step_cls", ONE_VARIABLE_STEPS, ids=lambda c: c.__name__)
def test_a_step_for_one_variable_given_two_names_them(step_cls):
    """Without ``blocked=True`` PyMC builds one instance per variable (``default_blocked`` is
    False for each of these steps), and each instance's model matcher speaks for its own
    variable; with it, the one instance refuses the pair and names both."""
    with pm.Model() as model:
        pm.Gamma("alpha", 2.0, 1.0)
        pm.Beta("q", 1.0, 1.0)
        names = r"\['alpha_log__', 'q_logodds__'\]"
        with pytest.raises(pmi.ModelPatternError,
                           match=rf"{step_cls.__name__} updates one .*; got {names}"):
            step_cls([model["alpha"], model["q"]], blocked=True)
