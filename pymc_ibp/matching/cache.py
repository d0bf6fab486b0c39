"""One match of each likelihood pattern per model, shared by every ``competence`` call.

``pm.sample`` asks every registered step for its competence on every free variable; each
linear-Gaussian or logit step answered by matching the whole model again.  :func:`cached`
keeps the matches of a model until something they depend on changes: its variables, the
values of its ``pm.Data`` containers (``pm.set_data``) or its initial values."""

from __future__ import annotations

import weakref

__all__ = ["cached", "model_key"]

_MATCHES = weakref.WeakKeyDictionary()


def model_key(model):
    """What a match of ``model`` depends on that can change after the model is built."""
    return (tuple(map(id, model.basic_RVs)),
            tuple(id(v.get_value(borrow=True)) for v in model.data_vars),
            tuple((id(rv), id(v)) for rv, v in model.rvs_to_initial_values.items()))


def cached(model, what, match):
    """``match(model)`` (e.g. a tuple of matched specs) for pattern ``what``, computed once per
    state of ``model`` (:func:`model_key`).  Errors it raises are not cached."""
    key = model_key(model)
    entry = _MATCHES.get(model)
    if entry is None or entry[0] != key:
        entry = (key, {})
        _MATCHES[model] = entry
    found = entry[1]
    if what not in found:
        found[what] = match(model)
    return found[what]
