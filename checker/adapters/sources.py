"""An engine's own Python sources, run unchanged without the engine's
dependencies (docs/how-to/vllm-sglang.md).

The block managers of vLLM V1 and SGLang are plain Python, but their
packages import torch, CUDA kernels and most of the serving stack on the
way in. `load` runs only the modules a check needs, straight from a folder
that holds the release's sources (an unpacked wheel or a source checkout,
perhaps with an engineer's change), and gives every module they import
that the check does not need a small, named stand-in. Anything else they
import raises an ImportError naming the module: when a new release starts
to import something new, the error is that one line, not a silent fake.

The package's own `__init__.py` files never run (vllm/__init__.py imports
torch): each parent package is created empty, with its `__path__` into the
folder. The real modules stay in `sys.modules` under their own names (so
their objects pickle by reference); a stand-in for a third-party package
(`torch`) is visible only while the modules load, so a real torch
elsewhere in the process is not shadowed.

`fetch` gets a release's sources with the ordinary package client, for the
tests and CI: the wheel, without dependencies, once, only its .py files,
into a git-ignored cache folder."""

from __future__ import annotations

import ast
import copyreg
import hashlib
import importlib.abc
import importlib.machinery
import importlib.util
import io
import os
import pickle
import re
import shutil
import subprocess
import sys
import tempfile
import traceback
import types
import weakref
import zipfile
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Mapping, Optional, Sequence

#: fills a fresh stand-in module (sets its attributes)
Fill = Callable[[types.ModuleType], None]

#: where `fetch` keeps unpacked releases: $COWCHECK_ENGINE_CACHE, else
#: build/engines under the folder cowcheck was started in (a checkout's
#: root, where build/ is git-ignored; never inside an installed package)
CACHE = Path(os.environ.get("COWCHECK_ENGINE_CACHE") or Path.cwd() / "build" / "engines").resolve()


class SourceError(ImportError):
    """A module the engine's sources import that is neither loaded from the
    folder nor given a stand-in (a new release's drift, usually)."""


class _Finder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Serves the `top` package from `root`: the `real` modules from their
    files, the stand-ins from their fill functions, and parents of either
    as empty packages; refuses every other module of `top`, and every
    module of a third-party package that has a stand-in."""

    def __init__(self, root: Path, top: str, real: Iterable[str], stand_ins: Mapping[str, Fill]):
        self.root, self.top = root, top
        #: the release's files whose code ran: each real module's, and each a stand-in extracted from
        self.read: set[Path] = set()
        self.real = set(real)
        self.stand_ins = dict(stand_ins)
        self.parents = {name.rsplit(".", i)[0] for name in self.real | set(self.stand_ins) for i in range(1, name.count(".") + 1)}
        self.foreign = {name.split(".")[0] for name in self.stand_ins} - {top}

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> Optional[importlib.machinery.ModuleSpec]:
        first = fullname.split(".")[0]
        if first != self.top and first not in self.foreign:
            return None
        where = self.root.joinpath(*fullname.split("."))
        if fullname in self.stand_ins or (fullname in self.parents and fullname not in self.real):
            spec = importlib.machinery.ModuleSpec(fullname, self, is_package=True)
            spec.submodule_search_locations = [str(where)] if first == self.top else []
            return spec
        if fullname in self.real:
            file = where.with_suffix(".py") if where.with_suffix(".py").is_file() else where / "__init__.py"
            if not file.is_file():
                raise SourceError(f"{fullname}: no {file.relative_to(self.root)} under {self.root}", name=fullname)
            self.read.add(file)
            return importlib.util.spec_from_file_location(fullname, file)
        raise SourceError(f"{fullname} is imported by the engine's sources but has no stand-in "
                          f"(a new release? add one to the adapter's table)", name=fullname)

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> None:
        return None

    def exec_module(self, module: types.ModuleType) -> None:
        fill = self.stand_ins.get(module.__name__)
        if fill is not None:
            _reading.append(self.read)
            try:
                fill(module)
            finally:
                _reading.pop()


#: the files `extract` reads go into the innermost set here (the finder's
#: whose stand-in is being filled)
_reading: list[set[Path]] = []


def _forget(prefixes: Iterable[str]) -> None:
    """Drop these packages and their modules from sys.modules."""
    tops = tuple(prefixes)
    for name in [n for n in sys.modules if n in tops or n.startswith(tuple(t + "." for t in tops))]:
        del sys.modules[name]


def unload(top: str) -> None:
    """Forget package `top` if `load` put it there (before importing the
    installed package of that name)."""
    for finder in [f for f in sys.meta_path if isinstance(f, _Finder) and f.top == top]:
        sys.meta_path.remove(finder)
        _forget([top])


def installed(top: str, wanted: Sequence[str]) -> tuple[dict[str, types.ModuleType], str]:
    """The `wanted` modules of the installed package `top` (any module
    `load` put under that name forgotten first) and the digest of their
    files; ImportError where the package or one of its imports is missing."""
    unload(top)
    mods = {name: importlib.import_module(name) for name in wanted}
    files = {Path(m.__file__) for m in mods.values() if m.__file__}
    return mods, digest(Path(sys.modules[top].__file__ or ".").parent.parent, files)


def load(root: Path, top: str, real: Sequence[str], stand_ins: Mapping[str, Fill],
         wanted: Sequence[str], read: Optional[set[Path]] = None) -> dict[str, types.ModuleType]:
    """Import the `wanted` modules of package `top` from `root`, running
    `real` modules unchanged and `stand_ins` in place of the others;
    return them by name, and add to `read` the files whose code ran. Any
    module of `top` loaded before (another release) is forgotten first, so
    one release owns the names at a time. A module the sources import that
    is not installed (a dependency the adapter gives no stand-in) is a
    SourceError naming it and the file that imports it."""
    unload(top)
    _forget([top])
    finder = _Finder(Path(root), top, real, stand_ins)
    sys.meta_path.insert(0, finder)
    saved = {name: sys.modules.pop(name) for name in list(sys.modules) if name.split(".")[0] in finder.foreign}
    try:
        mods = {name: importlib.import_module(name) for name in wanted}
        if read is not None:
            read |= finder.read
        return mods
    except ModuleNotFoundError as err:
        _forget([top])
        sys.meta_path.remove(finder)
        if isinstance(err, SourceError) or not err.name or err.name.split(".")[0] == top:
            raise
        raise SourceError(f"{_importer(err, Path(root))} imports {err.name}, which is not installed: "
                          f"pip install {err.name.split('.')[0].replace('_', '-')}", name=err.name) from None
    except BaseException:
        _forget([top])
        sys.meta_path.remove(finder)
        raise
    finally:
        # the third-party stand-ins were for these modules only
        _forget(finder.foreign)
        sys.modules.update(saved)
        finder.foreign = set()


def _importer(err: BaseException, root: Path) -> str:
    """The release's file (relative to `root`) whose import raised `err`."""
    base = Path(root).resolve()
    mine = [p for p in (Path(f.filename).resolve() for f in traceback.extract_tb(err.__traceback__)) if p.is_relative_to(base)]
    return str(mine[-1].relative_to(base)) if mine else "the engine's sources"


def digest(root: Path, files: Iterable[Path]) -> str:
    """"sha256:<hex>" over the sorted (path relative to `root`, bytes) of
    `files`: which tree of a release a check ran, so that an engineer's
    change and the unchanged release never pass for one another."""
    h = hashlib.sha256()
    root = Path(root).resolve()
    for rel, path in sorted((Path(f).resolve().relative_to(root).as_posix(), Path(f)) for f in files):
        data = path.read_bytes()
        h.update(f"{rel}\0{len(data)}\0".encode())
        h.update(data)
    return f"sha256:{h.hexdigest()}"


_STDLIB = set(sys.stdlib_module_names) | {"__future__"}


def _defined(node: ast.stmt) -> list[str]:
    """The names a top-level definition binds (a class, a function, an assignment to names)."""
    if isinstance(node, (ast.ClassDef, ast.FunctionDef)):
        return [node.name]
    targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AnnAssign) else []
    return [t.id for t in targets if isinstance(t, ast.Name)]


def extract(path: Path, names: Iterable[str], into: types.ModuleType) -> None:
    """Run only the named top-level definitions of a release's file, and
    the file's own top-level definitions they name (a TypeVar, a base
    class, a table an enum reads) unless `into` has that name already,
    with the file's standard-library
    imports, in module `into`: a stand-in then reuses the release's own
    pure-Python pieces (a constant, an enum, a small class) where the rest
    of the file imports too much."""
    tree = ast.parse(Path(path).read_text(encoding="utf-8"), str(path))
    if _reading:
        _reading[-1].add(Path(path))
    want = set(names)
    # the stand-in's own values (set before) win over the file's definitions of those names
    defs = {name: node for node in tree.body for name in _defined(node) if name in want or name not in into.__dict__}
    kept: set[int] = set()
    todo = [defs[n] for n in want if n in defs]
    while todo:
        node = todo.pop()
        if id(node) in kept:
            continue
        kept.add(id(node))
        todo.extend(defs[n.id] for n in ast.walk(node) if isinstance(n, ast.Name) and n.id in defs)
    keep: list[ast.stmt] = []
    for node in tree.body:
        if isinstance(node, ast.Import):
            if all(a.name.split(".")[0] in _STDLIB for a in node.names):
                keep.append(node)
        elif isinstance(node, ast.ImportFrom):
            if not node.level and (node.module or "").split(".")[0] in _STDLIB:
                keep.append(node)
        elif id(node) in kept:
            keep.append(node)
    exec(compile(ast.Module(body=keep, type_ignores=[]), str(path), "exec"), into.__dict__)
    missing = sorted(want - set(into.__dict__))
    if missing:
        raise SourceError(f"{path}: no top-level {', '.join(missing)} (a new release? update the adapter's stand-in)")


def imports(path: Path) -> dict[str, set[str]]:
    """The modules a file imports (absolute imports, at any depth: a
    function's own import runs when it is called), each with the names
    taken from it; imports under `if TYPE_CHECKING:` never run and are
    left out."""
    tree = ast.parse(Path(path).read_text(encoding="utf-8"), str(path))
    found: dict[str, set[str]] = {}
    typing_only = {id(n) for node in ast.walk(tree) if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)
                   for stmt in node.body for n in ast.walk(stmt)}
    for node in ast.walk(tree):
        if id(node) in typing_only:
            continue
        if isinstance(node, ast.ImportFrom) and not node.level and node.module:
            found.setdefault(node.module, set()).update(a.name for a in node.names)
        elif isinstance(node, ast.Import):
            for a in node.names:
                found.setdefault(a.name, set())
    return found


@contextmanager
def environment(**values: str) -> Iterator[None]:
    """Environment variables set while a release's modules load (a seed
    they read at import time), then put back."""
    old = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


# -- getting a release -------------------------------------------------------

class FetchError(RuntimeError):
    """The release could not be downloaded (no network, no such version)."""


def unpack(wheel: Path, dest: Path) -> Path:
    """Extract only the .py files of `wheel` into `dest` (a release's
    Python sources are a tenth of its wheel), marking it complete last."""
    part = dest.with_name(dest.name + ".part")
    shutil.rmtree(part, ignore_errors=True)
    with zipfile.ZipFile(wheel) as zf:
        for member in zf.namelist():
            if member.endswith(".py") and ".." not in Path(member).parts:
                zf.extract(member, part)
    shutil.rmtree(dest, ignore_errors=True)
    part.rename(dest)
    (dest / ".complete").write_text(wheel.name + "\n")
    return dest


def release(root: Path, package: str) -> str:
    """The release of `package` whose sources are in `root`, as its wheel
    records it (`<package>/_version.py`), or "unknown version" (a source
    checkout that was never built)."""
    path = root / package / "_version.py"
    text = path.read_text() if path.is_file() else ""
    found = re.search(r"^__version__\b.*=\s*['\"]([^'\"]+)['\"]", text, re.M)
    return found.group(1) if found else "unknown version"


def fetch(package: str, version: str, cache: Path = CACHE) -> Path:
    """The folder of `package==version`'s Python sources, downloaded once
    with pip (the wheel, no dependencies) into `cache`; FetchError with
    pip's last line when the download fails."""
    dest = Path(cache) / f"{package}-{version}"
    if (dest / ".complete").is_file():
        return dest
    dest.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=dest.parent) as tmp:
        cmd = [sys.executable, "-m", "pip", "download", f"{package}=={version}", "--no-deps", "--only-binary=:all:",
               "--quiet", "-d", tmp]
        done = subprocess.run(cmd, capture_output=True, text=True)
        wheels = sorted(Path(tmp).glob("*.whl"))
        if done.returncode != 0 or not wheels:
            last = (done.stderr or done.stdout).strip().splitlines()[-1:] or ["no wheel"]
            raise FetchError(f"pip download {package}=={version} failed: {last[0]}")
        return unpack(wheels[0], dest)


# -- copying an engine's objects ---------------------------------------------

def _dead() -> None:
    return None


def _reduce_weakref(ref: "weakref.ReferenceType[Any]") -> tuple[Any, ...]:
    target = ref()
    return (weakref.ref, (target,)) if target is not None else (_dead, ())


def dumps(obj: Any, reducers: Optional[dict[type, Callable[[Any], Any]]] = None) -> bytes:
    """Pickle an engine's objects, weak references included (vLLM 0.34's
    blocks hold one to their pool: pickled as a new weak reference to the
    same, pickled, object), for an adapter's `__reduce__`; `reducers`, more
    entries of the dispatch table (an adapter's objects pickled by reference)."""
    buffer = io.BytesIO()
    pickler = pickle.Pickler(buffer, protocol=pickle.HIGHEST_PROTOCOL)
    pickler.dispatch_table = {**copyreg.dispatch_table, weakref.ReferenceType: _reduce_weakref, **(reducers or {})}
    pickler.dump(obj)
    return buffer.getvalue()


def restore(load: Callable[[Optional[str]], Any], cls: type[Any], source: Optional[str], state: bytes) -> Any:
    """An adapter unpickled: its engine's sources loaded first (`load`,
    from `source`), then the adapter's own state, so that a copy made in
    another process finds the engine's classes (each adapter's __reduce__)."""
    load(source)
    adapter = object.__new__(cls)
    adapter.__dict__.update(pickle.loads(state))
    return adapter

