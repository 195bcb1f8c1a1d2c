"""What gets installed: every package folder listed, typed, and the ``distsim`` command found.

pyproject.toml names each installed package of ``distsim_gpu`` by hand (the repository's
top-level folders become its subpackages through ``package-dir``), so a new folder with an
``__init__.py`` that is not listed would work from the checkout and be missing from a wheel.
``distsim_gpu`` itself is a namespace package (there is no folder for it), so each of its
six packages carries its own ``py.typed`` (PEP 561: namespace packages are marked below the
namespace); their subpackages are covered by their parent's marker.
"""

from __future__ import annotations

import importlib
import importlib.metadata
from pathlib import Path

import pytest

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10: the same parser, before the standard library had it
    tomllib = pytest.importorskip("tomli")

REPO_ROOT = Path(__file__).resolve().parents[1]
ROOT_PACKAGE = "distsim_gpu"
TOP_PACKAGES = ("simcore", "measured", "topology", "collectives", "workloads", "scenarios")
PYPROJECT = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text(encoding="utf-8"))
SETUPTOOLS = PYPROJECT["tool"]["setuptools"]


def _folder(package: str) -> Path:
    """Where setuptools looks for ``package``: the longest ``package-dir`` entry above it."""
    mapping: dict[str, str] = SETUPTOOLS["package-dir"]
    parts = package.split(".")
    for end in range(len(parts), 0, -1):
        prefix = ".".join(parts[:end])
        if prefix in mapping:
            return REPO_ROOT / mapping[prefix] / Path(*parts[end:])
    raise AssertionError(f"{package}: no package-dir entry maps it to a folder")


def _package_folders() -> dict[str, Path]:
    """``distsim_gpu.<dotted folder>`` -> folder, for every folder with an ``__init__.py``."""
    found = {}
    for top in TOP_PACKAGES:
        for init in sorted((REPO_ROOT / top).rglob("__init__.py")):
            folder = init.parent
            found[".".join((ROOT_PACKAGE, *folder.relative_to(REPO_ROOT).parts))] = folder
    return found


def test_every_package_folder_is_listed_and_every_listed_package_is_a_folder():
    folders = _package_folders()
    listed = set(SETUPTOOLS["packages"])
    missing = sorted(set(folders) - listed)
    assert not missing, ("folders with an __init__.py that pyproject.toml's "
                         f"[tool.setuptools] packages does not list: {missing}")
    for package in sorted(listed):
        assert (_folder(package) / "__init__.py").is_file(), (
            f"{package} is listed but {_folder(package)} has no __init__.py")
        assert _folder(package) == folders[package], package


def test_the_six_packages_are_mapped_to_their_folders():
    mapping = SETUPTOOLS["package-dir"]
    assert mapping == {f"{ROOT_PACKAGE}.{top}": top for top in TOP_PACKAGES}


@pytest.mark.parametrize("top", TOP_PACKAGES)
def test_each_package_is_marked_typed_and_the_marker_ships(top):
    assert (REPO_ROOT / top / "py.typed").is_file(), f"{top}/py.typed is missing"
    assert "py.typed" in SETUPTOOLS["package-data"]["*"]


def test_every_listed_package_imports():
    for package in SETUPTOOLS["packages"]:
        module = importlib.import_module(package)
        assert Path(module.__file__).resolve() == (_folder(package) / "__init__.py").resolve()


def test_the_console_script_points_at_an_importable_main(capsys):
    target = PYPROJECT["project"]["scripts"]["distsim"]
    module_name, _, attribute = target.partition(":")
    main = getattr(importlib.import_module(module_name), attribute)
    try:
        status = main(["--help"])
    except SystemExit as done:  # argparse's --help exits
        status = done.code
    assert status in (0, None)
    assert "usage: distsim" in capsys.readouterr().out


def test_the_installed_command_is_the_one_pyproject_names():
    name = PYPROJECT["project"]["name"]
    try:
        installed = importlib.metadata.distribution(name)
    except importlib.metadata.PackageNotFoundError:
        pytest.skip(f"{name} is not installed (pip install -e .)")
    (script,) = [e for e in installed.entry_points
                 if e.group == "console_scripts" and e.name == "distsim"]
    assert script.value == PYPROJECT["project"]["scripts"]["distsim"], (
        "the installed entry point is stale: pip install -e . again")
