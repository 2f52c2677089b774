"""A/B of the state file's codec between a git revision and the working tree, in one process.

The state is that of a 34-device host (``nichealthd-sim`` profile ``h100-34``: 18 ACTIVE PFs
and 16 VFs) after the real monitor polled it with counters rising, one breach latched and a
port down. Revision REV's package is extracted under another name (``nichealthd_<rev>``: the
package imports itself relatively), so both codecs run in this process on the same JSON,
interleaved round after round; each figure is the best of ``--rounds`` rounds of
``MonitorState.from_json`` + ``to_json`` (``--reps`` each, the mean per pair).

    python3 bench/state_codec_ab.py main            # main vs the working tree
    python3 bench/state_codec_ab.py a406b84 --rounds 300
"""

from __future__ import annotations

import argparse
import importlib
import io
import json
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path
from types import ModuleType
from typing import Any, Callable, Optional

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from nichealthd.core.state import MonitorState  # noqa: E402
from nichealthd.runtime.monitor import Monitor  # noqa: E402
from nichealthd.runtime.startup import load_topology, prepare_state_dir  # noqa: E402
from nichealthd.sim import mutate, tree  # noqa: E402
from nichealthd.sources.config_file import load_config  # noqa: E402
from nichealthd.surfaces.seam import surfaces  # noqa: E402

surfaces()  # the surfaces' keys (a sim host's platformConnectorSocket) are the config's


def extract(rev: str, into: Path) -> ModuleType:
    """REV's ``nichealthd`` package as the module ``nichealthd_<rev>`` (under ``into``)."""
    name = "nichealthd_" + "".join(c if c.isalnum() else "_" for c in rev)
    archive = subprocess.run(["git", "-C", str(REPO), "archive", rev, "nichealthd"],
                             check=True, capture_output=True).stdout
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(into / "src")  # our own archive
    (into / "src" / "nichealthd").rename(into / name)
    sys.path.insert(0, str(into))
    return importlib.import_module(f"{name}.core.state")


def state_json(work: Path) -> dict[str, Any]:
    """The state the monitor commits on the 34-device host after a few polls."""
    host = work / "host"
    tree.create(host, "h100-34")
    config = load_config(str(host / "nichealthd.toml"),
                         {"stateFile": str(work / "state" / "state.json"), "eventLog": ""})
    prepare_state_dir(config)
    monitor = Monitor(config, load_topology(config))
    monitor.start()
    try:
        for poll in range(8):
            for dev in ("mlx5_0", "mlx5_5", "mlx5_11"):
                mutate.counter(host, dev, 1, "symbol_error", add=3 * poll)
            if poll == 4:
                mutate.counter(host, "mlx5_2", 1, "link_downed", add=1)
                mutate.set_port(host, "mlx5_3", 1, state="DOWN", phys_state="Disabled")
            monitor.poll()
    finally:
        monitor.close()
    data: dict[str, Any] = json.loads((work / "state" / "state.json").read_text())
    return data


def timers(state_class: Any, data: dict[str, Any], reps: int) -> dict[str, Callable[[], float]]:
    """Seconds per ``from_json``, per ``to_json`` and per pair, each the mean of ``reps``."""
    state = state_class.from_json(data)

    def read() -> float:
        started = time.perf_counter()
        for _ in range(reps):
            state_class.from_json(data)
        return (time.perf_counter() - started) / reps

    def write() -> float:
        started = time.perf_counter()
        for _ in range(reps):
            state.to_json()
        return (time.perf_counter() - started) / reps

    def both() -> float:
        started = time.perf_counter()
        for _ in range(reps):
            state_class.from_json(data).to_json()
        return (time.perf_counter() - started) / reps
    return {"from_json": read, "to_json": write, "from_json + to_json": both}


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("rev", help="git revision A (B is the working tree)")
    parser.add_argument("--rounds", type=int, default=100)
    parser.add_argument("--reps", type=int, default=5)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="nichealthd-codec-ab-") as tmp:
        work = Path(tmp)
        data = state_json(work)
        old = extract(args.rev, work)
        if json.dumps(old.MonitorState.from_json(data).to_json()) != json.dumps(
                MonitorState.from_json(data).to_json()):
            print("the two revisions write different JSON for this state", file=sys.stderr)
            return 1
        runs = {args.rev: timers(old.MonitorState, data, args.reps),
                "working tree": timers(MonitorState, data, args.reps)}
        best = {(name, what): float("inf") for name, run in runs.items() for what in run}
        for _ in range(args.rounds):
            for what in runs[args.rev]:
                for name, run in runs.items():
                    best[name, what] = min(best[name, what], run[what]())
    print(f"h100-34 state ({len(data.get('port_states', {}))} ports, "
          f"{len(data.get('counter_snapshots', {}))} counter snapshots, "
          f"{len(json.dumps(data))} bytes of JSON): best of {args.rounds} interleaved rounds "
          f"of {args.reps}")
    for what in runs[args.rev]:
        old_s, new_s = best[args.rev, what], best["working tree", what]
        print(f"  {what:>19}: {args.rev} {old_s * 1e3:.3f} ms, working tree "
              f"{new_s * 1e3:.3f} ms, ratio {new_s / old_s:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
