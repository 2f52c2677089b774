"""The benchmark's smoke mode runs end to end and prints every figure (no targets asserted)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from .conftest import REPO


@pytest.mark.slow
def test_bench_quick_prints_every_figure(tmp_path: Path) -> None:
    out = tmp_path / "bench.json"
    done = subprocess.run([sys.executable, str(REPO / "bench" / "run.py"), "--quick",
                           "--json", str(out)], cwd=REPO, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    for heading in ("poll cycle, in-process", "daemon, ", "event latency"):
        assert heading in done.stdout, done.stdout
    result = json.loads(out.read_text())["results"][0]
    assert result["devices"] == 8
    assert result["cycle_cpu_median_s"] > 0 and result["daemon_peak_rss_mib"] > 0
    assert result["latency_samples"] >= 1
