"""The suite's own check (``conftest._no_internal_errors``): a test during which sparklog logs
a traceback or an "internal error" fails, unless it is marked as provoking one.

Covers: the check fails a passing test whose broker logged a crashing handler (as the
server logs one), passes it without, and lets a marked test through.
"""

from __future__ import annotations

from pathlib import Path

import pytest

pytest_plugins = ["pytester"]

INNER = '''
import logging

import pytest

log = logging.getLogger("sparklog.broker.server")


def test_a_handler_crashed():
    try:
        raise KeyError("boom")
    except KeyError:
        log.exception("closing connection from %s after an internal error", "peer")


def test_a_warning_only():
    log.warning("closing connection from %s: Metadata v12 does not decode: %s", "peer",
                "an array too long")


@pytest.mark.internal_errors_expected
def test_provoked_on_purpose():
    log.error("internal error, provoked by the test")
'''


@pytest.mark.internal_errors_expected  # the inner run logs in this process too
def test_an_internal_error_fails_the_test(pytester: pytest.Pytester) -> None:
    pytester.makeconftest(Path(__file__).with_name("conftest.py").read_text())
    pytester.makeini("[pytest]\nmarkers =\n    internal_errors_expected: provoked\n")
    pytester.makepyfile(test_inner=INNER)
    result = pytester.runpytest_inprocess("-p", "no:randomly")
    result.assert_outcomes(passed=3, errors=1)  # the crash fails its test's teardown
    assert result.ret != 0
    result.stdout.fnmatch_lines(["*sparklog logged an internal error during the test*",
                                 "*KeyError: 'boom'*"])
