"""Synthetic data sets with known ground truth.

Among the generators:

* :func:`block_images` — the "block images" benchmark in the style of Griffiths & Ghahramani
  [1]_ (also used by Doshi-Velez & Ghahramani [3]_, Table 3): four binary 6×6 glyphs, each
  present in every image independently, plus Gaussian noise; :func:`binary_block_images`
  draws binary images from the same glyphs through a logistic link.
* :func:`ibp_linear_gaussian` — draws from the linear-Gaussian IBP model itself:
  ``Z ~ IBP(α, β)`` by the restaurant construction ([2]_; two-parameter form of Ghahramani,
  Griffiths & Sollich [4]_), ``A ~ N(0, σ_a²)``, ``X = Z A + ε`` with ``ε ~ N(0, σ_x²)``
  ([3]_, eq. 2).

Each returns an :class:`IBPData`.  Noise names: ``sigma_x`` is the noise std (``σ_x`` in [3]_,
``σ_n`` in Doshi-Velez [5]_ ch. 5–6 and App. A, ``ε_X`` in Williamson, Orbanz & Ghahramani
(2010), ``σ_X`` in Reed (2013)); ``sigma_a`` is the feature std (``σ_a``, ``σ_A``, ``ε_A``).
The data are *not* centred; centre them yourself if the model expects it (the features have
prior mean zero, so the model has no intercept; [5]_, App. A.1).

References
----------
.. [1] Griffiths, T. L. and Ghahramani, Z. (2005). Infinite latent feature models and the
   Indian buffet process. *Advances in Neural Information Processing Systems 18*.
.. [2] Griffiths, T. L. and Ghahramani, Z. (2011). The Indian buffet process: an introduction
   and review. *Journal of Machine Learning Research* 12, 1185–1224.
.. [3] Doshi-Velez, F. and Ghahramani, Z. (2009). Accelerated sampling for the Indian buffet
   process. *ICML 2009*.
.. [4] Ghahramani, Z., Griffiths, T. L. and Sollich, P. (2007). Bayesian nonparametric latent
   feature models. *Bayesian Statistics 8*, 201–226.
.. [5] Doshi-Velez, F. (2009). *The Indian buffet process: scalable inference and
   extensions*. MSc thesis, University of Cambridge.
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass

import numpy as np
from scipy import special

__all__ = ["BLOCK_COMBINATIONS", "BLOCK_GLYPHS", "GLYPHS_8X8", "IBPData", "binary_block_images",
           "block_combinations", "block_images", "dependent_glyphs", "ibp_linear_gaussian",
           "markov_glyphs"]


@dataclass(frozen=True, eq=False)
class IBPData:
    """A synthetic latent-feature data set together with its ground truth.

    The generative model is ``X = Z @ A + ε`` with ``ε_nd ~ N(0, sigma_x²)`` i.i.d. (the
    linear-Gaussian model; Doshi-Velez & Ghahramani 2009, eq. 2).  The dataclass is frozen
    (fields cannot be reassigned); the arrays themselves are ordinary writable NumPy arrays.

    Attributes
    ----------
    X : ndarray of float64, shape (N, D)
        Observed data (int8 0/1 for :func:`binary_block_images`).
    Z : ndarray of int64, shape (N, K)
        True binary feature assignments.  For :func:`ibp_linear_gaussian` the columns are in
        order of first appearance (customer order), so every column is non-empty and ``K = K+``.
    A : ndarray of float64, shape (K, D)
        True feature values.
    sigma_x : float or None
        Noise standard deviation used to generate ``X`` (``None`` for binary data).
    image_shape : tuple of int or None
        Shape of one image (``(6, 6)`` for block images), so ``X[n].reshape(image_shape)`` is
        an image; ``None`` when rows are not images.
    sigma_a : float or None
        Feature standard deviation of the prior on ``A``, if ``A`` was drawn from one.
    alpha : float or None
        IBP concentration used to draw ``Z``, if ``Z`` was drawn from an IBP.
    beta : float or None
        Two-parameter IBP ``β`` used to draw ``Z``, if ``Z`` was drawn from an IBP.
    labels : ndarray of int64, shape (N,), or None
        The category of each row, for data with correlated features (``Z = M[labels]``).
    M : ndarray of int64, shape (L, K), or None
        The category-feature matrix, for data with correlated features.
    covariate : ndarray of float64, shape (N,), or None
        The covariate value of each row, for data whose features change with a covariate.
    probabilities : ndarray of float64, shape (T, K), or None
        The true probability of each feature at each distinct covariate value (sorted).
    offset : float or None
        The offset ``b`` of the linear predictor, for binary data with a logistic link
        (``X ~ Bernoulli(sigmoid(Z @ A + offset))``).
    """

    X: np.ndarray
    Z: np.ndarray
    A: np.ndarray
    sigma_x: float | None
    image_shape: tuple[int, int] | None = None
    sigma_a: float | None = None
    alpha: float | None = None
    beta: float | None = None
    labels: np.ndarray | None = None
    M: np.ndarray | None = None
    covariate: np.ndarray | None = None
    probabilities: np.ndarray | None = None
    offset: float | None = None

    @property
    def n(self) -> int:
        """Number of data points ``N``."""
        return int(self.X.shape[0])

    @property
    def d(self) -> int:
        """Number of observed dimensions ``D``."""
        return int(self.X.shape[1])

    @property
    def k(self) -> int:
        """Number of true features ``K`` (columns of ``Z``)."""
        return int(self.Z.shape[1])


# --------------------------------------------------------------------------------------------
# input validation
# --------------------------------------------------------------------------------------------
def _check_int(name: str, value, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}")
    value = int(value)
    if value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value}")
    return value


def _check_real(name: str, value, *, lower: float, strict: bool, upper: float | None = None):
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ValueError(f"{name} must be a real number, got {value!r}")
    value = float(value)
    if not math.isfinite(value):
        raise ValueError(f"{name} must be finite, got {value}")
    if (strict and value <= lower) or (not strict and value < lower):
        op = ">" if strict else ">="
        raise ValueError(f"{name} must be {op} {lower}, got {value}")
    if upper is not None and value > upper:
        raise ValueError(f"{name} must be <= {upper}, got {value}")
    return value


# --------------------------------------------------------------------------------------------
# block images
# --------------------------------------------------------------------------------------------
def _make_block_glyphs() -> np.ndarray:
    """The four 6×6 binary glyphs, one per 3×3 quadrant (this package's own design: the papers
    that use block images do not publish their glyphs)."""
    g = np.zeros((4, 6, 6), dtype=np.float64)
    # 0: top-left — a 3×3 ring (square outline)
    g[0, 0:3, 0:3] = 1.0
    g[0, 1, 1] = 0.0
    # 1: top-right — a plus sign
    g[1, 1, 3:6] = 1.0
    g[1, 0:3, 4] = 1.0
    # 2: bottom-left — an "L"
    g[2, 3:6, 0] = 1.0
    g[2, 5, 0:3] = 1.0
    # 3: bottom-right — two vertical bars
    g[3, 3:6, 3] = 1.0
    g[3, 3:6, 5] = 1.0
    return g.reshape(4, 36)


BLOCK_GLYPHS = _make_block_glyphs()
"""The four true block-image features, shape (4, 36), 0/1 valued (rows reshape to 6×6)."""
BLOCK_GLYPHS.setflags(write=False)


def block_images(n, noise=0.5, seed=None, p=0.5) -> IBPData:
    """Block-images data: four 6×6 binary glyphs superimposed with Gaussian noise.

    Model (linear-Gaussian; the block-images benchmark of Griffiths & Ghahramani 2005)::

        z_nk ~ Bernoulli(p)  i.i.d.,  k = 1..4
        X = Z A + ε,   ε_nd ~ N(0, noise²)  i.i.d.

    where the rows of ``A`` (4×36) are four fixed binary 6×6 glyphs, each in its own 3×3
    quadrant: a ring (top-left), a plus (top-right), an "L" (bottom-left) and two bars
    (bottom-right).  The glyphs are this package's own design in the style of the
    Griffiths–Ghahramani set; they are disjoint, hence linearly independent and identifiable.

    Parameters
    ----------
    n : int
        Number of images, ``n >= 1``.
    noise : float, default 0.5
        Noise standard deviation ``sigma_x >= 0``.
    seed : None, int, array_like or numpy.random.Generator, optional
        Passed to :func:`numpy.random.default_rng`.  The same seed gives the same data.
    p : float, default 0.5
        Probability that each glyph is present in each image, ``0 <= p <= 1``.

    Returns
    -------
    IBPData
        ``X`` (n×36 float64), ``Z`` (n×4 int64), ``A`` (4×36 float64, 0/1),
        ``sigma_x=noise``, ``image_shape=(6, 6)``, ``sigma_a=None``, ``alpha=None``.

    Raises
    ------
    ValueError
        If ``n`` is not an integer >= 1, ``noise`` is negative or not finite, or ``p`` is
        outside ``[0, 1]``.
    """
    n = _check_int("n", n, 1)
    noise = _check_real("noise", noise, lower=0.0, strict=False)
    p = _check_real("p", p, lower=0.0, strict=False, upper=1.0)
    rng = np.random.default_rng(seed)

    A = np.array(BLOCK_GLYPHS, dtype=np.float64)  # writable copy
    Z = (rng.random((n, A.shape[0])) < p).astype(np.int64)
    X = Z @ A + noise * rng.standard_normal((n, A.shape[1]))
    return IBPData(X=X, Z=Z, A=A, sigma_x=noise, image_shape=(6, 6))


_CHUNK_ROWS = 1 << 16  # rows generated at a time by binary_block_images


def binary_block_images(n, weight=4.0, offset=-2.0, seed=None, p=0.5) -> IBPData:
    """Binary block images drawn from a Bernoulli-logit latent feature model whose features
    are the four glyphs of :func:`block_images` (binary data for
    :class:`pymc_ibp.PolyaGammaGibbs` and :class:`pymc_ibp.IBPGibbs` with a known truth)::

        z_nk ~ Bernoulli(p)  i.i.d.,  k = 1..4
        x_nd ~ Bernoulli(sigmoid((Z A)_nd + offset)),   A = weight x BLOCK_GLYPHS

    so a pixel is on with probability ``sigmoid(offset)`` off the glyphs present in the image
    and ``sigmoid(weight + offset)`` on one of them (0.12 and 0.88 by default).

    Parameters
    ----------
    n : int
        Number of images, ``n >= 1``.
    weight : float, default 4.0
        Log-odds that a glyph adds to its pixels (finite).
    offset : float, default -2.0
        Log-odds of a pixel no glyph covers (finite).
    seed : None, int, array_like or numpy.random.Generator, optional
        Passed to :func:`numpy.random.default_rng`.  The same seed gives the same data.
    p : float, default 0.5
        Probability that each glyph is present in each image, ``0 <= p <= 1``.

    Returns
    -------
    IBPData
        ``X`` (n×36 int8, 0/1), ``Z`` (n×4 int64), ``A`` (4×36 float64, ``weight`` x the
        glyphs), ``offset``, ``sigma_x=None``, ``image_shape=(6, 6)``.

    Raises
    ------
    ValueError
        If ``n`` is not an integer >= 1, ``weight`` or ``offset`` is not finite, or ``p`` is
        outside ``[0, 1]``.
    """
    n = _check_int("n", n, 1)
    weight = _check_real("weight", weight, lower=-math.inf, strict=False)
    offset = _check_real("offset", offset, lower=-math.inf, strict=False)
    p = _check_real("p", p, lower=0.0, strict=False, upper=1.0)
    rng = np.random.default_rng(seed)
    A = weight * np.array(BLOCK_GLYPHS, dtype=np.float64)
    Z = (rng.random((n, A.shape[0])) < p).astype(np.int64)
    X = np.empty((n, A.shape[1]), dtype=np.int8)
    for lo in range(0, n, _CHUNK_ROWS):  # in row blocks: no N x D float temporaries
        prob = special.expit(Z[lo:lo + _CHUNK_ROWS] @ A + offset)
        X[lo:lo + _CHUNK_ROWS] = rng.random(prob.shape) < prob
    return IBPData(X=X, Z=Z, A=A, sigma_x=None, image_shape=(6, 6), offset=offset)


BLOCK_COMBINATIONS = np.array([
    [0, 0, 0, 0], [1, 0, 0, 0], [0, 1, 0, 0], [0, 0, 1, 0], [0, 0, 0, 1],
    [1, 1, 0, 0], [0, 0, 1, 1], [1, 0, 1, 1], [1, 1, 1, 1]], dtype=np.int64)
"""The nine combinations of the four glyphs in :func:`block_combinations` (rows; the first is
the null combination), shape (9, 4)."""
BLOCK_COMBINATIONS.setflags(write=False)


def block_combinations(n=700, noise=0.5, seed=None) -> IBPData:
    """Block images whose glyphs co-occur in nine fixed combinations: the DP-IBP demonstration
    of Doshi-Velez (2009, §7.2.1, Fig. 7.4-7.5).

    Each image takes one of the nine combinations of :data:`BLOCK_COMBINATIONS` (the null
    combination, the four single glyphs, and four multi-glyph motifs) uniformly at random,
    and shows its glyphs (:data:`BLOCK_GLYPHS`) plus Gaussian noise::

        c_n ~ Uniform{0..8},   z_n = M[c_n],   X = Z A + ε,   ε_nd ~ N(0, noise²).

    The thesis's demonstration uses 700 images from four block types in combinations shown
    only as a picture; these are this package's own.  The features are non-negative, as the
    exponential prior of the thesis's likelihood assumes.

    Parameters
    ----------
    n : int, default 700
        Number of images, ``n >= 1``.
    noise : float, default 0.5
        Noise standard deviation ``sigma_x >= 0``.
    seed : None, int, array_like or numpy.random.Generator, optional
        Passed to :func:`numpy.random.default_rng`.

    Returns
    -------
    IBPData
        ``X`` (n×36), ``Z`` (n×4), ``A`` (4×36, 0/1), ``labels`` (n,), ``M`` (9×4),
        ``sigma_x=noise``, ``image_shape=(6, 6)``.
    """
    n = _check_int("n", n, 1)
    noise = _check_real("noise", noise, lower=0.0, strict=False)
    rng = np.random.default_rng(seed)
    A = np.array(BLOCK_GLYPHS, dtype=np.float64)
    M = np.array(BLOCK_COMBINATIONS)
    labels = rng.integers(0, M.shape[0], size=n)
    Z = M[labels]
    X = Z @ A + noise * rng.standard_normal((n, A.shape[1]))
    return IBPData(X=X, Z=Z, A=A, sigma_x=noise, image_shape=(6, 6), labels=labels, M=M)


# --------------------------------------------------------------------------------------------
# features that change with a covariate (the dependent IBP's experiments)
# --------------------------------------------------------------------------------------------
def _make_glyphs_8x8() -> np.ndarray:
    g = np.zeros((8, 8, 8), dtype=np.int64)
    g[0, :2, :] = 1                       # top bar
    g[1, :, :2] = 1                       # left bar
    for i in range(8):
        g[2, i, i] = 1                    # diagonal
        g[6, i, 7 - i] = 1                # anti-diagonal
    g[3, [0, 7], :] = 1                   # frame
    g[3, :, [0, 7]] = 1
    g[4, 3:5, :] = 1                      # plus
    g[4, :, 3:5] = 1
    g[5, 5:, 5:] = 1                      # bottom-right square
    g[7, 6:, :5] = 1                      # "T" upside down: bottom bar and a stem
    g[7, 2:6, 2] = 1
    return g.reshape(8, 64)


#: The eight distinct binary 8×8 glyphs of :func:`dependent_glyphs` (8 × 64).
GLYPHS_8X8 = _make_glyphs_8x8()
GLYPHS_8X8.setflags(write=False)


def _matern52(t, length_scale):
    r = np.abs(t[:, None] - t[None, :]) * np.sqrt(5.0) / length_scale
    return (1.0 + r + r**2 / 3.0) * np.exp(-r)


def dependent_glyphs(n_per_t=20, t_steps=40, noise=0.5, length_scale=5.0, seed=None) -> IBPData:
    """Glyph images whose feature probabilities drift over a covariate: the synthetic
    "bag of items" experiment of Williamson, Orbanz & Ghahramani (2010, §5).

    Each of the eight glyphs :data:`GLYPHS_8X8` has a probability curve
    ``p_k(t) = sigmoid(f_k(t))``, ``f_k`` a Matérn-5/2 Gaussian process draw (unit amplitude,
    ``length_scale`` time steps) over ``t = 0..t_steps-1``; at each ``t``, ``n_per_t`` images
    draw ``z_nk ~ Bernoulli(p_k(t))`` and show ``X = Z A + ε``, ``ε ~ N(0, noise²)`` (the
    paper's noise variance 0.25 is ``noise=0.5``).  The paper's glyphs, ``N(t)`` and length
    scale are not published; these are this package's.

    Returns
    -------
    IBPData
        ``X`` (N×64), ``Z`` (N×8), ``A`` (8×64), ``covariate`` (N,), ``probabilities``
        (t_steps×8), ``image_shape=(8, 8)``.
    """
    n_per_t = _check_int("n_per_t", n_per_t, 1)
    t_steps = _check_int("t_steps", t_steps, 1)
    noise = _check_real("noise", noise, lower=0.0, strict=False)
    length_scale = _check_real("length_scale", length_scale, lower=0.0, strict=True)
    rng = np.random.default_rng(seed)
    t = np.arange(t_steps, dtype=np.float64)
    chol = np.linalg.cholesky(_matern52(t, length_scale) + 1e-8 * np.eye(t_steps))
    f = chol @ rng.standard_normal((t_steps, 8))
    probs = 1.0 / (1.0 + np.exp(-f))
    covariate = np.repeat(t, n_per_t)
    Z = (rng.random((covariate.size, 8)) < probs[covariate.astype(int)]).astype(np.int64)
    A = GLYPHS_8X8.astype(np.float64)
    X = Z @ A + noise * rng.standard_normal((Z.shape[0], 64))
    return IBPData(X=X, Z=Z, A=A, sigma_x=noise, image_shape=(8, 8), covariate=covariate,
                   probabilities=probs)


def markov_glyphs(t_steps=100, alpha=2.0, noise=0.5, seed=None) -> IBPData:
    """One item tracked over ``t_steps`` time steps whose glyphs switch on and off by a Markov
    chain: the "collapsed model" experiment of Williamson, Orbanz & Ghahramani (2010, §5).

    ``Z(0)`` takes each of the eight glyphs :data:`GLYPHS_8X8` with probability
    ``α/(α + 8)`` (the finite IBP with eight features); feature ``k`` then flips at each step
    with probability ``q_k ~ Beta(1, 10)``.  ``X = Z A + ε``, ``ε ~ N(0, noise²)``.

    Returns
    -------
    IBPData
        ``X`` (t_steps×64), ``Z`` (t_steps×8), ``A`` (8×64), ``covariate`` (the time steps),
        ``probabilities`` (the flip probabilities, 1×8), ``image_shape=(8, 8)``.
    """
    t_steps = _check_int("t_steps", t_steps, 1)
    alpha = _check_real("alpha", alpha, lower=0.0, strict=True)
    noise = _check_real("noise", noise, lower=0.0, strict=False)
    rng = np.random.default_rng(seed)
    q = rng.beta(1.0, 10.0, size=8)
    Z = np.zeros((t_steps, 8), dtype=np.int64)
    Z[0] = rng.random(8) < alpha / (alpha + 8.0)
    for i in range(1, t_steps):
        flip = rng.random(8) < q
        Z[i] = np.where(flip, 1 - Z[i - 1], Z[i - 1])
    A = GLYPHS_8X8.astype(np.float64)
    X = Z @ A + noise * rng.standard_normal((t_steps, 64))
    return IBPData(X=X, Z=Z, A=A, sigma_x=noise, image_shape=(8, 8),
                   covariate=np.arange(t_steps, dtype=np.float64), probabilities=q[None, :])


# --------------------------------------------------------------------------------------------
# linear-Gaussian IBP data
# --------------------------------------------------------------------------------------------
def _ibp_restaurant(rng: np.random.Generator, n: int, alpha: float, beta: float) -> np.ndarray:
    """Draw ``Z ~ IBP(α, β)`` (n × K+, int64) by the restaurant construction (Griffiths &
    Ghahramani 2011; two-parameter form of Ghahramani, Griffiths & Sollich 2007).

    Customer ``i`` (1-based) takes each existing dish ``k`` with probability
    ``m_k / (β + i - 1)`` and then ``Poisson(αβ / (β + i - 1))`` new dishes.  For ``i = 1``
    this is ``Poisson(α)`` dishes; for ``β = 1`` it is ``m_k / i`` and ``Poisson(α / i)``.
    """
    counts = np.zeros(0, dtype=np.int64)
    taken: list[np.ndarray] = []
    for i in range(1, n + 1):
        denom = beta + i - 1.0
        old = np.flatnonzero(rng.random(counts.size) < counts / denom)
        k_new = int(rng.poisson(alpha * beta / denom))
        new = np.arange(counts.size, counts.size + k_new)
        counts[old] += 1
        counts = np.concatenate([counts, np.ones(k_new, dtype=np.int64)])
        taken.append(np.concatenate([old, new]))
    Z = np.zeros((n, counts.size), dtype=np.int64)
    for row, cols in enumerate(taken):
        Z[row, cols] = 1
    return Z


def ibp_linear_gaussian(n, d, alpha, sigma_x, sigma_a, seed=None, beta=1.0) -> IBPData:
    """Data drawn from the linear-Gaussian IBP model (Griffiths & Ghahramani 2011;
    Doshi-Velez & Ghahramani 2009, eq. 2).

    Model::

        Z ~ IBP(α, β)                      (restaurant construction)
        a_kd ~ N(0, sigma_a²)  i.i.d.,     A is K+ × D
        X = Z A + ε,  ε_nd ~ N(0, sigma_x²) i.i.d.

    Restaurant: customer ``i`` takes each earlier dish ``k`` with probability
    ``m_k / (β + i - 1)`` and ``Poisson(αβ / (β + i - 1))`` new dishes, so customer 1 takes
    ``Poisson(α)`` dishes; ``β = 1`` is the one-parameter IBP(α).  Then each row has
    ``Poisson(α)`` features and ``K+ ~ Poisson(α Σ_{i=1..N} β/(β+i-1))``, i.e.
    ``Poisson(α H_N)`` for ``β = 1`` (Griffiths & Ghahramani 2011; Ghahramani, Griffiths &
    Sollich 2007 for ``β ≠ 1``).

    Parameters
    ----------
    n : int
        Number of rows ``N >= 1``.
    d : int
        Number of observed dimensions ``D >= 1``.
    alpha : float
        IBP concentration ``α > 0``.
    sigma_x : float
        Noise standard deviation ``>= 0`` (``0`` gives noise-free ``X = Z A``).
    sigma_a : float
        Feature standard deviation ``> 0``.
    seed : None, int, array_like or numpy.random.Generator, optional
        Passed to :func:`numpy.random.default_rng`.  The same seed gives the same data.
    beta : float, default 1.0
        IBP mass/"stability" parameter ``β > 0`` of the two-parameter IBP.

    Returns
    -------
    IBPData
        ``X`` (N×D float64), ``Z`` (N×K+ int64, columns in order of first appearance, all
        non-empty), ``A`` (K+×D float64), ``sigma_x``, ``sigma_a``, ``alpha``, ``beta``,
        ``image_shape=None``.  If ``K+ = 0`` then ``Z`` is N×0, ``A`` is 0×D and ``X`` is pure
        noise.

    Raises
    ------
    ValueError
        If ``n`` or ``d`` is not an integer >= 1, ``alpha``, ``beta`` or ``sigma_a`` is not
        finite and positive, or ``sigma_x`` is negative or not finite.
    """
    n = _check_int("n", n, 1)
    d = _check_int("d", d, 1)
    alpha = _check_real("alpha", alpha, lower=0.0, strict=True)
    sigma_x = _check_real("sigma_x", sigma_x, lower=0.0, strict=False)
    sigma_a = _check_real("sigma_a", sigma_a, lower=0.0, strict=True)
    beta = _check_real("beta", beta, lower=0.0, strict=True)
    rng = np.random.default_rng(seed)

    Z = _ibp_restaurant(rng, n, alpha, beta)
    A = sigma_a * rng.standard_normal((Z.shape[1], d))
    X = Z @ A + sigma_x * rng.standard_normal((n, d))
    return IBPData(
        X=X,
        Z=Z,
        A=A,
        sigma_x=sigma_x,
        image_shape=None,
        sigma_a=sigma_a,
        alpha=alpha,
        beta=beta,
    )
