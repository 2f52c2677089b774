"""The open-file plan shares the soft NOFILE limit: reserve, connection limits, kept files."""

from __future__ import annotations

import resource

import pytest

from nichealthd.runtime.fdplan import CONNECTION_LIMITS, plan_fds
from nichealthd.sources.attribute import AttributeFiles
from nichealthd.sources.pcie import AER_KEPT_OPEN
from nichealthd.sources.sysfs import FD_RESERVE

CONNECTIONS = sum(CONNECTION_LIMITS.values())  # varlink 256 + metrics 64


@pytest.mark.parametrize("limit", [1024, 4096, 65536, 1 << 20])
def test_every_connection_limit_and_the_reserve_fit_beside_the_kept_files(limit: int) -> None:
    plan = plan_fds(limit)
    assert plan.connections == CONNECTION_LIMITS and not plan.shrunk
    assert plan.kept_sysfs is not None and plan.reserve is not None
    assert plan.reserve >= max(FD_RESERVE, (limit - CONNECTIONS) // 8)
    assert plan.kept_sysfs + plan.kept_aer + CONNECTIONS + plan.reserve == limit
    assert plan.kept_aer == min(AER_KEPT_OPEN, (plan.kept_sysfs + plan.kept_aer) // 4)


def test_everything_kept_open_fits_ulimit_1024() -> None:
    """Before: 896 sysfs files and 256 AER tables could be kept open beside 256 varlink
    connections and a 128 reserve: more than 1024. Now all of it fits."""
    plan = plan_fds(1024)
    assert (plan.kept_sysfs, plan.kept_aer, plan.reserve) == (432, 144, 128)
    assert "open-file limit 1024: 128 kept for discovery" in plan.describe()


def test_a_limit_too_small_for_the_connections_lowers_them_and_keeps_the_reserve() -> None:
    plan = plan_fds(256)
    assert plan.shrunk and plan.kept_sysfs == 0 and plan.kept_aer == 0
    assert plan.connections == {"varlink": 102, "metrics": 25}
    assert plan.reserve is not None and plan.reserve >= FD_RESERVE
    tiny = plan_fds(100)  # below the reserve: one connection each, nothing kept
    assert tiny.connections == {"varlink": 1, "metrics": 1} and tiny.kept_sysfs == 0


def test_once_serves_no_surface_and_no_limit_budgets_nothing() -> None:
    plan = plan_fds(1024, serving=False)
    assert plan.connections == {} and plan.kept_sysfs is not None
    assert plan.kept_sysfs + plan.kept_aer == 1024 - FD_RESERVE
    unlimited = plan_fds(resource.RLIM_INFINITY)
    assert unlimited.kept_sysfs is None and unlimited.connections == CONNECTION_LIMITS


def test_a_lower_budget_closes_the_kept_files_beyond_it(tmp_path) -> None:
    files = AttributeFiles()
    paths = []
    for index in range(10):
        path = tmp_path / f"attr{index}"
        path.write_text(f"{index}\n")
        paths.append(str(path))
        files.read(str(path))
    assert files.open_files == 10
    files.set_budget(4)
    assert files.open_files == 4
    files.read(paths[-1])  # beyond the budget: read once, not kept
    assert files.open_files == 4 and files.transient_reads == 1
    files.close()
