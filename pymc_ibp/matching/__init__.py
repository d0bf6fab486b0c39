"""From a PyMC model's graph to the specs the samplers need: which prior a binary matrix has
(:mod:`~pymc_ibp.matching.priors`), which likelihood pattern it feeds
(:mod:`~pymc_ibp.matching.linear_gaussian`, :mod:`~pymc_ibp.matching.logit`,
:mod:`~pymc_ibp.matching.features_given_z`), and the graph utilities they share
(:mod:`~pymc_ibp.matching.graph`).  Never imports a step method."""
