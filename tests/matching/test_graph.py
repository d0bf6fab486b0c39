"""The graph utilities of the matchers: products, means split into product and offset."""

import pytensor.tensor as pt
import pytest
from pytensor.graph.traversal import ancestors

from pymc_ibp.matching.graph import (
    fixed_normal_scale,
    is_matmul,
    mean_terms,
    same_for_every_row,
    strip,
)


@pytest.mark.parametrize("product", [lambda z, a: z @ a, pt.dot, pt.matmul])
def test_every_spelling_of_a_matrix_product_is_one(product):
    z, a = pt.matrix("z"), pt.matrix("a")
    assert is_matmul(product(z, a))
    assert not is_matmul(z * a) and not is_matmul(z)


def test_a_mean_splits_into_its_product_and_the_other_terms():
    z, a, b, c = pt.matrix("z"), pt.matrix("a"), pt.vector("b"), pt.matrix("c")
    left, right, offset, mask = mean_terms(z @ a + b - c, left=z)
    assert left is z and right is a and mask is None
    assert {b, c} <= set(ancestors([offset]))
    assert mean_terms(z @ a, left=z)[2] is None
    assert mean_terms(z * a, left=z) is None  # no product: not the pattern
    assert mean_terms(z @ a + c @ a) is None  # two products, no left factor named


def test_an_offset_the_same_for_every_row_is_told_apart_from_one_per_row():
    b, r = pt.vector("b"), pt.vector("r")
    assert same_for_every_row(b)  # (D,), broadcast along the rows
    assert not same_for_every_row(r[:, None])  # (N, 1): one value per row
    assert strip(pt.cast(b, "float32")) is b


def test_a_feature_scale_is_read_only_where_the_model_fixes_it():
    """A ~ Normal(0, σ) with σ a number (or an array of one value) gives σ; a free scale, a
    non-zero mean, several values or another distribution give None."""
    import numpy as np
    import pymc as pm

    with pm.Model() as model:
        s = pm.HalfNormal("s", 1.0)
        fixed = pm.Normal("fixed", 0.0, 1.5, shape=(3, 2))
        same = pm.Normal("same", 0.0, np.full((3, 1), 2.0), shape=(3, 2))
        free = pm.Normal("free", 0.0, s, shape=(3, 2))
        shifted = pm.Normal("shifted", 1.0, 1.0, shape=(3, 2))
        varied = pm.Normal("varied", 0.0, np.array([[1.0], [2.0], [3.0]]), shape=(3, 2))
        laplace = pm.Laplace("laplace", 0.0, 1.0, shape=(3, 2))
    assert fixed_normal_scale(model, fixed) == 1.5
    assert fixed_normal_scale(model, same) == 2.0
    for rv in (free, shifted, varied, laplace, s):
        assert fixed_normal_scale(model, rv) is None, rv.name
    assert fixed_normal_scale(model, fixed * 2.0) is None

