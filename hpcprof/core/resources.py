"""Where the shipped templates and site configs are: installed as the packages
`hpcprof._templates` / `hpcprof._site_configs`, or the top-level folders of a source checkout."""

from __future__ import annotations

import importlib.util
from pathlib import Path

CHECKOUT = Path(__file__).resolve().parents[2]


def shipped_dir(package: str, checkout_folder: str) -> Path:
    """The installed data package's folder, else the checkout's folder (found without importing
    importlib.resources, which costs the commands that list or render a few ms)."""
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        return CHECKOUT / checkout_folder
    return Path(next(iter(spec.submodule_search_locations)))


def template_dir() -> Path:
    return shipped_dir("hpcprof._templates", "templates")


def site_config_dir() -> Path:
    return shipped_dir("hpcprof._site_configs", "site_configs")
