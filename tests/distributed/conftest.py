"""A LocalCluster of two process workers shared by the tests of a module (``client``), or one
for a single test (``own_client``)."""

import pytest

from tests._helpers import DIST_WAIT


def _cluster_client():
    distributed = pytest.importorskip("distributed")
    cluster = distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                       dashboard_address=":0")
    c = distributed.Client(cluster)
    # both workers up before the first test (on a loaded machine they can start slowly; a test
    # that needs two workers would otherwise see one): the same wait as the tests' own
    c.wait_for_workers(2, timeout=DIST_WAIT)
    return cluster, c


@pytest.fixture(scope="module")
def client():
    cluster, c = _cluster_client()
    yield c
    c.close()
    cluster.close()


@pytest.fixture
def own_client():
    """A cluster of its own, for a test that kills workers: the module's other tests do not
    depend on how soon (or whether) Dask's nannies restart them."""
    cluster, c = _cluster_client()
    yield c
    c.close()
    cluster.close()
