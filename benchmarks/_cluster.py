"""A local Dask cluster for the data-parallel benchmarks: process workers with one thread each
(PyTensor is not thread-safe; the shard kernels are numba), no dashboard."""

from __future__ import annotations

from contextlib import contextmanager


@contextmanager
def local_cluster(workers: int):
    """Yield a ``distributed.Client`` on a fresh ``LocalCluster`` of ``workers`` processes and
    close both afterwards."""
    import distributed

    cluster = distributed.LocalCluster(n_workers=workers, threads_per_worker=1, processes=True,
                                       dashboard_address=":0")
    client = distributed.Client(cluster)
    try:
        yield client
    finally:
        client.close()
        cluster.close()
