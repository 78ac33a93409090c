"""The per-step time limit of a model file loaded in-process (forge_tui.model.capture.deadline):
a SIGALRM deadline that ends a step with one line, leaves the step's own errors alone, is not
swallowed by the step's ``except Exception``, and restores the handler and timer it found.

Every body here is bounded (a sleep of a few seconds at most), so a broken deadline fails a
test instead of hanging the lane."""

from __future__ import annotations

import signal
import threading
import time

import pytest

from forge_tui.model.capture.deadline import can_limit, load_time_limit_s, step_limit
from forge_tui.model.errors import CaptureError

needs_alarm = pytest.mark.skipif(not can_limit(), reason="SIGALRM deadlines need the main thread of a POSIX system")


@pytest.fixture(autouse=True)
def found():
    """The SIGALRM handler and timer found before the test (pytest-timeout's, where it uses
    the signal method), put back afterwards."""
    if not hasattr(signal, "setitimer"):
        yield None, 0.0
        return
    handler, delay = signal.getsignal(signal.SIGALRM), signal.getitimer(signal.ITIMER_REAL)[0]
    yield handler, delay
    signal.setitimer(signal.ITIMER_REAL, 0)
    signal.signal(signal.SIGALRM, handler)
    if delay > 0:
        signal.setitimer(signal.ITIMER_REAL, delay)


def as_found(found) -> bool:
    """The handler found before is back, and a timer is armed only where one was (not ours)."""
    handler, delay = found
    left = signal.getitimer(signal.ITIMER_REAL)[0]
    return signal.getsignal(signal.SIGALRM) is handler and (left > 0) == (delay > 0)


@needs_alarm
def test_a_step_past_its_limit_is_one_line_naming_file_step_and_limit(found):
    with pytest.raises(CaptureError) as info:
        with step_limit("hang.py", "get_inputs()", limit_s=0.2):
            time.sleep(3)
    assert str(info.value) == "hang.py: get_inputs() did not return within 0.2 s (FORGE_LOAD_TIMEOUT_S)"
    assert as_found(found)


@needs_alarm
def test_the_steps_own_except_exception_does_not_swallow_the_deadline(found):
    with pytest.raises(CaptureError, match="its import did not finish within 0.2 s"):
        with step_limit("loop.py", "its import", limit_s=0.2, verb="did not finish"):
            for _ in range(30):  # a file that retries whatever fails
                try:
                    time.sleep(0.1)
                except Exception:  # noqa: BLE001, S110 - what a careless model file does
                    pass
    assert as_found(found)


@needs_alarm
def test_a_step_that_ends_in_time_returns_and_its_errors_pass_unchanged(found):
    with step_limit("ok.py", "get_inputs()", limit_s=30):
        value = sum(range(10))
    assert value == 45 and as_found(found)
    with pytest.raises(ZeroDivisionError):
        with step_limit("bad.py", "Model(*get_init_inputs())", limit_s=30):
            1 / 0  # noqa: B018
    assert as_found(found)


@needs_alarm
def test_the_handler_and_a_later_outer_timer_are_restored():
    fired = []

    def outer(signum, frame):
        fired.append(signum)

    signal.signal(signal.SIGALRM, outer)
    signal.setitimer(signal.ITIMER_REAL, 100)
    with step_limit("ok.py", "get_inputs()", limit_s=5):
        assert signal.getsignal(signal.SIGALRM) is not outer
        assert signal.getitimer(signal.ITIMER_REAL)[0] <= 5
    assert signal.getsignal(signal.SIGALRM) is outer
    left = signal.getitimer(signal.ITIMER_REAL)[0]
    assert 5 < left <= 100 and not fired  # the outer timer again, less what the step took


@needs_alarm
def test_an_outer_timer_that_fires_first_is_left_alone():
    def outer(signum, frame):
        raise TimeoutError("outer")

    signal.signal(signal.SIGALRM, outer)
    signal.setitimer(signal.ITIMER_REAL, 0.2)
    with pytest.raises(TimeoutError, match="outer"):
        with step_limit("slow.py", "the forward of Model", limit_s=60):
            assert signal.getsignal(signal.SIGALRM) is outer
            time.sleep(3)


def test_outside_the_main_thread_a_step_runs_without_a_limit():
    seen: list = []

    def body():
        seen.append(can_limit())
        try:
            with step_limit("t.py", "get_inputs()", limit_s=0.05):
                time.sleep(0.2)
            seen.append("done")
        except BaseException as exc:  # noqa: BLE001 - reported below
            seen.append(exc)

    t = threading.Thread(target=body)
    t.start()
    t.join(10)
    assert seen == [False, "done"]


@pytest.mark.parametrize("raw", ["soon", "0", "-3"])
def test_a_bad_limit_is_a_capture_error(monkeypatch, raw):
    monkeypatch.setenv("FORGE_LOAD_TIMEOUT_S", raw)
    with pytest.raises(CaptureError, match="FORGE_LOAD_TIMEOUT_S="):
        load_time_limit_s()
    with pytest.raises(CaptureError, match="FORGE_LOAD_TIMEOUT_S="):
        with step_limit("x.py", "get_inputs()"):
            pass


def test_the_limit_is_the_task_files_loading_limit(monkeypatch):
    from forge_tui.tasks.taskfile_sandbox import DEFAULT_TIMEOUT_S

    monkeypatch.delenv("FORGE_LOAD_TIMEOUT_S", raising=False)
    assert load_time_limit_s() == DEFAULT_TIMEOUT_S == 120
    monkeypatch.setenv("FORGE_LOAD_TIMEOUT_S", "8")
    assert load_time_limit_s() == 8
