"""Names of the ``ibp_`` sample stats when a model samples several binary feature matrices.

A model with one sampled IBP (or Bernoulli) feature matrix gets the plain names
(``ibp_n_active``, ``ibp_log_joint``, …).  With several, every step that belongs to one matrix
suffixes its stats with that matrix's name — ``ibp_n_active__Z1``, ``ibp_n_active__Z2`` — so
that each stat is attributable to its matrix; :func:`pymc_ibp.summary`, :func:`pymc_ibp.relabel`
and the plots look up the names of the matrix the user names (:func:`matrix_stat`).
"""

from __future__ import annotations

from pymc_ibp._pytensor_utils import compile_point_fn
from pymc_ibp._stat_names import SEP

__all__ = ["group_by_matrix", "matrix_stat", "model_logp_fn", "one_step_per_matrix",
           "per_matrix_stats", "sampled_matrices"]

def sampled_matrices(model):
    """The free binary feature matrices of ``model`` (a recognised prior: pmi.IBP, 2-D
    Bernoulli)."""
    from pymc_ibp.matching.priors import match_prior

    return [rv for rv in model.free_RVs if match_prior(model, rv) is not None]


def per_matrix_stats(step, model, z_label, only=None):
    """Rename ``step``'s stats to ``<stat>__<z_label>`` when ``model`` samples several feature
    matrices (instance attributes, read by PyMC when it builds the trace); returns the map
    from plain to recorded names, to apply to each ``step()``'s stats dict.  ``only``: the
    plain names this instance records (default all of its class's), e.g. to leave the stats
    of a ``Z`` move to the step that makes it: two steps recording one name would make PyMC
    stack them into a non-scalar stat."""
    plain = dict(type(step).stats_dtypes_shapes)
    if only is not None:
        plain = {k: v for k, v in plain.items() if k in only}
    several = len(sampled_matrices(model)) > 1
    names = {k: (f"{k}{SEP}{z_label}" if several else k) for k in plain}
    step.stats_dtypes_shapes = {names[k]: v for k, v in plain.items()}
    step.stats_dtypes = [{names[k]: v[0] for k, v in plain.items()}]
    return names


def matrix_stat(stats, name, z_name):
    """The recorded name of stat ``name`` for matrix ``z_name`` in ``stats`` (a Dataset or a
    mapping), or ``None`` when absent."""
    if stats is None:
        return None
    if f"{name}{SEP}{z_name}" in stats:
        return f"{name}{SEP}{z_name}"
    return name if name in stats else None


def model_logp_fn(model, compile_kwargs=None, without=()):
    """The point function behind the ``ibp_model_logp`` stat: the model's log density (every
    free variable, the data and the potentials, no Jacobian terms) but the terms of the
    observed variables ``without``, which the caller adds from its own kernels (PyTensor's
    graph of a likelihood ``Bernoulli(σ(Z A + b))`` allocates ``N x D`` arrays per call);
    ``None`` for a model with a variable that has no logp (e.g. ``pm.Simulator``), whose stat
    is then NaN."""
    skip = {id(rv) for rv in without}
    terms = ([rv for rv in model.free_RVs + model.observed_RVs if id(rv) not in skip]
             + list(model.potentials))
    try:
        logp = model.logp(vars=terms, jacobian=False)
    except NotImplementedError:
        return None
    return compile_point_fn(model, logp, compile_kwargs=compile_kwargs)


def group_by_matrix(model, vars_, matrices):
    """Split the user's variables ``vars_`` into one group per feature matrix: ``matrices``
    lists, for each matched model, the random variables one step instance updates together
    (its ``Z``, ``A``, …); variables of no matched model form a last group.  For
    :func:`one_step_per_matrix`."""
    from pymc.util import get_value_vars_from_user_vars

    value_vars = get_value_vars_from_user_vars(vars_, model)
    groups, seen = [], set()
    for rvs in matrices:
        mine = {model.rvs_to_values[rv] for rv in rvs}
        group = [v for v in value_vars if v in mine and v not in seen]
        if group:
            groups.append(group)
            seen.update(group)
    rest = [v for v in value_vars if v not in seen]
    return groups + ([rest] if rest else [])


def one_step_per_matrix(cls, args, kwargs, group):
    """For a step class's ``__new__``: PyMC hands all the variables it assigned to ``cls`` to
    one instance; when ``group(model, value_vars)`` splits them into several groups (one per
    feature matrix), build one instance per group (each with its own spawned ``rng``) in a
    ``CompoundStep``.  Returns ``None`` when one instance is right."""
    import pymc as pm
    from pymc.step_methods.compound import CompoundStep
    from pymc.util import get_random_generator

    vars_ = kwargs["vars"] if "vars" in kwargs else (args[0] if args else None)
    if vars_ is None:
        return None
    model = pm.modelcontext(kwargs.get("model"))
    groups = group(model, vars_)
    if len(groups) < 2:
        return None
    rest = args if "vars" in kwargs else args[1:]
    kw = {k: v for k, v in kwargs.items() if k != "vars"}
    rngs = get_random_generator(kw.pop("rng", None)).spawn(len(groups))
    return CompoundStep([cls(g, *rest, rng=r, **kw) for g, r in zip(groups, rngs, strict=True)])
