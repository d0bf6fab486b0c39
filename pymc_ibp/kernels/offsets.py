"""Offsets added to the mean of ``N x D`` data (``b`` in ``Z @ A + b``) as data: one row for
every row, ``N x D``, or a table with one row per group read through every row's group
(``b[group]``), expanded in chunks of rows, never as an ``N x D`` temporary."""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from pymc_ibp.exceptions import DataError

__all__ = ["RowOffset", "group_labels", "group_row_sums", "joint_groups", "non_finite_entry"]


#: rows per chunk where an offset table is expanded (a chunk's temporary, not N x D)
_OFFSET_CHUNK = 1 << 15


class RowOffset(NamedTuple):
    """The offset added to the mean of ``N x D`` data (``b`` in ``Z @ A + b``), read as
    ``table[rows]``: ``table`` with one row per group and ``rows`` every data row's group
    (``b[group]``), or ``table`` itself when ``rows`` is ``None`` (one row added to every row,
    or ``N x D``).  The methods expand a table in chunks of rows: no ``N x D`` temporary."""

    table: np.ndarray
    rows: np.ndarray | None = None

    def subtract_from(self, X, out=None):
        """``X`` minus the offset, into ``out`` (may be ``X``; default a new array)."""
        if out is None:
            out = np.empty(X.shape, dtype=np.result_type(X, self.table))
        if self.rows is None:
            return np.subtract(X, self.table, out=out)
        for s in range(0, X.shape[0], _OFFSET_CHUNK):
            e = s + _OFFSET_CHUNK
            np.subtract(X[s:e], self.table[self.rows[s:e]], out=out[s:e])
        return out

    def add_to(self, Y, c0=0, c1=None):
        """``Y[:, c0:c1] += offset[:, c0:c1]`` (``Y``: ``N x D``; all columns by default), in
        place; returns ``Y``."""
        cols = slice(c0, c1)
        if self.rows is None:
            Y[:, cols] += self.table[:, cols]
            return Y
        for s in range(0, Y.shape[0], _OFFSET_CHUNK):
            Y[s:s + _OFFSET_CHUNK, cols] += self.table[self.rows[s:s + _OFFSET_CHUNK], cols]
        return Y

    def columns(self, c0, c1):
        """The offset's columns ``c0:c1``, as an array that broadcasts against ``N x D_b``
        (expanded to ``N`` rows for a table)."""
        part = self.table[:, c0:c1]
        return part if self.rows is None else part[self.rows]

    def dense(self, n):
        """The offset as an ``N x D`` array (``N = n``; tests and small data)."""
        return (np.broadcast_to(self.table, (n, self.table.shape[1])).copy()
                if self.rows is None else self.table[self.rows])

    def plus(self, other):
        """The offset plus another one, ``other`` (a :class:`RowOffset` of the same data; an
        ``N x D`` table of ``other`` is changed in place and returned inside the result).  Two
        tables read through different rows give one row per pair of their rows that some data
        row reads: still no ``N x D`` array."""
        if other.rows is None and other.table.shape[0] == 1:
            return RowOffset(self.table + other.table, self.rows)
        if self.rows is None and self.table.shape[0] == 1:
            return RowOffset(other.table + self.table, other.rows)
        if other.rows is None:
            if self.rows is None and self.table.shape != other.table.shape:
                raise ValueError("RowOffset.plus: the two offsets differ in shape.")
            return RowOffset(self.add_to(other.table))
        if self.rows is None:
            return RowOffset(other.add_to(np.array(self.table, dtype=np.float64)))
        if self.rows.shape != other.rows.shape:
            raise ValueError("RowOffset.plus: the two offsets cover different rows.")
        first, rows = joint_groups(self.rows, other.rows)
        return RowOffset(self.table[self.rows[first]] + other.table[other.rows[first]], rows)


def joint_groups(*labels):
    """Every row's group under several groupings at once: ``(first, index)`` with
    ``index[i]`` the number of row ``i``'s combination of labels (one label from each
    integer vector of ``labels``, all of one length; combinations numbered in sorted order)
    and ``first[c]`` a row of combination ``c``.  One pass of :func:`numpy.unique` per
    grouping, no ``N x len(labels)`` array: a table with one row per combination then holds
    what the groupings' tables add up to at every row (:meth:`RowOffset.plus`).  A grouping
    equal to an earlier one adds nothing and is skipped."""
    index, done = None, []
    for lab in labels:
        lab = np.asarray(lab, dtype=np.int64)
        if any(np.array_equal(lab, d) for d in done):
            continue
        done.append(lab)
        low = lab.min(initial=0)
        key = lab - low if low else lab  # labels from 0 (no copy when they are)
        if index is not None:
            key = index * (lab.max(initial=0) - low + 1) + key
        _, first, index = np.unique(key, return_index=True, return_inverse=True)
    return first, index.reshape(-1)


def group_labels(group, n_groups):
    """Every row's group as ``b[group]`` reads it (``group`` may hold negative labels, counted
    from the end as numpy and PyTensor index), as ``int64`` in ``0 .. n_groups-1`` (``group``
    itself when it already is: read it, do not write it): the one home of that reading for
    the steps' per-group offsets.  A label ``b[group]`` could not read (``>= n_groups`` or
    ``< -n_groups``) raises :class:`~pymc_ibp.DataError` naming its row rather than being
    wrapped onto another group."""
    labels = np.asarray(group, dtype=np.int64)
    if labels.size == 0:
        return labels
    low, high = labels.min(), labels.max()
    if low < -n_groups or high >= n_groups:
        row = int(np.flatnonzero((labels < -n_groups) | (labels >= n_groups))[0])
        raise DataError(
            f"b[group]: group[{row}] = {labels[row]} is out of range for an offset of "
            f"{n_groups} groups (labels 0..{n_groups - 1}, or -{n_groups}..-1 counted from "
            "the end); give the offset one row per group label.")
    return labels % n_groups if low < 0 else labels


def non_finite_entry(table):
    """``((row, column), count)``: the first entry of the 2-D array ``table`` that is NaN or
    infinite and how many are, or ``None`` when all are finite.  One sum tells (a NaN or inf
    makes it non-finite), so a step checking an ``N x D`` table at every call makes no
    ``N x D`` temporary; the entries are looked at only when the sum is not finite."""
    with np.errstate(over="ignore", invalid="ignore"):  # inf + (-inf), a sum past 1.8e308
        total = table.sum()
    if np.isfinite(total):
        return None
    bad = ~np.isfinite(table)
    if not bad.any():  # the sum overflowed
        return None
    return tuple(int(i) for i in np.argwhere(bad)[0]), int(bad.sum())


def group_row_sums(M, labels, n_groups):
    """``G x C`` sums of the rows of ``M`` (``N x C``) over each group of rows (``labels``:
    every row's group in ``0 .. G-1``), one column at a time (no ``N x C`` temporary).  The one
    home of per-group row sums: :class:`~pymc_ibp.IBPOffsetGibbs`'s residual sums and the start
    search's per-group baseline."""
    out = np.empty((n_groups, M.shape[1]))
    for j in range(M.shape[1]):
        out[:, j] = np.bincount(labels, weights=M[:, j], minlength=n_groups)
    return out
