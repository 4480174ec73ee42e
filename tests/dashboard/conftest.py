"""The integration tests' daemons (``Cluster``) and log checks, for the dashboard's tests."""

from tests.integration.conftest import (  # noqa: F401  (fixtures and hooks, re-exported)
    _module_cluster_tracebacks,
    cluster,
    module_cluster,
    module_log_watch,
    pytest_configure,
)
