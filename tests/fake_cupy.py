"""A CPU stand-in for the part of CuPy the executor uses, which checks that
every device read and write is ordered after the last conflicting one.

Without a GPU, the `--pool cupy` replay would be untested code, and its
mistakes are exactly the kind this project exists to find: a value read on
one CUDA stream before the copy that produced it on another has landed. The
numbers come out right on a CPU however the streams are ordered, so the
stand-in checks order instead, the way a race detector does: a vector clock
per stream, per event and for the host, and per buffer its last write and
the reads since. An operation on stream S may touch a buffer only when that
buffer's last write (and, for a write, every read since) happened before
S's clock; otherwise it raises `Race`.

What orders what, as CUDA defines it for the calls used here:
- work on one stream runs in launch order;
- `stream.record()` captures the stream's clock in an event, and
  `other.wait_event(event)` makes later work on `other` wait for it;
- `stream.synchronize()` makes the host wait, and work launched after that
  starts after what it waited for;
- the legacy null stream waits for, and is waited for by, blocking streams
  only; streams made with `non_blocking=True` are not ordered with it;
- `asarray` on host data copies to the device asynchronously on the current
  stream; `asnumpy` copies on the current stream (or the one given) and
  returns when the copy is done.

Values are computed with numpy, so a race-free replay gives bitwise the
numbers of the numpy pool. As in CuPy, basic indexing makes a view (no
launch; its reads and writes are checked where they happen) and advanced
indexing a gather kernel. Granularity is one buffer (an array and its
views), coarser than a byte-level race checker: it may flag a race a real
GPU would never hit, not the other way round."""

from __future__ import annotations

import itertools
import sys
import types
from typing import Optional

import numpy as np


class Race(AssertionError):
    """A device access not ordered after a conflicting one."""


def _merge(into: dict, other: dict) -> None:
    for k, v in other.items():
        if into.get(k, 0) < v:
            into[k] = v


def _before(stamp: tuple[int, int], clock: dict) -> bool:
    stream_id, count = stamp
    return clock.get(stream_id, 0) >= count


class Device:
    """Clocks of the host and every stream; the current-stream stack."""

    def __init__(self):
        self.ids = itertools.count()
        self.host: dict[int, int] = {}
        self.streams: list[Stream] = []
        self.null = Stream(self, non_blocking=False, null=True)
        self.current: list[Stream] = [self.null]
        self.launches = 0

    def launch(self, stream: Optional["Stream"], reads: list["Buffer"], writes: list["Buffer"], what: str) -> None:
        s = stream or self.current[-1]
        _merge(s.clock, self.host)                # launched after everything the host has waited for
        if s.null:
            for other in self.streams:
                if not other.non_blocking:
                    _merge(s.clock, other.clock)
        elif not s.non_blocking:
            _merge(s.clock, self.null.clock)
        s.clock[s.id] = s.clock.get(s.id, 0) + 1
        stamp = (s.id, s.clock[s.id])
        for buf in reads + writes:
            if buf.written is not None and not _before(buf.written, s.clock):
                raise Race(f"{what} on {s} touches {buf} before its write on stream {buf.written[0]} is ordered before it")
        for buf in writes:
            late = [r for r in buf.reads if not _before(r, s.clock)]
            if late:
                raise Race(f"{what} on {s} writes {buf} before its read on stream {late[0][0]} is ordered before it")
        for buf in reads:
            buf.reads.append(stamp)
        for buf in writes:
            buf.written, buf.reads = stamp, []
        self.launches += 1

    def wait_host(self, stream: "Stream") -> None:
        _merge(self.host, stream.clock)


class Stream:
    def __init__(self, device: Device, non_blocking: bool = False, null: bool = False):
        self.device, self.non_blocking, self.null = device, non_blocking, null
        self.id = next(device.ids)
        self.clock: dict[int, int] = {}
        device.streams.append(self)

    def __repr__(self):
        return "null stream" if self.null else f"stream {self.id}"

    def __enter__(self):
        self.device.current.append(self)
        return self

    def __exit__(self, *exc):
        self.device.current.pop()
        return False

    def record(self) -> "Event":
        event = Event()
        event.clock = dict(self.clock)
        return event

    def wait_event(self, event: "Event") -> None:
        _merge(self.clock, event.clock)

    def synchronize(self) -> None:
        self.device.wait_host(self)


class Event:
    def __init__(self):
        self.clock: dict[int, int] = {}


class Buffer:
    """Device memory: one allocation and the views into it."""

    def __init__(self, device: Device):
        self.id = next(device.ids)
        self.written: Optional[tuple[int, int]] = None
        self.reads: list[tuple[int, int]] = []

    def __repr__(self):
        return f"buffer {self.id}"


class ndarray:
    """A device array: numpy data that only device operations may touch."""

    __array_ufunc__ = None       # numpy defers to the reflected operators below

    def __init__(self, device: Device, data: np.ndarray, buffer: Optional[Buffer] = None):
        self._device, self._data = device, data
        self._buffer = buffer or Buffer(device)

    shape = property(lambda self: self._data.shape)
    ndim = property(lambda self: self._data.ndim)
    dtype = property(lambda self: self._data.dtype)

    def __array__(self, *args, **kw):
        raise TypeError("Implicit conversion to a NumPy array is not allowed (use asnumpy)")

    def __getitem__(self, index):
        if any(isinstance(x, ndarray) for x in _flat(index)):   # advanced indexing: a gather kernel, a new array
            return _op(self._device, "gather", lambda d, i: d[i], self, index)
        # basic indexing: a view of the same memory, no launch; it is checked where it is used
        index = index if isinstance(index, tuple) else (index,)
        return ndarray(self._device, self._data[index + (Ellipsis,)], self._buffer)

    def __setitem__(self, index, value):
        sources = [x for x in _flat((index, value)) if isinstance(x, ndarray)]
        self._device.launch(None, [x._buffer for x in sources], [self._buffer], "setitem")
        self._data[_host(index)] = _host(value)

    def max(self):
        return _op(self._device, "max", np.max, self)

    def sum(self):
        return _op(self._device, "sum", np.sum, self)


def _flat(x):
    if isinstance(x, (tuple, list)):
        for y in x:
            yield from _flat(y)
    else:
        yield x


def _host(x):
    """Device arrays swapped for their data (inside an operation only)."""
    if isinstance(x, ndarray):
        return x._data
    if isinstance(x, tuple):
        return tuple(_host(y) for y in x)
    return x


def _op(device: Device, what: str, fn, *args) -> ndarray:
    """A kernel on the current stream: reads its device inputs, writes a new array."""
    out = ndarray(device, np.empty(0))
    device.launch(None, [a._buffer for a in _flat(args) if isinstance(a, ndarray)], [out._buffer], what)
    out._data = np.asarray(fn(*(_host(a) for a in args)))
    return out


for _name, _fn in [("matmul", np.matmul), ("truediv", np.true_divide), ("sub", np.subtract),
                   ("mul", np.multiply), ("add", np.add)]:
    setattr(ndarray, f"__{_name}__", lambda self, other, f=_fn, n=_name: _op(self._device, n, f, self, other))
    setattr(ndarray, f"__r{_name}__", lambda self, other, f=_fn, n=_name: _op(self._device, n, f, other, self))


def module() -> types.ModuleType:
    """A fresh `cupy` module (its own device and clocks): put it in
    sys.modules["cupy"] for the executor to import."""
    device = Device()
    cp = types.ModuleType("cupy")
    cp.ndarray = ndarray
    cp.device = device

    def asarray(a, dtype=None):
        if isinstance(a, ndarray):
            return a
        out = ndarray(device, np.array(a, dtype=dtype))
        device.launch(None, [], [out._buffer], "host-to-device copy")
        return out

    def asnumpy(a, stream=None):
        if not isinstance(a, ndarray):
            return np.asarray(a)
        s = stream or device.current[-1]
        device.launch(s, [a._buffer], [], "device-to-host copy")
        device.wait_host(s)
        return a._data.copy()

    cp.asarray, cp.asnumpy = asarray, asnumpy
    cp.exp = lambda a: _op(device, "exp", np.exp, a)

    stream_class = type("Stream", (Stream,), {"__init__": lambda self, non_blocking=False: Stream.__init__(self, device, non_blocking)})
    stream_class.null = device.null
    runtime = types.SimpleNamespace(getDeviceCount=lambda: 1)
    cp.cuda = types.SimpleNamespace(Stream=stream_class, runtime=runtime)
    return cp


def install(monkeypatch) -> types.ModuleType:
    """Make `import cupy` give a fresh stand-in for the rest of a test."""
    cp = module()
    monkeypatch.setitem(sys.modules, "cupy", cp)
    return cp
