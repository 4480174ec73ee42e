"""Loading the compiled forms of the hot loops written for Cython's pure Python mode.

``deploy/speedups.py`` compiles each such source (``broker/store/index_kernel.py``,
``protocol/batch_kernel.py``) into an extension module beside it, with the
source's SHA-256 in it as ``SOURCE_SHA``. ``compiled(module, source, name)``
gives the compiled function only when that matches the source on disk, so a
build left from another version never runs, and only while
``ROCKETMQ_NO_SPEEDUPS`` is unset; otherwise None, and the caller runs its own
Python loop.
"""

from __future__ import annotations

import hashlib
import importlib
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

# set (to anything) to run the plain Python loops even where they are compiled
NO_SPEEDUPS_ENV = "ROCKETMQ_NO_SPEEDUPS"


def source_sha(source: Path) -> str:
    """The SHA-256 a build of ``source`` carries as ``SOURCE_SHA``. Raises OSError."""
    return hashlib.sha256(source.read_bytes()).hexdigest()


def compiled(module: str, source: Path, name: str) -> Callable[..., Any] | None:
    """Function ``name`` of the compiled ``module`` built from ``source``, or None."""
    if os.environ.get(NO_SPEEDUPS_ENV):
        return None
    try:
        mod = importlib.import_module(module)
        sha = source_sha(source)
    except (ImportError, OSError):
        return None
    if getattr(mod, "SOURCE_SHA", None) != sha:
        return None  # built from another version of the source
    fn: Callable[..., Any] = getattr(mod, name)
    return fn


__all__ = ["NO_SPEEDUPS_ENV", "compiled", "source_sha"]
