"""systemd/examples/slurm.conf: what a site adds for slurmDrain when slurmdbd cannot grant
the daemon's user AdminLevel=Admin. The shipped unit is not weakened (its score is tested in
tests/test_systemd_unit.py); the drop-in changes the uid only and stays within 2.0."""

from __future__ import annotations

from pathlib import Path

from ..test_systemd_unit import directives, dropin_scores, needs_analyze

REPO = Path(__file__).resolve().parents[2]
SLURM_DROPIN = REPO / "systemd/examples/slurm.conf"


def test_slurm_dropin_changes_the_user_and_nothing_else() -> None:
    assert directives(SLURM_DROPIN) == {("Service", "User"): ["root"],
                                        ("Service", "Group"): ["root"]}
    text = SLURM_DROPIN.read_text()
    assert "/usr/share/doc/nichealthd/examples/slurm.conf" in text
    assert "/etc/systemd/system/nichealthd.service.d/slurm.conf" in text
    assert "adminlevel=Admin" in text


@needs_analyze
def test_slurm_dropin_keeps_the_score_within_2(tmp_path: Path) -> None:
    _, score = dropin_scores(tmp_path, SLURM_DROPIN)
    assert score <= 2.0
