"""Packaging: the consumer folders install into tau_env's namespace, in wheels and editable installs,
and ``import tau_env`` imports none of them.
"""

from __future__ import annotations

import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
#: Folders at the repository root that install as tau_env.<name>.
MAPPED = {
    "synthesis": "tau_env.synthesis",
    "reference_trainers": "tau_env.reference_trainers",
    "adapters": "tau_env.adapters",
}


def _packages_on_disk() -> set[str]:
    found = {".".join(p.parent.relative_to(ROOT).parts) for p in (ROOT / "tau_env").rglob("__init__.py")}
    for folder, name in MAPPED.items():
        base = ROOT / folder
        found |= {".".join((name, *p.parent.relative_to(base).parts)) for p in base.rglob("__init__.py")}
    return found


def test_the_package_list_names_every_package_folder():
    listed = set(PYPROJECT["tool"]["setuptools"]["packages"])
    assert listed == _packages_on_disk()


def test_each_present_consumer_folder_is_mapped_into_tau_envs_namespace():
    mapping = PYPROJECT["tool"]["setuptools"]["package-dir"]
    for folder, name in MAPPED.items():
        if (ROOT / folder / "__init__.py").exists():
            assert mapping[name] == folder
    assert not any(key in ("synthesis", "adapters", "reference_trainers") for key in mapping)


def test_import_tau_env_imports_no_consumer_package():
    prefixes = ("tau_env.synthesis", "tau_env.adapters", "tau_env.reference_trainers", "sqlite_utils")
    code = f"import sys, tau_env; print(sorted(m for m in sys.modules if m.startswith({prefixes!r})))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_the_installed_synthesis_package_is_the_repository_folder():
    import tau_env.synthesis

    assert Path(tau_env.synthesis.__file__).resolve().parent == ROOT / "synthesis"


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", str(ROOT), "--no-deps", "--no-build-isolation", "-q", "-w", str(out)],
        check=True,
        capture_output=True,
    )
    return next(out.glob("tau_env-*.whl"))


def test_the_wheel_ships_the_consumers_under_tau_env_and_no_top_level_name_but_tau_env(wheel, tmp_path):
    names = zipfile.ZipFile(wheel).namelist()
    top = {n.split("/")[0] for n in names if not n.split("/")[0].endswith(".dist-info")}
    assert top == {"tau_env"}
    for folder, name in MAPPED.items():
        shipped = ("*.py", "data/*.json", "configs/*.yaml", "launch/*.sh", "*.sh")
        for source in [
            p for pattern in shipped for p in (ROOT / folder).glob(pattern if "/" in pattern else f"**/{pattern}")
        ]:
            assert "/".join((*name.split("."), *source.relative_to(ROOT / folder).parts)) in names
    zipfile.ZipFile(wheel).extractall(tmp_path)
    code = "import tau_env.synthesis.records as r, tau_env; print(r.__file__)"
    done = subprocess.run(
        [sys.executable, "-I", "-c", f"import sys; sys.path.insert(0, {str(tmp_path)!r}); {code}"],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().startswith(str(tmp_path))
