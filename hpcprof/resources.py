"""Where the shipped templates and site configs are: installed as the packages
`hpcprof._templates` / `hpcprof._site_configs`, or the top-level folders of a source checkout."""

from __future__ import annotations

from importlib import resources
from pathlib import Path

CHECKOUT = Path(__file__).resolve().parents[1]


def shipped_dir(package: str, checkout_folder: str) -> Path:
    """The installed data package's folder, else the checkout's folder."""
    try:
        return Path(str(resources.files(package)))
    except ModuleNotFoundError:
        return CHECKOUT / checkout_folder


def template_dir() -> Path:
    return shipped_dir("hpcprof._templates", "templates")


def site_config_dir() -> Path:
    return shipped_dir("hpcprof._site_configs", "site_configs")
