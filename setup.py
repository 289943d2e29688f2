"""The package list, found rather than written by hand.

One import package, `cowcheck`, whose folders stay at the top level of the
repository (the project card's layout): checker/ is the package itself, and
model/ and specs/ are mounted in it as cowcheck.model and cowcheck.specs.
Every folder with an __init__.py below those three is a subpackage; the
shipped scenarios and grids (no __init__.py) are not installed. Everything
else about the build is in pyproject.toml."""

from setuptools import find_packages, setup

MOUNTS = {"cowcheck": "checker", "cowcheck.model": "model", "cowcheck.specs": "specs"}

setup(
    package_dir=MOUNTS,
    packages=[f"{name}.{sub}" if sub else name for name, folder in MOUNTS.items() for sub in ("", *find_packages(folder))],
)
