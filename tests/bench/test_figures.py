"""The load client's own arithmetic: the busiest window of the server's CPU, and the
``Server-Timing`` entries it splits a first byte with."""

from __future__ import annotations

import pytest

from bench.client import _server_timing
from bench.turns import _peak_share


def test_the_busiest_window_is_found_wherever_it_is() -> None:
    # Half a core for a second, then a whole one for half a second, then half again.
    samples, cpu, now = [], 0.0, 0.0
    for share in [0.5] * 20 + [1.0] * 10 + [0.5] * 20:
        samples.append((now, cpu))
        now, cpu = now + 0.05, cpu + 0.05 * share
    assert _peak_share(samples, 0.2) == pytest.approx(1.0)
    assert _peak_share(samples, 1.0) == pytest.approx(0.75)  # half of it at the busiest


def test_too_few_samples_for_a_window_give_no_figure() -> None:
    assert _peak_share([], 0.2) is None
    assert _peak_share([(0.0, 0.0), (0.1, 0.05)], 0.2) is None


def test_server_timing_entries_are_read_by_name() -> None:
    head = (
        "http/1.1 200 ok\r\nserver-timing: arrived;dur=1234567.125, auth;dur=0.041, "
        'queue;dur=0.002;desc="waiting", app;dur=0.380\r\ncontent-type: text/event-stream'
    )
    assert _server_timing(head) == {
        "arrived": 1234567.125,
        "auth": 0.041,
        "queue": 0.002,
        "app": 0.380,
    }
    assert _server_timing("http/1.1 200 ok\r\ncontent-length: 0") == {}
