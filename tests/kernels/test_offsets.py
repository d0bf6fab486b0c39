"""Offsets as data: the rows' groups of ``b[group]`` and the joint groups of several offsets,
and the chunked arithmetic of :class:`~pymc_ibp.kernels.offsets.RowOffset`."""

import numpy as np
import pytest

from pymc_ibp.exceptions import DataError
from pymc_ibp.kernels.offsets import RowOffset, group_labels, joint_groups


def test_group_labelsread_negative_labels_and_refuse_out_of_range_ones():
    """b[group]'s labels as the steps read them: negative ones counted from the end, and a
    label b[group] could not index named with its row instead of wrapped onto a group."""
    np.testing.assert_array_equal(group_labels(np.array([0, -1, 2, -3]), 3), [0, 2, 2, 0])
    with pytest.raises(DataError, match=r"group\[2\] = 3 is out of range .* 3 groups"):
        group_labels(np.array([0, 1, 3, 4]), 3)
    with pytest.raises(DataError, match=r"group\[1\] = -4 "):
        group_labels(np.array([0, -4]), 3)


def test_joint_groups_number_every_combination_of_labels_once():
    """joint_groups: one number per distinct combination of the groupings' labels (negative
    labels included), the same number exactly for the rows with the same combination, and a
    row of each combination."""
    rng = np.random.default_rng(5)
    a, b, c = rng.integers(0, 4, 200), rng.integers(-2, 3, 200), rng.integers(0, 2, 200)
    first, index = joint_groups(a, b, c)
    combos = np.stack([a, b, c], axis=1)
    assert first.size == len(np.unique(combos, axis=0)) == index.max() + 1
    np.testing.assert_array_equal(combos[first][index], combos)  # each row's combination
    np.testing.assert_array_equal(index[first], np.arange(first.size))
    # a grouping given twice changes nothing
    again = joint_groups(a, b, a.copy(), c)
    np.testing.assert_array_equal(again[1], index)


def test_a_row_offset_table_read_through_groups_never_builds_n_by_d_in_one_piece(monkeypatch):
    """RowOffset's methods give the dense offset's arithmetic, chunk by chunk (a chunk of 7
    rows here), for a table read through the rows' groups and for one row for every row."""
    monkeypatch.setattr("pymc_ibp.kernels.offsets._OFFSET_CHUNK", 7)
    rng = np.random.default_rng(2)
    X = rng.normal(size=(30, 4))
    grouped = RowOffset(rng.normal(size=(3, 4)), rng.integers(0, 3, 30))
    single = RowOffset(rng.normal(size=(1, 4)))
    for off in (grouped, single):
        dense = off.dense(30)
        np.testing.assert_allclose(off.subtract_from(X), X - dense)
        np.testing.assert_allclose(off.add_to(X.copy(), 1, 3)[:, 1:3], X[:, 1:3] + dense[:, 1:3])
        np.testing.assert_allclose(np.broadcast_to(off.columns(0, 2), (30, 2)), dense[:, :2])
    other = RowOffset(rng.normal(size=(2, 4)), rng.integers(0, 2, 30))
    np.testing.assert_allclose(grouped.plus(other).dense(30), grouped.dense(30) + other.dense(30))
    np.testing.assert_allclose(grouped.plus(single).dense(30), grouped.dense(30) + single.dense(30))
