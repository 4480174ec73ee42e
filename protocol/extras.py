"""Features whose dependencies are an optional extra of the distribution (pyproject.toml).

``web`` holds hypercorn, starlette and jinja2: the daemons' Prometheus endpoint
(``metricsPort``, protocol/trio/metrics_http.py) needs hypercorn, ``mqdashboard`` all
three. ``make run`` and ``make test`` install it; ``pip install trio-rocketmq`` alone does
not. A daemon started with such a feature on and the extra missing stops before it starts
anything, with ``MissingExtraError`` saying which modules are missing and what to install.

``controller`` holds h11: the controller's etcd backend (``controllerType=etcd``,
controller/etcd.py) speaks HTTP/1.1 to etcd's JSON gateway. A controller checks
``require_etcd()`` before it imports that module.
"""

from __future__ import annotations

import importlib
from collections.abc import Sequence

from protocol.config import ConfigError

DISTRIBUTION = "trio-rocketmq"
WEB = "web"
# what each feature of the web extra imports
METRICS_HTTP_MODULES = ("hypercorn.config", "hypercorn.trio")
DASHBOARD_MODULES = ("hypercorn.config", "hypercorn.trio", "starlette", "jinja2")
CONTROLLER = "controller"
GRPC = "grpc"
# the broker's gRPC endpoint (enableGrpc): protobuf and h2 (HTTP/2), both from grpc
GRPC_MODULES = ("google.protobuf", "h2.connection")
ETCD_MODULES = ("h11",)


class MissingExtraError(ConfigError):
    """A feature is asked for whose extra is not installed."""

    def __init__(self, feature: str, extra: str, missing: Sequence[str]) -> None:
        self.feature = feature
        self.extra = extra
        self.missing = tuple(missing)
        super().__init__(
            f"{feature} needs {', '.join(self.missing)}, from the {extra!r} extra, not "
            f"installed here: pip install '{DISTRIBUTION}[{extra}]' (make run and make test "
            f"install it)")


def missing_modules(modules: Sequence[str]) -> list[str]:
    """The top-level names of the ``modules`` that cannot be imported, in order, once each."""
    missing: list[str] = []
    for name in modules:
        top = name.split(".", 1)[0]
        if top in missing:
            continue
        try:
            importlib.import_module(name)
        except ImportError:
            missing.append(top)
    return missing


def require(feature: str, extra: str, modules: Sequence[str]) -> None:
    """Raise MissingExtraError when one of ``modules`` cannot be imported."""
    missing = missing_modules(modules)
    if missing:
        raise MissingExtraError(feature, extra, missing)


def require_metrics_http() -> None:
    """What a daemon with ``metricsPort`` set checks before it starts."""
    require("Prometheus metrics over HTTP (metricsPort)", WEB, METRICS_HTTP_MODULES)


def require_grpc() -> None:
    """What a broker with ``enableGrpc=true`` checks before it starts."""
    missing = missing_modules(GRPC_MODULES)
    if missing:  # google.protobuf: the protobuf distribution
        raise MissingExtraError("the broker's gRPC endpoint (enableGrpc)", GRPC,
                                ["protobuf" if name == "google" else name for name in missing])


def require_etcd() -> None:
    """What a controller with ``controllerType=etcd`` checks before it starts."""
    require("the controller's etcd state store (controllerType=etcd)", CONTROLLER, ETCD_MODULES)


__all__ = [
    "CONTROLLER", "DASHBOARD_MODULES", "ETCD_MODULES", "GRPC", "GRPC_MODULES",
    "METRICS_HTTP_MODULES", "WEB",
    "MissingExtraError", "missing_modules", "require", "require_etcd", "require_grpc",
    "require_metrics_http",
]
