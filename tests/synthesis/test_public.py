"""tau_env.synthesis's public names load lazily, and every module of the package imports cleanly."""

from __future__ import annotations

import importlib
import pkgutil
import subprocess
import sys

import pytest
import tau_env.synthesis

MODULES = sorted(m.name for m in pkgutil.walk_packages(tau_env.synthesis.__path__, "tau_env.synthesis."))


def test_importing_the_package_loads_no_part_of_it():
    code = "import sys, tau_env.synthesis; print([m for m in sys.modules if m.startswith('tau_env.synthesis.')])"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_every_public_name_resolves_and_star_import_gives_them():
    for name in tau_env.synthesis.__all__:
        assert getattr(tau_env.synthesis, name) is not None
    space: dict = {}
    exec("from tau_env.synthesis import *", space)
    assert set(tau_env.synthesis.__all__) <= set(space)
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        tau_env.synthesis.nope  # noqa: B018


def test_the_walk_finds_the_modules():
    assert {"tau_env.synthesis.pipeline", "tau_env.synthesis.templates.harbor_bank"} <= set(MODULES)


@pytest.mark.parametrize("name", MODULES)
def test_each_module_imports_and_its_all_names_what_exists(name):
    module = importlib.import_module(name)
    public = getattr(module, "__all__", None)
    if public is not None:
        missing = [n for n in public if not hasattr(module, n)]
        assert not missing, f"{name}.__all__ names {missing}"
