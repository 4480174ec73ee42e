"""The layout of the project's packages, read from their sources (nothing is imported).

``python -m tests.layout`` prints every import cycle between modules (strongly connected
components of more than one module), what each top-level package imports of the others, and
the I/O found in the sans-IO part of protocol/ (everything but protocol/trio/).
tests/test_layout.py holds the layout to its rules with the same readings.

An edge ``a -> b`` is an ``import b`` / ``from b import x`` anywhere in ``a`` (at the top or in
a function: a deferred import still ties the two modules together), resolved to the module
file it names (``from pkg import mod`` is an edge to ``pkg.mod`` when that file exists, else to
``pkg``). Imports under ``if TYPE_CHECKING:`` are left out: they never run. Modules a package's
``__init__`` loads by name at run time (``importlib.import_module``) are not seen.
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# the project's packages, in the order their layers build on each other
PACKAGES = ("protocol", "acl", "broker", "controller", "namesrv", "client", "dashboard", "bench", "deploy",
            "tests")


@dataclass(frozen=True, slots=True)
class Import:
    """One import statement's target, as a module of ours."""

    target: str
    line: int
    deferred: bool  # inside a function


def module_name(path: Path, root: Path = ROOT) -> str:
    """``broker/acl/__init__.py`` -> ``broker.acl``, ``broker/store/commit_log.py`` ->
    ``broker.store.commit_log``."""
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def package_modules(root: Path = ROOT,
                    packages: Iterable[str] = PACKAGES) -> dict[str, Path]:
    """Every module of ``packages`` under ``root``: name -> file."""
    found: dict[str, Path] = {}
    for pkg in packages:
        base = root / pkg
        if not (base / "__init__.py").exists():
            continue
        for path in sorted(base.rglob("*.py")):
            found[module_name(path, root)] = path
    return found


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _walk(node: ast.AST, deferred: bool = False) -> Iterator[tuple[ast.AST, bool]]:
    """Every node below ``node`` with whether it sits in a function, leaving out the
    bodies of ``if TYPE_CHECKING:`` (their ``else:`` runs)."""
    for child in ast.iter_child_nodes(node):
        if isinstance(child, ast.If) and _is_type_checking(child.test):
            for stmt in child.orelse:
                yield stmt, deferred
                yield from _walk(stmt, deferred)
            continue
        inner = deferred or isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda)
        yield child, inner
        yield from _walk(child, inner)


def _resolve(name: str, modules: Mapping[str, Path]) -> str | None:
    """The longest prefix of the dotted ``name`` that is one of ``modules``."""
    parts = name.split(".")
    while parts:
        candidate = ".".join(parts)
        if candidate in modules:
            return candidate
        parts.pop()
    return None


def _absolute(module: str, node: ast.ImportFrom, is_package: bool) -> str:
    if not node.level:
        return node.module or ""
    base = module.split(".")
    if not is_package:
        base.pop()
    if node.level > 1:
        base = base[: len(base) - (node.level - 1)]
    return ".".join([*base, *([node.module] if node.module else [])])


def imports_of(module: str, source: str, modules: Mapping[str, Path],
               is_package: bool = False) -> list[Import]:
    """The imports of our modules that ``module`` (with this ``source``) makes."""
    found: list[Import] = []
    for node, deferred in _walk(ast.parse(source)):
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = _absolute(module, node, is_package)
            # "from pkg import mod" names the submodule when there is one
            targets = [f"{base}.{alias.name}" for alias in node.names] or [base]
        for name in targets:
            target = _resolve(name, modules)
            if target is not None and target != module:
                found.append(Import(target, node.lineno, deferred))  # type: ignore[attr-defined]
    return found


def import_graph(root: Path = ROOT,
                 packages: Iterable[str] = PACKAGES) -> dict[str, dict[str, Import]]:
    """module -> {imported module: its first import}, for every module of ``packages``."""
    modules = package_modules(root, packages)
    graph: dict[str, dict[str, Import]] = {}
    for name, path in modules.items():
        edges: dict[str, Import] = {}
        for imp in imports_of(name, path.read_text(), modules, path.name == "__init__.py"):
            edges.setdefault(imp.target, imp)
        graph[name] = edges
    return graph


def cycles(graph: Mapping[str, Iterable[str]]) -> list[list[str]]:
    """The strongly connected components of more than one node (Tarjan's algorithm, without
    recursion), each sorted, sorted by their first node."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    found: list[list[str]] = []
    counter = 0
    for start in sorted(graph):
        if start in index:
            continue
        work: list[tuple[str, Iterator[str]]] = []
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        work.append((start, iter(sorted(graph.get(start, ())))))
        while work:
            node, children = work[-1]
            for child in children:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                    break
                if child in on_stack:
                    low[node] = min(low[node], index[child])
            else:
                work.pop()
                if work:
                    parent = work[-1][0]
                    low[parent] = min(low[parent], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        found.append(sorted(component))
    return sorted(found)


def top_level(module: str) -> str:
    return module.split(".", 1)[0]


def package_edges(graph: Mapping[str, Mapping[str, Import]]) -> dict[str, set[str]]:
    """Top-level package -> the other top-level packages it imports."""
    edges: dict[str, set[str]] = {}
    for module, targets in graph.items():
        own = top_level(module)
        edges.setdefault(own, set()).update(
            top_level(t) for t in targets if top_level(t) != own)
    return edges


def imports_between(graph: Mapping[str, Mapping[str, Import]], importer: str,
                    imported: str) -> list[str]:
    """``module:line -> target`` for every import of a module under the dotted prefix
    ``imported`` made by a module under ``importer``."""

    def under(name: str, prefix: str) -> bool:
        return name == prefix or name.startswith(prefix + ".")

    return sorted(f"{module}:{imp.line} -> {target}"
                  for module, targets in graph.items() if under(module, importer)
                  for target, imp in targets.items() if under(target, imported))


# ---- I/O in source ------------------------------------------------------------------------

# modules whose import means I/O, threads or an event loop: a sans-IO module imports none
IO_MODULES = frozenset({
    "trio", "anyio", "asyncio", "ssl", "selectors", "select", "subprocess", "ctypes",
    "threading", "multiprocessing", "concurrent", "shutil", "tempfile", "fcntl", "termios",
    "signal", "http", "urllib.request", "logging.handlers", "hypercorn", "protocol.trio",
})
# os functions that touch files, descriptors or processes (os.environ, os.getpid,
# os.path's string functions are not I/O)
OS_IO = frozenset({
    "open", "read", "write", "pread", "pwrite", "readv", "writev", "close", "fsync",
    "fdatasync", "ftruncate", "truncate", "posix_fallocate", "sendfile", "pipe", "dup", "dup2",
    "eventfd", "eventfd_read", "eventfd_write", "makedirs", "mkdir", "remove", "unlink",
    "rmdir", "removedirs", "rename", "renames", "replace", "link", "symlink", "listdir",
    "scandir", "walk", "stat", "lstat", "fstat", "chmod", "chown", "utime", "system",
    "popen", "fork", "kill", "killpg", "waitpid", "sync",
})
# os.path functions that ask the file system
OS_PATH_IO = frozenset({"exists", "isfile", "isdir", "islink", "getsize", "getmtime",
                        "realpath", "samefile"})
# socket's functions that only convert addresses; the rest opens sockets or resolves names
SOCKET_PURE = frozenset({"inet_aton", "inet_ntoa", "inet_pton", "inet_ntop", "htons",
                         "ntohs", "htonl", "ntohl", "AF_INET", "AF_INET6"})
# pathlib.Path methods that read or change the file system
PATH_IO = frozenset({"read_text", "read_bytes", "write_text", "write_bytes", "open",
                     "mkdir", "touch", "unlink", "rmdir", "iterdir", "glob", "rglob",
                     "exists", "is_file", "is_dir", "stat", "rename", "replace", "resolve",
                     "symlink_to", "chmod"})


@dataclass(frozen=True, slots=True)
class IOUse:
    """One import or call in a module that does I/O."""

    module: str
    line: int
    what: str

    def __str__(self) -> str:
        return f"{self.module}:{self.line} {self.what}"


def _dotted(node: ast.expr) -> str | None:
    """``a.b.c`` for a chain of names and attributes, else None."""
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
        return ".".join(reversed(parts))
    return None


def _is_path(node: ast.expr, path_names: set[str]) -> bool:
    """A ``Path(...)`` expression, or a name bound to one / annotated as one."""
    if isinstance(node, ast.Call):
        return _dotted(node.func) in ("Path", "pathlib.Path")
    return isinstance(node, ast.Name) and node.id in path_names


def io_uses(module: str, source: str) -> list[IOUse]:
    """The I/O ``source`` (the module ``module``) does, as far as reading it tells:
    imports of IO_MODULES, ``open()``, os's and os.path's file-system functions, socket's
    functions beyond address conversions, ``mmap.mmap()``, and pathlib.Path's file-system
    methods on a ``Path(...)`` or on a name annotated or bound as a Path. Imports under
    ``if TYPE_CHECKING:`` are left out. What a function called from here does is not seen."""
    tree = ast.parse(source)
    found: list[IOUse] = []
    path_names: set[str] = set()
    for node in ast.walk(tree):  # names that hold a Path: annotated as one, or assigned one
        if isinstance(node, ast.arg) and node.annotation is not None:
            if "Path" in ast.unparse(node.annotation):
                path_names.add(node.arg)
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            if "Path" in ast.unparse(node.annotation):
                path_names.add(node.target.id)
        elif isinstance(node, ast.Assign) and _is_path(node.value, set()):
            path_names.update(t.id for t in node.targets if isinstance(t, ast.Name))

    def io_module(name: str) -> bool:
        return any(name == m or name.startswith(m + ".") for m in IO_MODULES)

    for node, _deferred in _walk(tree):
        if isinstance(node, ast.Import):
            found += [IOUse(module, node.lineno, f"import {a.name}")
                      for a in node.names if io_module(a.name)]
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            names = [node.module, *(f"{node.module}.{a.name}" for a in node.names)]
            if any(io_module(n) for n in names):
                found.append(IOUse(module, node.lineno, f"from {node.module} import "
                                   + ", ".join(a.name for a in node.names)))
        elif isinstance(node, ast.Call):
            name = _dotted(node.func)
            func = node.func
            if name == "open":
                found.append(IOUse(module, node.lineno, "open()"))
            elif name is not None and name.startswith("os.path."):
                if name.removeprefix("os.path.") in OS_PATH_IO:
                    found.append(IOUse(module, node.lineno, f"{name}()"))
            elif name is not None and name.startswith("os."):
                if name.removeprefix("os.") in OS_IO:
                    found.append(IOUse(module, node.lineno, f"{name}()"))
            elif name is not None and name.startswith("socket."):
                if name.removeprefix("socket.") not in SOCKET_PURE:
                    found.append(IOUse(module, node.lineno, f"{name}()"))
            elif name == "mmap.mmap":
                found.append(IOUse(module, node.lineno, "mmap.mmap()"))
            elif (isinstance(func, ast.Attribute) and func.attr in PATH_IO
                  and _is_path(func.value, path_names)):
                found.append(IOUse(module, node.lineno, f"Path.{func.attr}()"))
    return sorted(found, key=lambda u: u.line)


def sans_io_modules(root: Path = ROOT) -> dict[str, Path]:
    """protocol/'s modules but protocol/trio/'s: the part that must do no I/O."""
    return {name: path for name, path in package_modules(root, ("protocol",)).items()
            if name != "protocol.trio" and not name.startswith("protocol.trio.")}


def sans_io_uses(root: Path = ROOT) -> list[IOUse]:
    """The I/O found in protocol/ outside protocol/trio/."""
    return [use for name, path in sans_io_modules(root).items()
            for use in io_uses(name, path.read_text())]


def report(graph: Mapping[str, Mapping[str, Import]]) -> str:
    lines: list[str] = []
    found = cycles(graph)
    lines.append(f"{len(graph)} modules, {sum(map(len, graph.values()))} imports between them, "
                 f"{len(found)} import cycle(s)")
    for n, component in enumerate(found, 1):
        members = set(component)
        lines.append(f"cycle {n}: {len(component)} modules")
        for module in component:
            for target, imp in sorted(graph[module].items()):
                if target in members:
                    how = " (in a function)" if imp.deferred else ""
                    lines.append(f"    {module}:{imp.line} -> {target}{how}")
    lines.append("packages import:")
    for pkg, targets in sorted(package_edges(graph).items()):
        lines.append(f"    {pkg} -> {', '.join(sorted(targets)) or '-'}")
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    root = Path(argv[0]).resolve() if argv else ROOT
    print(report(import_graph(root)))
    uses = sans_io_uses(root)
    print(f"I/O in protocol/ outside protocol/trio/: {len(uses)}")
    for use in uses:
        print(f"    {use}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
