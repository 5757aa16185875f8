"""Slots: the sync table's FIFO-fair request slots (deadline-aware, interruptible)."""

from __future__ import annotations

import threading
import time

import pytest

from saltedtable._engine.slots_asyncio import AsyncSlots
from saltedtable._engine.slots_threads import Slots


def wait_for(condition: object, limit: float = 10.0) -> None:
    """Poll ``condition()`` until it holds (a generous bound: an event, not a timing)."""
    deadline = time.monotonic() + limit
    while not condition():  # type: ignore[operator]
        assert time.monotonic() < deadline, "condition never held"
        time.sleep(0.001)


def test_a_free_slot_is_taken_at_once_even_past_the_deadline() -> None:
    slots = Slots(2)
    assert slots.acquire(time.monotonic() - 1)
    assert slots.acquire(time.monotonic() - 1)
    assert slots.free == 0
    assert not slots.acquire(time.monotonic() - 1)  # none free, deadline passed
    slots.release()
    slots.release()
    assert slots.free == 2


def test_releasing_more_than_taken_is_refused() -> None:
    slots = Slots(1)
    with pytest.raises(ValueError, match="released more often"):
        slots.release()
    with pytest.raises(ValueError, match="total must be >= 1"):
        Slots(0)


@pytest.mark.parametrize("driver", [Slots, AsyncSlots])
def test_each_driver_names_itself_in_its_errors(driver: type[Slots | AsyncSlots]) -> None:
    """The drivers share their books (``SlotsCore``); an error still says which one refused."""
    slots = driver(1)
    name = driver.__name__
    with pytest.raises(ValueError, match=f"^{name} released more often than acquired"):
        slots.release()
    with pytest.raises(ValueError, match=f"^{name}: small_ends\\(\\) without small_begins"):
        slots.small_ends()
    slots.small_begins()
    slots.small_ends()
    assert (slots.small, slots.waiting, slots.free) == (0, 0, 1)


def test_a_wait_ends_at_its_deadline() -> None:
    slots = Slots(1)
    assert slots.acquire(time.monotonic())
    assert not slots.acquire(time.monotonic() + 0.05)
    assert slots.waiting == 0
    slots.release()
    assert slots.free == 1


def test_a_freed_slot_goes_to_the_longest_waiter_not_to_a_thread_that_asks_again() -> None:
    """The semaphore's unfairness (issue 26, R3): a releaser asking again at once must queue."""
    slots = Slots(1)
    assert slots.acquire(time.monotonic())
    order: list[str] = []
    waiters = []
    for name in ("a", "b", "c"):

        def wait(name: str = name) -> None:
            assert slots.acquire(time.monotonic() + 30)
            order.append(name)
            slots.release()

        thread = threading.Thread(target=wait)
        thread.start()
        waiters.append(thread)
        count = len(waiters)
        wait_for(lambda count=count: slots.waiting == count)
    slots.release()
    # The releaser asks again at once: behind the three that waited.
    assert slots.acquire(time.monotonic() + 30)
    order.append("releaser")
    slots.release()
    for thread in waiters:
        thread.join()
    assert order == ["a", "b", "c", "releaser"]
    assert slots.free == 1


def test_interrupt_ends_the_waits_whose_abort_holds() -> None:
    slots = Slots(1)
    assert slots.acquire(time.monotonic())
    stopped = threading.Event()
    results: dict[str, bool] = {}

    def wait(name: str, abort: object) -> None:
        results[name] = slots.acquire(time.monotonic() + 30, abort)  # type: ignore[arg-type]

    left = threading.Thread(target=wait, args=("left", stopped.is_set))
    stays = threading.Thread(target=wait, args=("stays", lambda: False))
    left.start()
    wait_for(lambda: slots.waiting == 1)
    stays.start()
    wait_for(lambda: slots.waiting == 2)
    stopped.set()
    slots.interrupt()
    left.join(timeout=10)
    assert results == {"left": False}
    assert slots.waiting == 1
    slots.release()  # to the one still waiting
    stays.join(timeout=10)
    assert results == {"left": False, "stays": True}
    slots.release()
    assert slots.free == 1
