"""Device sets for concurrent trials: disjoint, aligned where possible, waiting when full."""

from __future__ import annotations

import threading
import time

import pytest

from tuner.serve.slots import DevicePool


def test_two_tp4_trials_on_eight_gpus_get_the_two_halves():
    pool = DevicePool(range(8))
    assert pool.acquire(4) == [0, 1, 2, 3]
    assert pool.acquire(4) == [4, 5, 6, 7]
    assert pool.free == []


def test_blocks_stay_disjoint_and_aligned_when_sizes_mix():
    pool = DevicePool(range(8))
    a, b, c = pool.acquire(1), pool.acquire(2), pool.acquire(4)
    assert (a, b, c) == ([0], [2, 3], [4, 5, 6, 7])
    assert not set(a) & set(b) and not set(b) & set(c)
    assert pool.acquire(1) == [1]


def test_a_trial_waits_for_devices_and_stop_releases_the_wait():
    pool = DevicePool(range(2))
    held = pool.acquire(2)
    got: list = []
    waiter = threading.Thread(target=lambda: got.append(pool.acquire(1)))
    waiter.start()
    time.sleep(0.2)
    assert got == []  # still waiting: nothing is free
    pool.release(held)
    waiter.join(timeout=5)
    assert got == [[0]]

    stop = threading.Event()
    pool.acquire(1)  # now [0] and [1] are both taken
    stop.set()
    assert pool.acquire(1, stop) is None


def test_more_devices_than_the_node_has_is_an_error():
    with pytest.raises(ValueError):
        DevicePool(range(2)).acquire(4)
