"""The wire module on every protobuf runtime the packages meet (packaging/targets.toml): RHEL 9's
python3-protobuf (3.14) with EPEL 9's python3-grpcio (1.46), Fedora 42's (3.19.6, C++ and pure
Python), Debian 12's (3.21, apt) and the newest on PyPI must all import
nichealthd.surfaces.connector.health_event_pb2 and put the same bytes on the wire."""

from __future__ import annotations

import glob
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests import skipreasons

ROOT = Path(__file__).resolve().parents[2]

# Serializes a fixed batch touching every field kind (scalars, enums, repeated, a one-entry map,
# Timestamp, nested messages) and, where grpcio is installed, sends it through the generated
# gRPC stub and servicer over a unix socket. Prints one JSON line.
WIRE_CHECK = r"""
import json, os, sys, threading
sys.path.insert(0, sys.argv[1])
import google.protobuf
from google.protobuf.internal import api_implementation
from nichealthd.surfaces.connector import health_event_pb2 as pb

event = pb.HealthEvent(
    version=1, agent="nic-health-monitor", componentClass="NIC",
    checkName="InfiniBandStateCheck", isFatal=True, isHealthy=False,
    message="Port mlx5_0 port 1: link_downed #7", recommendedAction=pb.REPLACE_VM,
    errorCode=["link_downed", "x"],
    entitiesImpacted=[pb.Entity(entityType="NIC", entityValue="mlx5_0"),
                      pb.Entity(entityType="NICPort", entityValue="1")],
    nodeName="node-a", drainOverrides=pb.BehaviourOverrides(force=True),
    processingStrategy=pb.STORE_ONLY, id="id-7", customRecommendedAction="c")
event.metadata["nichealthd.event_id"] = "id-7"
event.generatedTimestamp.seconds = 1770000000
event.generatedTimestamp.nanos = 678901000
batch = pb.HealthEvents(version=1, events=[event, pb.HealthEvent(isHealthy=True)])
raw = batch.SerializeToString()
assert pb.HealthEvents.FromString(raw) == batch
assert pb.RecommendedAction.Name(25) == "REPLACE_VM" and pb.STORE_AND_ANALYSE == 3
import importlib  # a second import of the module reuses the descriptor in the pool
assert importlib.reload(pb).HealthEvents.FromString(raw).SerializeToString() == raw
# The daemon's own mapping (convert.py) of a committed event, metadata and local time included.
from datetime import datetime, timedelta, timezone
from nichealthd.surfaces.connector import convert
from nichealthd.core.events import make_event
committed = make_event("InfiniBandStateCheck", fatal=True, healthy=False,
                       message="Port mlx5_0 port 1: link_downed #7", error_code="link_downed",
                       entities=(("NIC", "mlx5_0"), ("NICPort", "1")),
                       at=datetime(2026, 2, 3, 4, 5, 6, 789000,
                                   tzinfo=timezone(timedelta(hours=2))))
committed = committed.stamped("node-a", "STORE_ONLY", "id-7")
daemon_raw = convert.to_batch([committed]).SerializeToString()
out = {"protobuf": google.protobuf.__version__, "impl": api_implementation.Type(),
       "hex": raw.hex() + "/" + daemon_raw.hex(), "grpc": None}
try:
    import grpc
except ImportError:
    grpc = None
if grpc is not None:
    from concurrent import futures
    from google.protobuf import empty_pb2
    from nichealthd.surfaces.connector import health_event_pb2_grpc as pb_grpc
    received = []

    class Servicer(pb_grpc.PlatformConnectorServicer):
        def HealthEventOccurredV1(self, request, context):
            received.append(request.SerializeToString())
            return empty_pb2.Empty()

    pool = futures.ThreadPoolExecutor(max_workers=1)
    server = grpc.server(pool)
    pb_grpc.add_PlatformConnectorServicer_to_server(Servicer(), server)
    address = "unix:" + os.path.join(sys.argv[2], "connector.sock")
    server.add_insecure_port(address)
    server.start()
    try:
        with grpc.insecure_channel(address) as channel:
            pb_grpc.PlatformConnectorStub(channel).HealthEventOccurredV1(batch, timeout=30)
    finally:
        server.stop(None).wait()
        pool.shutdown()
    assert received == [raw], received
    out["grpc"] = grpc.__version__
print(json.dumps(out))
"""


def _wire(python: str, tmp: Path, env: dict[str, str] | None = None) -> dict[str, str]:
    """Run WIRE_CHECK with another interpreter; only the stubs of the package load."""
    sock_dir = tmp / f"sock{len(list(tmp.iterdir()))}"
    sock_dir.mkdir()
    result = subprocess.run([python, "-c", WIRE_CHECK, str(ROOT), str(sock_dir)],
                            capture_output=True, text=True, timeout=120,
                            env={**os.environ, **(env or {})})
    assert result.returncode == 0, result.stderr
    answer: dict[str, str] = json.loads(result.stdout.strip().splitlines()[-1])
    return answer


def _venv(python: str, where: Path, *requirements: str) -> str:
    """A venv of `python` with `requirements` from the registry, or skip saying why not.

    `python`'s own pip installs into it (``pip --python``), uncompiled: a pip of its own in
    each venv would be 1,700 files more."""
    subprocess.run([python, "-m", "venv", "--without-pip", str(where)], check=True,
                   capture_output=True, timeout=120)
    bin_python = str(where / "bin" / "python")
    install = subprocess.run([python, "-m", "pip", "--python", bin_python, "install",
                              "--quiet", "--no-compile", "--only-binary=:all:", *requirements],
                             capture_output=True, text=True, timeout=600,
                             env={**os.environ, "PIP_DISABLE_PIP_VERSION_CHECK": "1"})
    if install.returncode != 0:
        pytest.skip(skipreasons.pip_reason(" ".join(requirements), install.stderr))
    return bin_python


def _old_python() -> str:
    """RHEL 9's Python, 3.9 (pyenv's here and in CI's root runs), else this interpreter: the
    unprivileged CI run cannot read root's pyenv, and the protobuf pins have pure-Python
    wheels for any Python 3; only EPEL 9's grpcio 1.46 needs 3.9 (no wheels past 3.10)."""
    if sys.version_info[:2] == (3, 9):
        return sys.executable
    pyenv = os.environ.get("PYENV_ROOT") or os.path.expanduser("~/.pyenv")
    found = sorted(glob.glob(os.path.join(pyenv, "versions", "3.9*", "bin", "python3.9")))
    return found[-1] if found else sys.executable


def _is_39(python: str) -> bool:
    probe = subprocess.run([python, "-c", "import sys; print(sys.version_info[:2] == (3, 9))"],
                           capture_output=True, text=True, check=True)
    return probe.stdout.strip() == "True"


@pytest.mark.slow
def test_same_wire_bytes_on_every_protobuf_runtime(tmp_path: Path) -> None:
    old_python = _old_python()
    on_39 = _is_39(old_python)
    runs: list[dict[str, str]] = [_wire(sys.executable, tmp_path)]  # this venv's runtime
    debian = "/usr/bin/python3"
    probe = subprocess.run([debian, "-c", "import grpc, google.protobuf"], capture_output=True)
    if probe.returncode == 0:  # Debian 12's python3-protobuf 3.21 / python3-grpcio 1.51
        runs.append(_wire(debian, tmp_path))
    # RHEL 9: python3-protobuf 3.14 (AppStream) + EPEL 9's python3-grpcio 1.46.
    rhel9 = _venv(old_python, tmp_path / "rhel9", "protobuf==3.14.0",
                  *(["grpcio==1.46.5"] if on_39 else []))
    runs.append(_wire(rhel9, tmp_path))
    # Fedora 42: python3-protobuf 3.19.6, with its C++ extension (3.9 wheel) and pure Python.
    fedora = _venv(old_python, tmp_path / "fedora42", "protobuf==3.19.6")
    runs.append(_wire(fedora, tmp_path))
    runs.append(_wire(fedora, tmp_path, {"PROTOCOL_BUFFERS_PYTHON_IMPLEMENTATION": "python"}))
    # The newest protobuf and grpcio of the registry for that Python.
    newest = _venv(old_python, tmp_path / "newest", "protobuf", "grpcio")
    runs.append(_wire(newest, tmp_path))

    print(f"old runtimes on {old_python}")
    for run in runs:
        print(f"protobuf {run['protobuf']} ({run['impl']}), grpcio {run['grpc']}: "
              f"{len(run['hex'])} hex digits")
    assert {run["hex"] for run in runs} == {runs[0]["hex"]}, runs
    by_version = {run["protobuf"]: run for run in runs}
    assert "3.14.0" in by_version and "3.19.6" in by_version
    impls_319 = {r["impl"] for r in runs if r["protobuf"] == "3.19.6"}
    if on_39:
        assert by_version["3.14.0"]["grpc"] == "1.46.5"  # the stubs work on EPEL 9's grpcio
        assert impls_319 == {"cpp", "python"}
    else:
        assert "python" in impls_319
    assert int(runs[-1]["protobuf"].split(".")[0]) >= 5, runs[-1]
    assert runs[-1]["grpc"] is not None
