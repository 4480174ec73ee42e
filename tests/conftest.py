"""Process-wide state every test gets back as it found it.

Commands run in-process (mqadmin through click's runner, bench mains, the
Spark source) call ``configure_logging``: it replaces the root logger's
handlers and structlog's configuration. Left in place, a later test's
``structlog.testing.capture_logs`` sees nothing below the level the command
set. Loggers are not cached during tests (``CACHE_LOGGERS``), so putting the
configuration back after each test is enough.
"""
from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest
import structlog

from protocol.trio import logs

logs.CACHE_LOGGERS = False


@pytest.fixture(autouse=True)
def logging_restored() -> Iterator[None]:
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    saved = (logging._srcfile, logging.logThreads,  # type: ignore[attr-defined]
             logging.logProcesses, logging.logMultiprocessing)
    config = structlog.get_config()
    try:
        yield
    finally:
        for h in list(root.handlers):
            if h not in handlers:
                root.removeHandler(h)
                h.close()
        for h in handlers:
            if h not in root.handlers:
                root.addHandler(h)
        root.setLevel(level)
        (logging._srcfile, logging.logThreads,  # type: ignore[attr-defined]
         logging.logProcesses, logging.logMultiprocessing) = saved
        if structlog.get_config() != config:
            structlog.configure(**config)
