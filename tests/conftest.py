"""Shared helpers for the tests."""

from __future__ import annotations

import os
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import NamedTuple

import pytest
from hypothesis import settings

# Hypothesis draws the same examples on every run by default ("fixed": each
# test's examples come from a hash of the test), so a run's verdicts and its
# time are those of the run before it: a test that fails fails again, and
# the quick loop's budget is not at the mercy of one expensive draw (one
# test's time varied 2.8 s to 9.9 s over six seeds). `--hypothesis-profile
# random` draws fresh examples each run, to look for what the fixed ones miss.
settings.register_profile("fixed", derandomize=True)
settings.register_profile("random", derandomize=False)
settings.load_profile("fixed")

# The tests compare printed output with the manual's, laid out for a file or
# a pipe (140 columns): a CI job's $COLUMNS would lay it out otherwise.
os.environ.pop("COLUMNS", None)

from cowcheck.model.scenario import make_scenario  # noqa: E402
import cowcheck
from cowcheck import check
from cowcheck.views.graph import CHROMIUM_ARGS

ROOT = Path(__file__).resolve().parent.parent
SPECS = ROOT / "specs"


@pytest.fixture(autouse=True)
def _no_columns():
    """GNU readline, once something in the test process loads it, sets
    COLUMNS and LINES in the C environment (not in os.environ): the
    commands a test starts would inherit them and lay their tables out for
    80 columns instead of the manual's 140."""
    os.unsetenv("COLUMNS")
    os.unsetenv("LINES")


def pytest_collection_modifyitems(items):
    """The tests marked `slow` run first (a stable sort: the order within
    each group is kept). Over both cores (pytest-xdist, `--dist worksteal`)
    the longest tests then start early and the short ones fill the gaps at
    the end, instead of one core waiting while the other finishes a
    minute-long test that happened to be collected last. Every xdist worker
    sorts the same collection the same way, as xdist requires."""
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)


CHROMIUM = Path("/usr/bin/chromium")
SHOTS = Path(tempfile.gettempdir()) / "cowcheck-screenshots"


def run(protocol: str, B: int, L: int, branches, **kw):
    """Check a scenario built in code; no files written."""
    opts = {k: kw.pop(k) for k in ("max_depth", "max_states", "first", "invariants") if k in kw}
    return check(make_scenario(B, L, branches, protocol, **kw), **opts)


def check_into(scenario, out_dir: Path, **options):
    """Check, then write the counterexamples as the command line does."""
    result = check(scenario, **options)
    cowcheck.write_result(result, Path(out_dir))
    return result


def program_branches(draw, st, most: int = 3) -> list[dict]:
    """Branch tables with programs, for hypothesis: one or two roots, up to
    `most` branches in all; each child hangs off an earlier branch, whose
    program forks it at a random place; programs mix appends and short
    speculations, and any branch may be cancellable."""
    names = "abcdefgh"
    roots = draw(st.integers(1, 2))
    total = draw(st.integers(roots, max(roots, most)))
    ops = st.lists(st.sampled_from(["append", "speculate 1", "speculate 2"]), min_size=0, max_size=2)
    branches: list[dict] = [{"program": draw(ops), "may_cancel": draw(st.booleans())} for _ in range(total)]
    for child in range(roots, total):
        parent = draw(st.integers(0, child - 1))
        branches[child]["parent"] = names[parent]
        program = branches[parent]["program"]
        program.insert(draw(st.integers(0, len(program))), f"fork {names[child]}")
    for b in branches:
        if not b["program"]:
            del b["program"]
            b["appends"] = 0
    return branches


def cache_requests(draw, st, most: int = 3, tokens: tuple[str, ...] = ("p0", "p1", "p2", "p3", "x0"),
                   speculate: bool = True, longest: int = 4) -> list[dict]:
    """Request tables of a cache scenario, for hypothesis: prompts drawn
    from a few token names (so they share prefixes, or continue an earlier
    request's output: `a1`), at most `longest` tokens long, an `after` on
    an earlier request, appends or a short speculation, and any request may
    be cancellable."""
    names = "abcdefgh"
    total = draw(st.integers(1, most))
    requests: list[dict] = []
    for i in range(total):
        pool = list(tokens) + [f"{names[j]}{k}" for j in range(i) for k in (1, 2)]
        # most prompts start with the shared p0 p1 ..., so that they hit
        shared = draw(st.integers(0, min(3, longest)))
        prompt = [f"p{k}" for k in range(shared)] + draw(st.lists(st.sampled_from(pool), min_size=0 if shared else 1,
                                                                   max_size=longest - shared))
        request: dict = {"prompt": prompt, "may_cancel": draw(st.booleans())}
        ops = ["append", "speculate 1", "speculate 2"] if speculate else ["append"]
        program = draw(st.lists(st.sampled_from(ops), max_size=2))
        if program:
            request["program"] = program
        if i and draw(st.booleans()):
            request["after"] = names[draw(st.integers(0, i - 1))]
        requests.append(request)
    return requests


#: every protocol a cache scenario can run: prefix-cache, its bug variants, vllm-v1, and cow
CACHE_PROTOCOLS = ("prefix-cache", "cow", "vllm-v1", "touch-after-alloc", "no-evict", "cache-drafts", "free-in-flight")


def _cache_scenarios(draw, protocols=CACHE_PROTOCOLS, most=3, tight=True, longest=4):
    """Random cache scenarios; `tight`: the pool may be just the largest
    prompt or a little more (evictions, and out-of-memory deadlocks);
    `longest`: the longest prompt."""
    from hypothesis import strategies as st
    requests = cache_requests(draw, st, most=most, longest=longest)
    B = draw(st.integers(1, 3))
    largest = max(-(-len(r["prompt"]) // B) for r in requests)
    pool = draw(st.one_of(st.none(), st.integers(largest, largest + 2))) if tight else None
    return make_scenario(B, 0, requests, draw(st.sampled_from(protocols)), device=draw(st.sampled_from(("async", "stream", "streams"))),
                         reuse=draw(st.sampled_from(("lifo", "fifo", "any"))), pool=pool, cache=True)



def cache_scenarios(**kwargs):
    """A hypothesis strategy of random cache scenarios (see _cache_scenarios)."""
    from hypothesis import strategies as st
    return st.composite(_cache_scenarios)(**kwargs)


#: the protocols a transfer scenario can run: kv-connector, its lazy form, and its four bug variants
TRANSFER_PROTOCOLS = ("kv-connector", "kv-connector-lazy", "store-ahead", "load-over-in-flight", "free-at-abort",
                      "host-key-at-store")


def _transfer_scenarios(draw, most=2, longest=4):
    """Random transfer scenarios (docs/semantics.md#transfers): cache
    requests with appends, each perhaps a P/D consumer or producer, a host
    tier of up to three blocks (at least one when no request has a role),
    any transfer model, device and reuse order, faults and lease; and, half
    the time, one request repeated (same prompt, program, `after` and
    roles), so that request symmetry has something to do."""
    from hypothesis import strategies as st
    from cowcheck.model.scenario import scenario_from_dict
    requests = cache_requests(draw, st, most=most, speculate=False, longest=longest)
    for request in requests:
        role = draw(st.sampled_from((None, "source", "sink")))
        if role is not None:
            request[role] = "remote"
    if draw(st.booleans()):
        requests.append(dict(requests[draw(st.integers(0, len(requests) - 1))]))
    roles = any("source" in r or "sink" in r for r in requests)
    B = draw(st.integers(1, 2))
    largest = max(-(-len(r["prompt"]) // B) for r in requests)
    data = {"cache": "prefix", "block_size": B, "branch": requests,
            "protocol": draw(st.sampled_from(TRANSFER_PROTOCOLS)),
            "host_pool": draw(st.integers(0 if roles else 1, 3)),
            "transfer": draw(st.sampled_from(("stream", "own-stream", "own-stream-fenced", "nic"))),
            "device": draw(st.sampled_from(("async", "stream", "streams"))),
            "reuse": draw(st.sampled_from(("lifo", "fifo", "any"))),
            "faults": draw(st.lists(st.sampled_from(("store", "load", "recv", "send")), unique=True, max_size=2)),
            "lease": draw(st.booleans())}
    pool = draw(st.one_of(st.none(), st.integers(largest, largest + 2)))
    if pool is not None:
        data["pool"] = pool
    return scenario_from_dict(data, "<scenario>", SPECS / "protocols", "transfers")


def transfer_scenarios(**kwargs):
    """A hypothesis strategy of random transfer scenarios (see _transfer_scenarios)."""
    from hypothesis import strategies as st
    return st.composite(_transfer_scenarios)(**kwargs)


def broken(result) -> dict[str, int]:
    return {k: v.length for k, v in result.verdicts.items() if v.holds is False}


@pytest.fixture
def specs() -> Path:
    return SPECS


# -- the browser, for the page tests ------------------------------------------------
@pytest.fixture(scope="module")
def browser():
    """One headless Chromium per test module."""
    if not CHROMIUM.exists():
        pytest.skip(f"{CHROMIUM} is missing (apt-get install chromium)")
    sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is missing (pip install playwright)")
    with sync_api.sync_playwright() as p:
        chromium = p.chromium.launch(executable_path=str(CHROMIUM), args=list(CHROMIUM_ARGS))
        yield chromium
        chromium.close()


@contextmanager
def opened(browser, path: Path, width: int = 1000):
    """A page opened from a file. On leaving, the page must have logged no
    console error or warning, thrown nothing, and fetched nothing but itself
    (or a page of its folder it was sent to by a link)."""
    page = browser.new_page(viewport={"width": width, "height": 900})
    problems: list[str] = []
    fetched: list[str] = []
    page.on("console", lambda m: problems.append(f"{m.type}: {m.text}") if m.type in ("error", "warning") else None)
    page.on("pageerror", lambda e: problems.append(f"exception: {e}"))
    page.on("request", lambda r: fetched.append(r.url))
    page.goto(path.as_uri())
    yield page
    assert problems == []
    assert fetched[0] == path.as_uri()
    assert all(url.startswith(path.parent.as_uri() + "/") and url.endswith(".html") for url in fetched), fetched
    page.close()


def screenshot(page, name: str) -> None:
    SHOTS.mkdir(exist_ok=True)
    page.screenshot(path=str(SHOTS / f"{name}.png"), full_page=True)


def fits(page, width: int) -> bool:
    """Nothing sticks out sideways: the page needs no horizontal scrolling."""
    return page.evaluate("document.documentElement.scrollWidth") <= width


# -- one search, shared by the tests that compare with it ----------------------------
def _session_folder(tmp_path_factory) -> Path:
    """The test session's folder, the same for every xdist worker."""
    session = tmp_path_factory.getbasetemp()
    return session.parent if os.environ.get("PYTEST_XDIST_WORKER") else session


@pytest.fixture(scope="session")
def searched(tmp_path_factory):
    """`searched(path, **options)`: `check(load_scenario(path), **options)`
    run once for the whole test session, whichever test and xdist worker
    asks first; the others read its pickled result. Several files compare
    their engine or reduction with the same search of a shipped scenario
    (the explorer without reductions, or with symmetry alone): each ran it
    again. Two workers asking at once both run it, and either's file is
    the same result."""
    import pickle
    from cowcheck.model.scenario import load_scenario
    folder = _session_folder(tmp_path_factory) / "searches"
    folder.mkdir(exist_ok=True)

    def search(path: Path, **options):
        done = folder / (path.stem + "".join(f",{k}={v}" for k, v in sorted(options.items())) + ".pickle")
        if done.exists():
            return pickle.loads(done.read_bytes())
        result = check(load_scenario(path), **options)
        partial = done.with_suffix(f".{os.getpid()}")
        partial.write_bytes(pickle.dumps(result))
        os.replace(partial, done)
        return result
    return search


# -- the shipped specs, checked once -------------------------------------------------
class Shipped(NamedTuple):
    """One `cowcheck check specs --json FILE --out DIR`, run from the
    checkout's root as the README's first command runs it."""
    exit_code: int
    output: str
    results: list            # the --json file: one result per scenario
    out: Path                # the counterexamples it wrote


def _check_specs(folder: Path) -> Shipped:
    import json
    from click.testing import CliRunner
    from cowcheck.cli import main
    here = os.getcwd()
    os.chdir(ROOT)
    try:
        run = CliRunner().invoke(main, ["check", "specs", "--json", str(folder / "results.json"), "--out", str(folder / "cx")])
    finally:
        os.chdir(here)
    assert run.exception is None or isinstance(run.exception, SystemExit), run.output
    return Shipped(run.exit_code, run.output, json.loads((folder / "results.json").read_text()), folder / "cx")


@pytest.fixture(scope="session")
def shipped(tmp_path_factory) -> Shipped:
    """Every shipped scenario checked once for the whole test session (the
    expectations, the regenerated counterexamples, their schemas and the
    buggy protocols' traces all read this one run). Under pytest-xdist the
    first worker that asks runs it and the others wait for it and read
    its files."""
    import fcntl
    import pickle
    session = _session_folder(tmp_path_factory)
    folder = session / "shipped-specs"
    with open(session / "shipped-specs.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        done = folder / "run.pickle"
        if not done.exists():
            folder.mkdir(exist_ok=True)
            done.write_bytes(pickle.dumps(_check_specs(folder)))
        return pickle.loads(done.read_bytes())
