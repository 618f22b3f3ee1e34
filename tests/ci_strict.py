"""pytest plugin: CI cannot go green by skipping.

With CI=true (as `.ci/run` runs), a skipped test or module (torch, Ray, the Mooncake client or
master missing, ...) fails the run and is listed. Outside CI a test that needs an optional
package skips cleanly when it is absent. tests/conftest.py imports these hooks;
tests/test_ci_strict.py runs them on a throwaway test file.
"""
import os

import pytest

IN_CI = os.environ.get("CI", "").strip().lower() in ("1", "true", "yes")


def _skipped(terminalreporter) -> list:
    return list(terminalreporter.stats.get("skipped", [])) if terminalreporter is not None else []


def pytest_sessionfinish(session, exitstatus):
    if not IN_CI or exitstatus not in (pytest.ExitCode.OK,):
        return
    if _skipped(session.config.pluginmanager.get_plugin("terminalreporter")):
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    skipped = _skipped(terminalreporter)
    if not IN_CI or not skipped:
        return
    terminalreporter.section("CI=true: a skip is a failure", sep="=", red=True, bold=True)
    for rep in skipped:
        where, _, reason = rep.longrepr if isinstance(rep.longrepr, tuple) else ("", 0, str(rep.longrepr))
        terminalreporter.line(f"SKIPPED {rep.nodeid or where}: {reason}")
