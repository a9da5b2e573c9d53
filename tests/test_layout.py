"""The package stays readable: no production file over 450 lines (a larger one holds more than one concern;
split it by concern, as rs_lightning/runs/ and analysis/{run_view,protocol,compare}.py are)."""

from __future__ import annotations

from rs_testing import REPO

LIMIT = 450


def test_no_production_file_is_over_450_lines():
    long = {
        str(path.relative_to(REPO)): n
        for path in (REPO / "rs_lightning").rglob("*.py")
        if (n := len(path.read_text().splitlines())) > LIMIT
    }
    assert not long, long
