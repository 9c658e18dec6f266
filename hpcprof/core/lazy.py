"""Imports on first use: a module on first attribute access, for the heavy libraries only some paths
use; an object a "module:attribute" target names."""

from __future__ import annotations

import importlib

TYPE_CHECKING = False          # typing's constant without importing typing
if TYPE_CHECKING:
    from typing import Any


class LazyModule:
    """A module imported on first attribute access (SQLAlchemy: only the reports that build
    SQL with it pay for its import; the six summary reports use SQL text)."""

    def __init__(self, name: str) -> None:
        self._name = name

    def __getattr__(self, attr: str) -> Any:
        return getattr(importlib.import_module(self._name), attr)


def load_target(target: str) -> Any:
    """The object a "module:attribute" target names, its module imported now (the tables of
    hpcprof name their parts so, to import them only when used)."""
    module, _, attribute = target.partition(":")
    return getattr(importlib.import_module(module), attribute)
