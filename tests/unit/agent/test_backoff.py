"""Backoff: exponential growth to a ceiling, jitter within [delay/2, delay], reset."""

from __future__ import annotations

import random

import pytest

from agent.backoff import Backoff


def test_delays_grow_jittered_and_reset() -> None:
    b = Backoff(initial=0.5, maximum=4.0, rng=random.Random(7))
    delays = [b.next_delay() for _ in range(6)]
    nominal = [0.5, 1.0, 2.0, 4.0, 4.0, 4.0]
    for d, n in zip(delays, nominal, strict=True):
        assert n / 2 <= d <= n
    assert len(set(delays)) == len(delays)  # jittered, not lock-step
    b.reset()
    assert 0.25 <= b.next_delay() <= 0.5


def test_invalid_settings_are_refused() -> None:
    with pytest.raises(ValueError):
        Backoff(initial=0, maximum=1)
    with pytest.raises(ValueError):
        Backoff(initial=2, maximum=1)
