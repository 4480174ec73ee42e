"""``client``'s names are imported on first use (PEP 562)."""

from __future__ import annotations

import subprocess
import sys

import pytest

import client


def test_every_exported_name_resolves_to_its_module() -> None:
    assert sorted(client.__all__) == sorted(client._EXPORTS)
    for name in client.__all__:
        value = getattr(client, name)
        assert value.__module__ == client._EXPORTS[name] or name in {
            "Message", "MessageExt", "MessageQueue"}
        assert name in dir(client)
    from client import Producer, PullConsumer
    from client.producer import Producer as P
    from client.pull_consumer import PullConsumer as C
    assert (Producer, PullConsumer) == (P, C)


def test_an_unknown_name_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="no attribute 'Nope'"):
        client.Nope  # noqa: B018
    with pytest.raises(ImportError):
        exec("from client import Nope", {})


def imported_after(statement: str) -> set[str]:
    code = f"import sys; {statement}; print(' '.join(sorted(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, timeout=60).stdout
    return set(out.split())


def test_importing_the_package_or_the_spark_source_leaves_trio_out() -> None:
    assert "trio" not in imported_after("import client")
    # Spark's create and plan processes import the source before any pull
    after = imported_after("import client.spark.source")
    assert "trio" not in after and "client.producer" not in after
    assert "trio" in imported_after("from client import Producer")
