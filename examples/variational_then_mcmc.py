"""A fast approximate fit first, then MCMC from it: variational IBP and MEIBP on block images.

1. ``pmi.inference.fit_variational`` fits the README's model to 1000 block images in seconds;
   its draws (``fit.sample``) go through the usual ``pmi.summary`` and ``pmi.plot_features``.
2. ``pmi.inference.fit_meibp`` fits the non-negative version (``A ~ HalfNormal``).
3. ``pm.sample(initvals=fit.initvals())`` refines the variational fit by MCMC: the chains
   start at its Z, so no burn-in is spent finding the glyphs.

Outputs (in --out, default vi_output/): ``vi_features.png`` (features of the variational
fit, above the true glyphs) and ``mcmc_features.png`` (after MCMC).

    python examples/variational_then_mcmc.py
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default="vi_output", help="folder for the PNG files")
    parser.add_argument("--n", type=int, default=1000, help="number of images")
    parser.add_argument("--seed", type=int, default=2026)
    args = parser.parse_args()

    import matplotlib

    matplotlib.use("Agg")
    import numpy as np
    import pymc as pm

    import pymc_ibp as pmi

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    data = pmi.datasets.block_images(args.n, noise=0.5, seed=args.seed)
    k_max = 20
    coords = {"obs": range(args.n), "feature": range(k_max), "dim": range(36)}
    with pm.Model(coords=coords) as model:
        alpha = pm.Gamma("alpha", 1.0, 1.0)
        Z = pmi.IBP("Z", alpha, dims=("obs", "feature"))
        sigma_a = pm.HalfNormal("sigma_a", 2.0)
        A = pm.Normal("A", 0.0, sigma_a, dims=("feature", "dim"))
        sigma_x = pm.HalfNormal("sigma_x", 1.0)
        pm.Normal("X", mu=Z @ A, sigma=sigma_x, observed=data.X, dims=("obs", "dim"))

    # 1. variational fit (finite approximation; the infinite one is method="infinite")
    t = time.perf_counter()
    fit = pmi.inference.fit_variational(model, method="finite", random_seed=args.seed)
    sizes = np.sort(fit.Z.sum(axis=0))[::-1]
    print(f"variational fit: {time.perf_counter() - t:.1f} s, {len(fit.elbo)} iterations, "
          f"ELBO {fit.elbo[-1]:.1f}, sigma_x {fit.sigma_x:.3f}, alpha {fit.alpha:.2f}")
    print(f"  feature sizes of the most probable Z: {sizes[sizes > 0].tolist()}")
    approx = fit.sample(200, random_seed=1)
    print(pmi.summary(approx, var_names=["sigma_x", "sigma_a"]).head(6).to_string())
    fig = pmi.plot_features(approx, image_shape=(6, 6), true_features=data.A)
    fig.savefig(out / "vi_features.png", dpi=100)

    # 2. MEIBP on the non-negative model
    with pm.Model() as nonneg:
        Zn = pmi.IBP("Z", 1.0, shape=(args.n, k_max))
        An = pm.HalfNormal("A", 1.0, shape=(k_max, 36))
        pm.Normal("X", Zn @ An, 0.5, observed=data.X)
    t = time.perf_counter()
    me = pmi.inference.fit_meibp(nonneg, random_seed=args.seed)
    m = me.Z.sum(axis=0)
    print(f"\nMEIBP: {time.perf_counter() - t:.1f} s, {len(me.objective)} iterations, "
          f"feature sizes {np.sort(m[m > 0])[::-1].tolist()}")

    # 3. MCMC from the variational fit
    with model:
        idata = pm.sample(tune=50, draws=200, chains=2, cores=1, random_seed=args.seed,
                          initvals=fit.initvals(), progressbar=False,
                          compute_convergence_checks=False)
    print("\nMCMC started from the variational fit:")
    print(pmi.summary(idata, var_names=["alpha", "sigma_x", "sigma_a"]).head(9).to_string())
    fig = pmi.plot_features(idata, image_shape=(6, 6), true_features=data.A)
    fig.savefig(out / "mcmc_features.png", dpi=100)
    print(f"\nPictures in {out}/")


if __name__ == "__main__":
    main()
