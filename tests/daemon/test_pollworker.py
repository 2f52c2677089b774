"""The poll thread (runtime/pollworker.py): waits for its tick, runs jobs in order, and hands
results and exceptions back to the event loop; a wake ends a wait, a cancelled job is dropped."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any, Awaitable, Callable, TypeVar

import pytest

from nichealthd.runtime.pollworker import WOKEN, PollWorker

T = TypeVar("T")


def run(test: Callable[[PollWorker], Awaitable[T]]) -> T:
    async def main() -> T:
        worker = PollWorker()
        try:
            return await test(worker)
        finally:
            worker.shutdown()
    return asyncio.run(main())


def test_a_job_without_a_time_runs_at_once_in_the_poll_thread() -> None:
    async def go(worker: PollWorker) -> Any:
        return await worker.run(lambda: threading.current_thread().name)

    assert run(go) == "poll"


def test_a_job_waits_for_its_time() -> None:
    async def go(worker: PollWorker) -> tuple[float, Any]:
        due = time.monotonic() + 0.2
        return due, await worker.run(time.monotonic, due=due)

    due, ran_at = run(go)
    assert ran_at >= due


def test_a_wake_ends_the_wait_and_the_job_does_not_run() -> None:
    calls: list[int] = []

    async def go(worker: PollWorker) -> Any:
        job = worker.run(calls.append, 1, due=time.monotonic() + 60)
        await asyncio.sleep(0.05)
        worker.wake()
        return await asyncio.wait_for(job, 10)

    assert run(go) is WOKEN
    assert calls == []


def test_a_wake_before_the_job_is_forgotten() -> None:
    async def go(worker: PollWorker) -> tuple[float, Any]:
        worker.wake()
        due = time.monotonic() + 0.1
        return due, await worker.run(time.monotonic, due=due)

    due, ran_at = run(go)
    assert ran_at is not WOKEN and ran_at >= due


def test_an_exception_reaches_the_awaiting_coroutine_and_the_thread_goes_on() -> None:
    def fail() -> None:
        raise ValueError("bad sysfs value")

    async def go(worker: PollWorker) -> Any:
        with pytest.raises(ValueError, match="bad sysfs value"):
            await worker.run(fail)
        return await worker.run(lambda: "next")

    assert run(go) == "next"


def test_a_cancelled_job_is_dropped_and_the_next_one_runs() -> None:
    release = threading.Event()

    async def go(worker: PollWorker) -> Any:
        hung = worker.run(release.wait, 10)  # a poll that does not return in time
        await asyncio.sleep(0.05)
        hung.cancel()  # the stop's grace is over (service.Daemon._abandon)
        release.set()
        return await asyncio.wait_for(worker.run(lambda: "after"), 10)

    assert run(go) == "after"


def test_jobs_run_in_order() -> None:
    order: list[int] = []

    async def go(worker: PollWorker) -> None:
        await asyncio.gather(*(worker.run(order.append, i) for i in range(20)))

    run(go)
    assert order == list(range(20))


def test_shutdown_ends_the_thread_after_the_jobs_given() -> None:
    threads: list[Any] = []

    async def go(worker: PollWorker) -> None:
        threads.append(await worker.run(threading.current_thread))

    run(go)
    assert isinstance(threads[0], threading.Thread)
    threads[0].join(10)
    assert not threads[0].is_alive()


def test_after_a_job_with_next_due_the_thread_rests_and_the_next_job_runs_at_its_time(
        ) -> None:
    """Handing over the job expected at next_due does not end the rest (it wakes nobody)."""
    async def go(worker: PollWorker) -> tuple[float, float, Any]:
        rest_until = time.monotonic() + 0.3
        await worker.run(lambda: None, next_due=rest_until)
        await asyncio.sleep(0.05)
        assert worker._resting_until == rest_until  # resting, with nothing to do yet
        due = rest_until + 0.05
        job = worker.run(time.monotonic, due=due)
        await asyncio.sleep(0.05)
        assert worker._resting_until == rest_until  # the job given did not end the rest
        return rest_until, due, await asyncio.wait_for(job, 10)

    rest_until, due, ran_at = run(go)
    assert ran_at >= due


@pytest.mark.parametrize("earlier", ["at once", "before the rest ends", "wake", "shutdown"])
def test_what_is_wanted_before_the_rest_ends_ends_it(earlier: str) -> None:
    """A job due before the rest ends, a wake (stop, reload) and a shutdown end the rest."""
    async def go(worker: PollWorker) -> tuple[float, Any]:
        await worker.run(lambda: None, next_due=time.monotonic() + 60)
        await asyncio.sleep(0.05)
        asked = time.monotonic()
        if earlier == "at once":
            result = await asyncio.wait_for(worker.run(time.monotonic), 10)
        elif earlier == "before the rest ends":
            result = await asyncio.wait_for(worker.run(time.monotonic, due=asked + 0.1), 10)
        elif earlier == "wake":
            worker.wake()
            result = await asyncio.wait_for(worker.run(time.monotonic), 10)
        else:
            thread = worker._thread
            worker.shutdown()
            await asyncio.get_running_loop().run_in_executor(None, thread.join, 10)
            result = thread.is_alive()
        return asked, result

    asked, result = run(go)
    if earlier == "shutdown":
        assert result is False  # the thread ended, not 60 s later
    else:
        assert asked <= result < asked + 5


def test_absorbed_results_run_the_job_again_when_repeat_says_and_the_next_is_handed_over() -> None:
    """A poll that changed nothing stays in the poll thread (runtime/service.py): ``repeat``
    absorbs results and names the next run; the future gets the first result it does not
    absorb, and the loop is not woken for the others."""
    ran: list[float] = []
    absorbed: list[int] = []

    def job() -> int:
        ran.append(time.monotonic())
        return len(ran)

    def repeat(result: int) -> Any:
        if result == 3:
            return None  # the third run changed something: handed over
        absorbed.append(result)
        due = time.monotonic() + 0.1
        return due, due + 0.1

    async def go(worker: PollWorker) -> Any:
        return await asyncio.wait_for(worker.run(job, repeat=repeat), 10)

    assert run(go) == 3
    assert absorbed == [1, 2]
    assert ran[1] - ran[0] >= 0.1 and ran[2] - ran[1] >= 0.1
    assert threading.current_thread().name != "poll"


def test_a_wake_ends_the_wait_between_repeats_and_a_wake_during_a_run_hands_it_over() -> None:
    """A stop, reload or early poll reaches the loop at once: while the thread waits for the
    next repeat (WOKEN), and after a run that a wake came during (that result, not absorbed)."""
    started = threading.Event()

    def absorb(result: Any) -> Any:
        started.set()
        due = time.monotonic() + 60
        return due, due + 60

    async def waiting(worker: PollWorker) -> Any:
        job = worker.run(lambda: "quiet", repeat=absorb)
        await asyncio.get_running_loop().run_in_executor(None, started.wait, 10)
        worker.wake()
        return await asyncio.wait_for(job, 10)

    assert run(waiting) is WOKEN

    def slow() -> str:
        time.sleep(0.2)
        return "during"

    async def running(worker: PollWorker) -> Any:
        job = worker.run(slow, repeat=absorb)
        await asyncio.sleep(0.05)
        worker.wake()
        return await asyncio.wait_for(job, 10)

    assert run(running) == "during"


def test_a_repeat_that_fails_hands_the_result_over(caplog: pytest.LogCaptureFixture) -> None:
    def broken(result: Any) -> Any:
        raise KeyError("bug")

    async def go(worker: PollWorker) -> Any:
        return await asyncio.wait_for(worker.run(lambda: "poll", repeat=broken), 10)

    assert run(go) == "poll"
    assert "handing it over" in caplog.text
