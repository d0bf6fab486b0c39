"""Compiled functions of a model's point: the one place where the steps compile them.

A step evaluates its model's graphs (row log-likelihoods, hyperparameters, parameter
matrices) thousands of times per sweep on small models, where PyTensor's validation of
the inputs at every call costs more than the computation. :func:`compile_point_fn` compiles
such a graph once and returns a :class:`PointFunction`, which passes arrays that already
have the inputs' types straight to the compiled function.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
from pytensor.compile.sharedvalue import SharedVariable
from pytensor.graph.basic import Constant

__all__ = ["PointFunction", "compile_point_fn", "constant_value", "dim_lengths"]


class PointFunction:
    """A compiled PyTensor function of a point (a mapping from input names to values).

    Like PyMC's ``PointFunc``, called with a point, but the values that already have their
    input's type (a NumPy array of its dtype, number of dimensions and static shape, where
    the type fixes one) go to the function unchecked (PyTensor's ``trust_input``); any other
    value (a Python scalar, a list, another dtype) first goes through the input type's
    ``filter``, as PyTensor's own validation would, so a value PyTensor refuses is the same
    error here. Keys of the point that are not inputs are ignored.
    """

    __slots__ = ("f", "_spec")

    def __init__(self, f):
        implicit = [inp.implicit for inp in f.maker.inputs]  # shared variables, e.g. dim lengths
        n = implicit.index(True) if True in implicit else len(implicit)
        if any(not flag for flag in implicit[n:]):
            raise ValueError("PointFunction needs the explicit inputs before the implicit ones.")
        f.trust_input = True
        self.f = f
        spec = []
        for i, (inp, container) in enumerate(zip(f.maker.inputs[:n], f.input_storage[:n],
                                                 strict=True)):
            t = container.type
            static = tuple(t.shape) if any(s is not None for s in t.shape) else None
            spec.append((inp.variable.name, i, np.dtype(t.dtype), t.ndim, static))
        self._spec = tuple(spec)

    def __call__(self, point: Mapping):
        args = []
        for name, i, dtype, ndim, static in self._spec:
            value = point[name]
            if (type(value) is not np.ndarray or value.dtype != dtype or value.ndim != ndim
                    or (static is not None and not _fits(static, value.shape))):
                c = self.f.input_storage[i]
                value = c.type.filter(value, strict=c.strict, allow_downcast=c.allow_downcast)
            args.append(value)
        return self.f(*args)


def _fits(static, shape):
    """Whether ``shape`` has the lengths that a static shape (``None``: any length) fixes."""
    return all(s is None or s == n for s, n in zip(static, shape, strict=True))


def compile_point_fn(model, outs, *, extra_inputs: Sequence = (),
                     compile_kwargs: Mapping | None = None):
    """Compile ``outs`` (graphs of ``model``'s value variables, and of ``extra_inputs``) into
    a :class:`PointFunction` of the model's point.

    The inputs are every value variable of ``model`` (unused ones ignored) and then
    ``extra_inputs`` (named variables, given in the point under their names);
    ``compile_kwargs`` (a step's argument of that name; ``None``: none) go to
    ``model.compile_fn`` (e.g. ``mode``).
    """
    inputs = [*model.value_vars, *extra_inputs]
    taken = {v.name for v in model.value_vars}
    for v in extra_inputs:
        if not v.name:
            raise ValueError("compile_point_fn: every extra input needs a name (its key in the "
                             "point).")
        if v.name in taken:
            raise ValueError(f"compile_point_fn: the extra input {v.name!r} has the name of a "
                             "value variable of the model (or of another extra input).")
        taken.add(v.name)
    fn = model.compile_fn(outs, inputs=inputs, on_unused_input="ignore", point_fn=False,
                          **(compile_kwargs or {}))
    return PointFunction(fn)


def constant_value(var):
    """The value of ``var``, a graph without free inputs (a dimension's length, a constant
    hyperparameter, observed data), as a NumPy array.

    A constant's or a shared variable's own value; any other graph is evaluated by PyTensor's
    Python linker (mode ``FAST_COMPILE``), not compiled through the default numba backend as
    ``var.eval()`` would be (a compile per model built; measurements in
    ``benchmarks/README.md``).
    """
    if isinstance(var, Constant):
        return np.asarray(var.data)
    if isinstance(var, SharedVariable):
        return np.asarray(var.get_value())
    if not hasattr(var, "eval"):  # a plain number
        return np.asarray(var)
    return np.asarray(var.eval(mode="FAST_COMPILE"))


def dim_lengths(model, dims):
    """The lengths of ``model``'s dimensions ``dims`` as a tuple of ints (a distribution's shape
    from its ``dims``), read with :func:`constant_value`."""
    return tuple(int(constant_value(model.dim_lengths[d])) for d in dims)
