"""``sparklog.signals``: the first SIGINT/SIGTERM requests a stop, a second one aborts.

Each case runs a small child process that waits under ``stop_on_signals`` and reports what it
saw on stdout, line by line, so the test knows when to send the next signal.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap

import pytest

from sparklog.signals import Stop

_CHILD = textwrap.dedent("""
    import sys, time
    from sparklog.signals import stop_on_signals
    with stop_on_signals(exit_on_second=sys.argv[1] == "exit") as stop:
        print("waiting", flush=True)
        print("wait returned", stop.wait(time.sleep, 60), stop.requested, stop.signal.name,
              flush=True)
        time.sleep(60)  # a clean stop that takes long: a second signal ends it
    print("block left", flush=True)
""")


def _child(mode: str) -> subprocess.Popen[str]:
    child = subprocess.Popen([sys.executable, "-c", _CHILD, mode], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
    assert child.stdout is not None and child.stdout.readline() == "waiting\n"
    return child


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_the_first_signal_ends_a_wait_and_requests_a_stop(sig: signal.Signals) -> None:
    child = _child("previous")
    try:
        child.send_signal(sig)
        assert child.stdout is not None
        assert child.stdout.readline() == f"wait returned None True {sig.name}\n"
        child.send_signal(sig)  # the handlers from before are back: Python's defaults
        _, err = child.communicate(timeout=30)
    finally:
        child.kill()
    assert child.returncode == -sig if sig == signal.SIGTERM else "KeyboardInterrupt" in err


def test_with_exit_on_second_a_second_signal_ends_the_process_at_once() -> None:
    child = _child("exit")
    try:
        child.send_signal(signal.SIGINT)
        assert child.stdout is not None
        assert child.stdout.readline() == "wait returned None True SIGINT\n"
        child.send_signal(signal.SIGTERM)
        out, err = child.communicate(timeout=30)
    finally:
        child.kill()
    assert (child.returncode, out, err) == (128 + signal.SIGTERM, "", "")


def test_request_from_code_stops_without_signals() -> None:
    called = []
    stop = Stop(on_request=lambda: called.append(True))
    assert not stop.requested
    stop.request()
    assert stop.requested and stop.signal is None and called == [True]
