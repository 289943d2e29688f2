"""`cowcheck bench`'s isolation: one row measured in a fresh child process,
with an optional time limit. One idea: every row of every table goes through
here, so each row's peak memory (ru_maxrss) is its own, nothing one row
leaves behind (caches, interned states) flatters the next, and a row that
runs past its limit is killed rather than holding up the table."""

from __future__ import annotations

import multiprocessing
from typing import Optional


def in_child(target, args, limit: Optional[float] = None) -> Optional[dict]:
    """Run target(args, conn) in a fresh process and return what it sends;
    None when `limit` seconds pass first (the child is then killed)."""
    ctx = multiprocessing.get_context("fork")
    receive, send = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=target, args=(args, send))
    proc.start()
    send.close()
    if limit is not None and not receive.poll(limit):
        proc.kill()
        proc.join()
        return None
    row = receive.recv()
    proc.join()
    return row
