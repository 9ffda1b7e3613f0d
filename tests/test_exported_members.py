"""Each package's __init__ is its table of contents: a sorted __all__ of importable names."""

from __future__ import annotations

import importlib

import pytest


@pytest.mark.parametrize(
    "package",
    [
        "core",
        "core.model",
        "core.spaces",
        "channel_http",
        "channel_http.cli",
        "channel_http.protocols",
        "channel_http.routes",
        "channel_http.serving",
        "auth_providers",
        "bridges",
        "bridges.slack",
        "bridges.teams",
        "bridges.telegram",
        "dev_model",
    ],
)
def test_every_package_exports_a_sorted_all_of_real_names(package: str) -> None:
    module = importlib.import_module(package)
    exported = module.__all__
    # isort's order, as ruff's RUF022 keeps it: CONSTANTS, then Classes, then functions.
    assert exported == sorted(exported, key=lambda n: (not n.isupper(), not n[0].isupper(), n))
    assert len(set(exported)) == len(exported)
    for name in exported:
        assert getattr(module, name) is not None
