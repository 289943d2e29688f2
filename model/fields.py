"""Reading a scenario's fields: bounded integers and choices from a fixed
list, each refused in one line that names the key and what is allowed."""

from __future__ import annotations

from typing import Any, Literal, overload

from cowcheck.model.errors import SpecError

#: Upper bounds far beyond what exhaustive exploration can reach; they turn an
#: impossible parameter into an error instead of a hang.
MAXIMA = {"block_size": 64, "prompt": 1024, "pool": 1024, "appends": 64, "speculate": 64, "host_pool": 1024}


@overload
def integer(data: dict[str, Any], key: str, source: str, minimum: int, required: Literal[True], label: str | None = None) -> int: ...
@overload
def integer(data: dict[str, Any], key: str, source: str, minimum: int, required: bool, label: str | None = None) -> int | None: ...


def integer(data: dict[str, Any], key: str, source: str, minimum: int, required: bool, label: str | None = None) -> int | None:
    maximum = MAXIMA[key]
    if key not in data:
        if required:
            raise SpecError(source, label or key, f"missing; an integer from {minimum} to {maximum} is required")
        return None
    value = data[key]
    if type(value) is not int or not minimum <= value <= maximum:
        raise SpecError(source, label or key, f"must be an integer from {minimum} to {maximum}, got {value!r}")
    return value


def choice(data: dict[str, Any], key: str, allowed: tuple[str, ...], default: str, source: str) -> str:
    value: str = data.get(key, default)  # one of `allowed` once checked
    if value not in allowed:
        raise SpecError(source, key, f"unknown value {value!r}; allowed: {', '.join(allowed)}")
    return value


def seconds(data: dict[str, Any], key: str, source: str, maximum: float = 86400.0) -> float | None:
    """A duration in seconds: a number from 0 (none) to `maximum`; None when the key is absent."""
    if key not in data:
        return None
    value = data[key]
    if type(value) not in (int, float) or not 0 <= value <= maximum:
        raise SpecError(source, key, f"must be a number of seconds from 0 (no deadline) to {maximum:g}, got {value!r}")
    return float(value)
