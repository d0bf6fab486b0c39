"""The separator of a per-matrix stat name (``ibp_n_active__Z1``): shared by the steps that
record the stats and the diagnostics that read them."""

SEP = "__"
