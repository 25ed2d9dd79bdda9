"""Shared pytest options. `--update-goldens` rewrites expected-output files
(tests/golden/, tests/fixtures/plans/invalid/*.expected.txt) instead of comparing."""

from __future__ import annotations

import pytest


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--update-goldens", action="store_true", default=False,
                     help="rewrite golden/expected files and list the ones that changed")


@pytest.fixture
def update_goldens(request: pytest.FixtureRequest) -> bool:
    return bool(request.config.getoption("--update-goldens"))
