"""Exponential backoff with jitter, shared by the agent's network loops. Pure (the RNG is injected).

Delays grow ``initial · factor^n`` up to ``maximum``; each is drawn uniformly from
[delay/2, delay] ("equal jitter") so that a fleet of agents restarted together does not retry in
lock-step, while a delay never falls below half its nominal value.
"""

from __future__ import annotations

import random


class Backoff:
    """
    >>> b = Backoff(initial=1.0, maximum=4.0, rng=random.Random(1))
    >>> [round(b.nominal(n), 1) for n in range(4)]
    [1.0, 2.0, 4.0, 4.0]
    >>> 0.5 <= b.next_delay() <= 1.0 and 1.0 <= b.next_delay() <= 2.0
    True
    """

    def __init__(
        self,
        initial: float = 0.5,
        maximum: float = 30.0,
        factor: float = 2.0,
        rng: random.Random | None = None,
    ) -> None:
        if not (0 < initial <= maximum) or factor < 1:
            raise ValueError("backoff needs 0 < initial <= maximum and factor >= 1")
        self.initial, self.maximum, self.factor = initial, maximum, factor
        self._rng = rng or random.Random()
        self.failures = 0

    def nominal(self, failures: int) -> float:
        return min(self.maximum, self.initial * self.factor ** min(failures, 64))

    def next_delay(self) -> float:
        """The delay before the next attempt after one more failure."""
        delay = self.nominal(self.failures)
        self.failures += 1
        return self._rng.uniform(delay / 2, delay)

    def reset(self) -> None:
        self.failures = 0
