"""The Metropolis–Hastings moves a linear-Gaussian sweep is followed by: split–merge
(Meeds et al. 2007), split–merge of features chosen uniformly, data-driven birth/death,
pattern swaps of feature pairs and moves between a pair and its merged triple, each with
``A`` integrated out."""

from __future__ import annotations

from typing import NamedTuple

from pymc_ibp.kernels.pair_swaps import pair_pattern_swaps, pair_triple_moves
from pymc_ibp.kernels.split_merge import (
    SPLIT_MERGE_PROPOSALS,
    column_split_merge,
    sequential_birth_death,
)

__all__ = ["Moves", "MovesInfo", "linear_gaussian_moves"]


class Moves(NamedTuple):
    """Proposals per sweep of each move (0: off), the split–merge allocation
    (:data:`~pymc_ibp.kernels.split_merge.SPLIT_MERGE_PROPOSALS`) and the rows a birth draws
    its feature from."""

    split_merge: int = 0
    proposal: str = "sequential"
    column_split_merge: int = 0
    birth_death: int = 0
    birth_rows: int = 64
    pair_swaps: int = 0
    pair_triples: int = 0


class MovesInfo(NamedTuple):
    """Accepted proposals: split–merge (both kinds), birth/death, pair swaps and pair /
    triple moves."""

    split_merge: int
    birth_death: int
    pair_swaps: int
    pair_triples: int = 0


def linear_gaussian_moves(rng, Z, X, m, noise, alpha, beta, trXX, moves):
    """The ``moves`` (:class:`Moves`) on ``Z`` and its counts ``m`` (both in place) given the
    data ``X`` with ``trXX = ‖X_b‖²`` per block of ``noise``, under the IBP(``alpha``,
    ``beta``) prior, in a fixed order; a move with 0 proposals draws nothing."""
    sm = bd = ps = pt = 0
    if moves.split_merge > 0:
        sm = SPLIT_MERGE_PROPOSALS[moves.proposal](rng, Z, X, m, noise, alpha, beta,
                                                   moves.split_merge, trXX)
    if moves.column_split_merge > 0:
        sm += column_split_merge(rng, Z, X, m, noise, alpha, beta, moves.column_split_merge,
                                 trXX)
    if moves.birth_death > 0:
        bd = sequential_birth_death(rng, Z, X, m, noise, alpha, beta, moves.birth_death,
                                    moves.birth_rows, trXX)
    if moves.pair_swaps > 0:
        ps = pair_pattern_swaps(rng, Z, X, m, noise, alpha, beta, moves.pair_swaps, trXX)
    if moves.pair_triples > 0:
        pt = pair_triple_moves(rng, Z, X, m, noise, alpha, beta, moves.pair_triples, trXX)
    return MovesInfo(int(sm), int(bd), int(ps), int(pt))
