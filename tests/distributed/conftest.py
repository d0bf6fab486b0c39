"""A LocalCluster of two process workers shared by the tests of a module."""

import pytest

from tests._helpers import DIST_WAIT


@pytest.fixture(scope="module")
def client():
    distributed = pytest.importorskip("distributed")
    cluster = distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                       dashboard_address=":0")
    c = distributed.Client(cluster)
    # both workers up before the first test (on a loaded machine they can start slowly; a test
    # that needs two workers would otherwise see one): the same wait as the tests' own
    c.wait_for_workers(2, timeout=DIST_WAIT)
    yield c
    c.close()
    cluster.close()
