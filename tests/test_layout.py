"""The layout holds (tests/layout.py reads it from the sources): no new import cycle, each
top-level package imports only the layers below it (the SDK no tool, the name server no
broker code), protocol/ does no I/O outside protocol/trio/, broker/store/ runs no trio. Then
the readings themselves, on small made-up sources, so that a check that can no longer fail
is seen."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.layout import (
    PACKAGES,
    Import,
    cycles,
    import_graph,
    imports_of,
    io_uses,
    package_edges,
    package_modules,
    sans_io_uses,
)

# the cycles the tree had when this test came; fixing one means taking it off this list,
# a new one fails
KNOWN_CYCLES = [
    # mqadmin's command modules take admin_cli's group and helpers; admin_cli imports them
    # at its end so that their commands are registered (at the top, not in a function)
    ["client.admin_cli", "client.admin_groups", "client.admin_topics"],
    ["client.producer", "client.trace"],  # the trace dispatcher makes its own producer
    ["client.spark", "client.spark.cds"],
    ["protocol.codecs.msgpack_codec", "protocol.command"],
]

# what each top-level package may import of the others (itself always)
ALLOWED = {
    "protocol": set(),
    "acl": {"protocol"},
    "broker": {"acl", "protocol"},
    # the controller runs alone (mqcontroller: the shared ACL on its port) or inside
    # the name server
    "controller": {"acl", "protocol"},
    "namesrv": {"acl", "controller", "protocol"},
    "client": {"protocol"},
    "dashboard": {"client", "protocol"},
    "deploy": {"broker", "client", "controller", "namesrv", "protocol"},
    # the tools drive everything; some measure with the integration tests' daemons
    "bench": {"acl", "broker", "client", "controller", "dashboard", "deploy", "namesrv",
              "protocol", "tests"},
    "tests": set(PACKAGES),
}

# I/O protocol/ may do outside protocol/trio/, each with why: (module, what)
SANS_IO_EXCEPTIONS = {
    # at import, like the import system itself: a compiled loop is taken only when the
    # SHA-256 of the source on disk matches the one it was built from
    ("protocol.speedups", "Path.read_bytes()"),
}


@pytest.fixture(scope="module")
def graph() -> dict[str, dict[str, Import]]:
    return import_graph()


def test_no_new_import_cycle(graph: dict[str, dict[str, Import]]) -> None:
    found = cycles(graph)
    new = [c for c in found if c not in KNOWN_CYCLES]
    gone = [c for c in KNOWN_CYCLES if c not in found]
    assert not new, f"new import cycles (python -m tests.layout shows the imports): {new}"
    assert not gone, f"cycles gone: take them off KNOWN_CYCLES: {gone}"


def test_packages_import_only_the_layers_below(graph: dict[str, dict[str, Import]]) -> None:
    assert set(package_edges(graph)) <= set(ALLOWED)
    wrong = {pkg: sorted(targets - ALLOWED[pkg])
             for pkg, targets in package_edges(graph).items() if targets - ALLOWED[pkg]}
    assert not wrong, f"imports across the layout: {wrong} (python -m tests.layout)"


def test_the_sdk_imports_no_tool_and_the_name_server_no_broker() -> None:
    # the rules ALLOWED spells out, said plainly (a change to ALLOWED must face these)
    assert not ALLOWED["client"] & {"bench", "deploy", "tests", "broker", "namesrv"}
    assert "broker" not in ALLOWED["namesrv"] and not ALLOWED["protocol"]


def test_protocol_does_no_io_outside_protocol_trio() -> None:
    found = {(u.module, u.what): str(u) for u in sans_io_uses()}
    unexpected = sorted(text for key, text in found.items() if key not in SANS_IO_EXCEPTIONS)
    assert not unexpected, ("I/O in sans-IO protocol/ (move it to protocol/trio/ or to its "
                            f"user): {unexpected}")
    stale = SANS_IO_EXCEPTIONS - set(found)
    assert not stale, f"no longer found: take them off SANS_IO_EXCEPTIONS: {sorted(stale)}"


def test_the_store_runs_no_trio() -> None:
    uses = [u for name, path in package_modules(packages=("broker",)).items()
            if name.startswith("broker.store.")
            for u in io_uses(name, path.read_text())
            if u.what.startswith(("import trio", "from trio", "import anyio", "from anyio",
                                  "import asyncio", "from asyncio"))]
    assert not uses, f"broker/store/ is synchronous: {[str(u) for u in uses]}"


# ---- the readings ---------------------------------------------------------------------------


def write(root: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return root


def test_graph_resolves_submodules_deferred_and_type_checking_imports(tmp_path: Path) -> None:
    root = write(tmp_path, {
        "protocol/__init__.py": "",
        "protocol/a.py": "from protocol import b\nimport protocol.c.d as d\n",
        "protocol/b.py": ("from typing import TYPE_CHECKING\n"
                          "if TYPE_CHECKING:\n    from protocol import a\n"
                          "def f():\n    from protocol.a import x\n"),
        "protocol/c/__init__.py": "from .d import y\n",
        "protocol/c/d.py": "import json\nfrom protocol import nothing_here\n",
    })
    graph = import_graph(root, ("protocol",))
    assert set(graph["protocol.a"]) == {"protocol.b", "protocol.c.d"}
    assert set(graph["protocol.b"]) == {"protocol.a"}  # the TYPE_CHECKING one is left out
    assert graph["protocol.b"]["protocol.a"].deferred
    assert set(graph["protocol.c"]) == {"protocol.c.d"}  # relative, from a package
    assert set(graph["protocol.c.d"]) == {"protocol"}  # not a module: the package
    assert cycles(graph) == [["protocol.a", "protocol.b"]]


def test_cycles_finds_each_component_once() -> None:
    graph = {"a": ["b"], "b": ["c"], "c": ["a", "d"], "d": ["e"], "e": ["d"], "f": ["a"]}
    assert cycles(graph) == [["a", "b", "c"], ["d", "e"]]
    assert cycles({"a": ["b"], "b": []}) == []
    # deep chains do not recurse
    chain = {str(i): [str(i + 1)] for i in range(5000)}
    chain["5000"] = ["0"]
    assert len(cycles(chain)[0]) == 5001


def test_package_edges_and_imports_of() -> None:
    modules = {"bench": Path("x"), "bench.stats": Path("y"), "client": Path("z")}
    found = imports_of("client", "def f():\n    from bench.stats import p\n", modules)
    assert [(i.target, i.line, i.deferred) for i in found] == [("bench.stats", 2, True)]
    graph = {"client.a": {"bench.stats": found[0]}, "bench.stats": {}}
    assert package_edges(graph) == {"client": {"bench"}, "bench": set()}


IO_SOURCE = '''
import ctypes
import socket
from pathlib import Path
from typing import TYPE_CHECKING
if TYPE_CHECKING:
    import trio
import logging.handlers
from protocol.trio.client import RemotingClient

def f(path: Path, reader, name: str):
    a = socket.inet_aton("1.2.3.4")
    b = socket.gethostbyname(name)
    c = path.read_text()
    d = reader.read_bytes(1)
    e = Path(name).mkdir()
    with open(name) as g:
        pass
    h = os.environ.get("X"), os.getpid()
    i = os.fsync(3)
    j = name.replace("a", "b")
    k = os.path.join("a", "b"), os.path.exists(name)
'''


def test_io_uses_flags_io_and_leaves_pure_calls() -> None:
    found = [(u.line, u.what) for u in io_uses("m", IO_SOURCE)]
    assert found == [
        (2, "import ctypes"),
        (8, "import logging.handlers"),
        (9, "from protocol.trio.client import RemotingClient"),
        (13, "socket.gethostbyname()"),
        (14, "Path.read_text()"),
        (16, "Path.mkdir()"),
        (17, "open()"),
        (20, "os.fsync()"),
        (22, "os.path.exists()"),
    ]
