"""Compile the hot loops written for Cython's pure Python mode (``make`` runs this).

    .venv/bin/python -m deploy.speedups [--force]

Each source below runs as plain Python as it is; compiled, it becomes the
extension module named beside it, built in place (``broker/store/*.so``) from
a copy of the source with its SHA-256 appended as ``SOURCE_SHA``. The code that
uses a compiled module checks that value against the source and falls back to
its own Python when they differ (a stale build) or when there is no build.

Nothing is compiled where Cython or a C compiler is missing: the broker then
runs its plain Python loops, and this says so and exits 0. A build is skipped
when the module in place was built from the same source.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import sysconfig
import tempfile
from pathlib import Path

import click

from protocol.speedups import NO_SPEEDUPS_ENV, compiled, source_sha

ROOT = Path(__file__).resolve().parent.parent

# (source, compiled module, the function its user takes): built in the source's package
KERNELS = (("broker/store/index_kernel.py", "broker.store._index_kernel_c", "put_hashes"),
           ("broker/store/batch_records_kernel.py", "broker.store._batch_records_kernel_c",
            "encode_batch"),
           ("broker/store/scan_kernel.py", "broker.store._scan_kernel_c", "scan_records"),
           ("protocol/batch_kernel.py", "protocol._batch_kernel_c", "decode_batch"),
           ("protocol/records_kernel.py", "protocol._records_kernel_c", "decode_records"))


def built_path(module: str, root: Path = ROOT) -> Path:
    """Where the compiled ``module`` lives (this interpreter's suffix)."""
    suffix = sysconfig.get_config_var("EXT_SUFFIX") or ".so"
    *package, name = module.split(".")
    return root.joinpath(*package, name + suffix)


def built_sha(module: str, root: Path = ROOT) -> str | None:
    """The SOURCE_SHA of the compiled ``module`` in place, or None (none, or
    one that does not load)."""
    path = built_path(module, root)
    if not path.exists():
        return None
    spec = importlib.util.spec_from_file_location(module, path)
    if spec is None or spec.loader is None:
        return None
    try:
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
    except Exception:  # a broken or foreign build: built again
        return None
    sha = getattr(mod, "SOURCE_SHA", None)
    return sha if isinstance(sha, str) else None


def build(source: Path, module: str, root: Path = ROOT) -> Path:
    """Compile ``source`` into ``module`` in place; returns the file. Raises
    what Cython or the compiler raise."""
    from Cython.Build import cythonize
    from setuptools import Distribution, Extension

    name = module.rsplit(".", 1)[1]
    with tempfile.TemporaryDirectory(prefix="speedups-") as tmp:
        work = Path(tmp)
        copy = work / f"{name}.py"
        copy.write_text(source.read_text()
                        + f'\n\nSOURCE_SHA = "{source_sha(source)}"\n')
        ext = Extension(module, [str(copy)], extra_compile_args=["-O2"])
        modules = cythonize([ext], build_dir=str(work / "c"), language_level=3, quiet=True,
                            compiler_directives={"embedsignature": False})
        dist = Distribution({"name": "speedups", "ext_modules": modules})
        cmd = dist.get_command_obj("build_ext")
        cmd.build_lib = str(work / "lib")  # type: ignore[attr-defined]
        cmd.build_temp = str(work / "tmp")  # type: ignore[attr-defined]
        cmd.ensure_finalized()
        cmd.run()
        built = Path(cmd.get_ext_fullpath(module))
        target = built_path(module, root)
        part = target.with_name(target.name + ".part")
        shutil.copyfile(built, part)
        part.replace(target)  # a loader never sees half a file
    return target


def in_use(root: Path = ROOT) -> dict[str, bool]:
    """Whether each kernel's compiled module is what runs (built, current, not
    turned off), by module name: what a process started now would take."""
    return {module: compiled(module, root / rel, name) is not None
            for rel, module, name in KERNELS}


def in_use_text(state: dict[str, bool] | None) -> str:
    """``in_use`` in a few words: "2 of 2", or which are not and why."""
    if not state:
        return "n/a"
    on = sum(state.values())
    text = f"{on} of {len(state)}"
    if on < len(state):
        off = [m for m, used in state.items() if not used]
        why = (f"{NO_SPEEDUPS_ENV} set" if os.environ.get(NO_SPEEDUPS_ENV)
               else "not built or stale: " + ", ".join(off))
        text += f" ({why})"
    return text


def missing_tools() -> str | None:
    """Why nothing can be compiled here, or None."""
    if importlib.util.find_spec("Cython") is None:
        return "Cython is not installed"
    compiler = sysconfig.get_config_var("CC") or "cc"
    if shutil.which(compiler.split()[0]) is None:
        return f"no C compiler ({compiler.split()[0]})"
    return None


@click.command()
@click.option("--force", is_flag=True, help="Build even when the module in place is current.")
def main(force: bool) -> None:
    """Compile the Cython pure-mode kernels in place where possible."""
    why = missing_tools()
    if why is not None:
        click.echo(f"speedups: not compiled ({why}); the plain Python loops run")
        return
    for rel, module, _ in KERNELS:
        source = ROOT / rel
        if not force and built_sha(module) == source_sha(source):
            continue
        try:
            path = build(source, module)
        except Exception as exc:  # the broker runs without it: say so, do not fail make
            click.echo(f"speedups: {module} not compiled ({type(exc).__name__}: {exc}); "
                       "the plain Python loop runs", err=True)
            continue
        click.echo(f"speedups: compiled {module} ({path.relative_to(ROOT)})")


if __name__ == "__main__":
    main()
