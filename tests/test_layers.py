"""The package's folders are its layers (docs/explanation/architecture.md):
the import-linter contract in pyproject.toml holds, no module imports one
that imports it back, every package folder is installed, and a module over
500 lines says why it is one idea.

The installed package maps three folders of the repository into one
(checker/ is cowcheck, model/ is cowcheck.model, specs/ is cowcheck.specs),
which an editable install resolves through an import hook that grimp cannot
walk; so the tests lay out the package as installed, as links in a
temporary folder, and analyse that."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
import tomllib
from pathlib import Path

import grimp
import networkx as nx
import pytest

ROOT = Path(__file__).resolve().parent.parent
FOLDERS = {"cowcheck": ROOT / "checker", "cowcheck.model": ROOT / "model", "cowcheck.specs": ROOT / "specs"}


@pytest.fixture(scope="module")
def farm(tmp_path_factory) -> Path:
    """The package laid out as installed, as links."""
    top = tmp_path_factory.mktemp("farm")
    package = top / "cowcheck"
    package.mkdir()
    for entry in (ROOT / "checker").iterdir():
        (package / entry.name).symlink_to(entry)
    (package / "model").symlink_to(ROOT / "model")
    (package / "specs").symlink_to(ROOT / "specs")
    return top


@pytest.fixture(scope="module")
def imports(farm) -> nx.DiGraph:
    """Module -> module it imports (TYPE_CHECKING imports included), from grimp
    in a child process that finds the laid-out package first."""
    script = ("import grimp, json, sys\n"
              "g = grimp.build_graph('cowcheck')\n"
              "json.dump({m: sorted(g.find_modules_directly_imported_by(m)) for m in g.modules}, sys.stdout)\n")
    out = subprocess.run([sys.executable, "-c", script], env={**os.environ, "PYTHONPATH": str(farm)},
                         capture_output=True, text=True, check=True, cwd=farm)
    graph = nx.DiGraph()
    for module, targets in __import__("json").loads(out.stdout).items():
        graph.add_node(module)
        graph.add_edges_from((module, t) for t in targets)
    return graph


def test_the_layers_contract_holds(farm):
    run = subprocess.run([str(Path(sys.executable).with_name("lint-imports"))],
                         env={**os.environ, "PYTHONPATH": str(farm)}, capture_output=True, text=True, cwd=ROOT)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-2000:]
    assert "broken" in run.stdout and " 0 broken" in run.stdout


def test_no_module_imports_one_that_imports_it_back(imports):
    assert imports.number_of_nodes() > 60, "grimp did not see the package"
    circles = [sorted(c) for c in nx.strongly_connected_components(imports) if len(c) > 1]
    assert not circles, f"import circles: {circles}"


def test_the_root_package_is_imported_by_nothing_inside_it(imports):
    """`cowcheck` re-exports the public API from every layer; a module that
    imported it would import every layer above its own."""
    assert sorted(imports.predecessors("cowcheck")) == []


def test_every_module_and_data_file_is_in_the_wheel(tmp_path):
    """setup.py finds the packages (three folders map into one package): a
    wheel built from the checkout holds every module of checker/, model/
    and specs/ (the shipped scenarios, engine scenarios and grids are not installed), the
    protocols, schemas and page assets, and the py.typed marker mypy reads."""
    import subprocess
    import sys
    import zipfile
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(tmp_path), str(ROOT)],
                   check=True, capture_output=True)
    (wheel,) = tmp_path.glob("cowcheck-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    expected = {"cowcheck/py.typed"}
    for name, folder in FOLDERS.items():
        prefix = name.replace(".", "/")
        for path in folder.rglob("*"):
            rel = path.relative_to(folder)
            if path.is_file() and "__pycache__" not in rel.parts and rel.parts[0] not in ("scenarios", "grids", "engine") \
                    and path.suffix in (".py", ".toml", ".json", ".js", ".css"):
                expected.add(f"{prefix}/{rel.as_posix()}")
    assert expected - names == set(), "missing from the wheel"
    assert not any(n.startswith(("cowcheck/specs/scenarios/", "cowcheck/specs/grids/", "cowcheck/specs/engine/")) for n in names)


def _modules():
    for folder in FOLDERS.values():
        yield from (p for p in folder.rglob("*.py") if "__pycache__" not in p.parts)


def test_a_long_module_says_why_it_is_one_idea():
    long = []
    for path in _modules():
        text = path.read_text()
        if text.count("\n") > 500:
            doc = ast.get_docstring(ast.parse(text)) or ""
            if "one idea" not in doc.lower():
                long.append(f"{path.relative_to(ROOT)} ({text.count(chr(10))} lines)")
    assert not long, f"over 500 lines without a docstring that says why it is one idea: {long}"
