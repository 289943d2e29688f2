"""The choices a scenario generator makes, behind one small interface, so the
same generator draws from a seeded `random.Random` (`cowcheck fuzz`:
reproducible from the seed alone, on any worker) or from hypothesis
(`cowcheck.fuzzing.strategies`: tests that want its shrinking)."""

from __future__ import annotations

import random
from typing import Protocol, Sequence, TypeVar

T = TypeVar("T")


class Draw(Protocol):
    """What a generator may ask for."""

    def integer(self, low: int, high: int) -> int:
        """An integer from low to high, both included."""

    def choice(self, options: Sequence[T]) -> T:
        """One of the options."""

    def boolean(self, chance: float = 0.5) -> bool:
        """True with about this chance."""


class RandomDraw:
    """Choices from a `random.Random` seeded with a string: Python hashes a
    string seed with SHA-512, so the same seed gives the same choices in
    every process and on every machine (no PYTHONHASHSEED involved)."""

    def __init__(self, seed: str):
        self.random = random.Random(seed)

    def integer(self, low: int, high: int) -> int:
        return self.random.randint(low, high)

    def choice(self, options: Sequence[T]) -> T:
        return options[self.random.randrange(len(options))]

    def boolean(self, chance: float = 0.5) -> bool:
        return self.random.random() < chance
