"""The wire contract: field numbers as NVSentinel's health_event.proto has them, stubs that
import on old and new runtimes, and a JSON form (``HealthEvent.to_json``) equal to the proto's own
JSON mapping."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import venv
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest
from google.protobuf import json_format

from nichealthd.core.events import HealthEvent, make_event
from nichealthd.surfaces.connector import convert
from nichealthd.surfaces.connector import health_event_pb2 as pb
from nichealthd.surfaces.connector import health_event_pb2_grpc as pb_grpc
from tests import skipreasons

from .connector_fixtures import T0, degraded, fatal, healthy

ROOT = Path(__file__).resolve().parents[2]
CONNECTOR_DIR = ROOT / "nichealthd" / "surfaces" / "connector"

# NVSentinel's numbers, copied here rather than read from our own proto, so a wrong number fails.
HEALTH_EVENT_FIELDS = {
    "version": 1, "agent": 2, "componentClass": 3, "checkName": 4, "isFatal": 5,
    "isHealthy": 6, "message": 7, "recommendedAction": 8, "errorCode": 9,
    "entitiesImpacted": 10, "metadata": 11, "generatedTimestamp": 12, "nodeName": 13,
    "quarantineOverrides": 14, "drainOverrides": 15, "processingStrategy": 16, "id": 17,
    "customRecommendedAction": 18,
}
RECOMMENDED_ACTIONS = {"NONE": 0, "COMPONENT_RESET": 2, "CONTACT_SUPPORT": 5,
                       "RUN_FIELDDIAG": 6, "RESTART_VM": 15, "RESTART_BM": 24,
                       "REPLACE_VM": 25, "RUN_DCGMEUD": 26, "CUSTOM": 27, "UNKNOWN": 99}
STRATEGIES = {"UNSPECIFIED": 0, "EXECUTE_REMEDIATION": 1, "STORE_ONLY": 2,
              "STORE_AND_ANALYSE": 3}


def wire_fields(data: bytes) -> dict[int, list[Any]]:
    """A minimal protobuf wire decoder (varint and length-delimited only), independent of
    the generated code: field number -> values in order."""
    fields: dict[int, list[Any]] = {}
    pos = 0

    def varint() -> int:
        nonlocal pos
        shift = result = 0
        while True:
            byte = data[pos]
            pos += 1
            result |= (byte & 0x7F) << shift
            if not byte & 0x80:
                return result
            shift += 7

    while pos < len(data):
        key = varint()
        number, wire_type = key >> 3, key & 7
        if wire_type == 0:
            value: Any = varint()
        elif wire_type == 2:
            length = varint()
            value, pos = data[pos:pos + length], pos + length
        else:
            raise AssertionError(f"unexpected wire type {wire_type}")
        fields.setdefault(number, []).append(value)
    return fields


def test_descriptor_matches_reference() -> None:
    fields = {f.name: f.number for f in pb.HealthEvent.DESCRIPTOR.fields}
    assert fields == HEALTH_EVENT_FIELDS
    assert {f.name: f.number for f in pb.HealthEvents.DESCRIPTOR.fields} == {
        "version": 1, "events": 2}
    assert {f.name: f.number for f in pb.Entity.DESCRIPTOR.fields} == {
        "entityType": 1, "entityValue": 2}
    assert {f.name: f.number for f in pb.BehaviourOverrides.DESCRIPTOR.fields} == {
        "force": 1, "skip": 2}
    assert dict(pb.RecommendedAction.items()) == RECOMMENDED_ACTIONS
    assert dict(pb.ProcessingStrategy.items()) == STRATEGIES
    assert pb.DESCRIPTOR.package == "datamodels"
    service = pb.DESCRIPTOR.services_by_name["PlatformConnector"]
    method = service.methods_by_name["HealthEventOccurredV1"]
    assert method.input_type.full_name == "datamodels.HealthEvents"
    assert method.output_type.full_name == "google.protobuf.Empty"
    assert callable(pb_grpc.PlatformConnectorStub)  # the grpc stub imports package-relative


def test_raw_wire_bytes_use_reference_field_numbers() -> None:
    event = fatal(7).stamped("node-a", "STORE_ONLY", "id-7")
    raw = convert.to_batch([event]).SerializeToString()
    top = wire_fields(raw)
    assert top[1] == [1]  # HealthEvents.version
    (body,) = top[2]
    f = wire_fields(body)
    assert f[1] == [1]
    assert f[2] == [b"nic-health-monitor"]
    assert f[3] == [b"NIC"]
    assert f[4] == [b"InfiniBandStateCheck"]
    assert f[5] == [1] and 6 not in f  # isFatal true, isHealthy false (default: not sent)
    assert f[7] == [b"Port mlx5_0 port 1: link_downed #7"]
    assert f[8] == [25]  # REPLACE_VM
    assert f[9] == [b"link_downed"]
    assert [wire_fields(e) for e in f[10]] == [{1: [b"NIC"], 2: [b"mlx5_0"]},
                                               {1: [b"NICPort"], 2: [b"1"]}]
    assert [wire_fields(e) for e in f[11]] == [{1: [b"nichealthd.event_id"], 2: [b"id-7"]}]
    stamp = wire_fields(f[12][0])
    assert stamp == {1: [int(T0.timestamp())], 2: [678901000]}
    assert f[13] == [b"node-a"]
    assert f[16] == [2]  # STORE_ONLY
    assert not {14, 15, 17, 18} & set(f)


@pytest.mark.parametrize("event", [fatal(1), degraded(2), healthy(3), make_event(
    "EthernetStateCheck", fatal=False, healthy=True, message="clear all", error_code="x",
    entities=(), at=datetime(2026, 5, 6, 7, 8, 9, tzinfo=timezone.utc))])
def test_to_json_is_the_proto_json_mapping(event: HealthEvent) -> None:
    """health_event.proto: the event JSON is protobuf's own JSON mapping, defaults included."""
    event = event.stamped("node-b", "STORE_AND_ANALYSE", "abc")
    message = convert.to_proto(event)
    try:  # protobuf < 5.26
        mapped = json_format.MessageToDict(message, preserving_proto_field_name=False,
                                           including_default_value_fields=True,  # type: ignore[call-arg]
                                           )
    except TypeError:  # the same option, renamed in protobuf 5.26
        mapped = json_format.MessageToDict(message, preserving_proto_field_name=False,
                                           always_print_fields_with_no_presence=True)
    ours = event.to_json()
    overlap = set(mapped) & set(ours)
    # Only the unset message-typed overrides are absent from ours; every field we print exists.
    assert set(ours) <= set(mapped)
    assert set(mapped) - set(ours) <= {"quarantineOverrides", "drainOverrides"}
    assert {k: ours[k] for k in overlap} == {k: mapped[k] for k in overlap}
    # ... and parsing our JSON with protobuf gives the same message back.
    assert json_format.ParseDict(ours, pb.HealthEvent()) == message


def test_timestamp_of_non_utc_datetimes() -> None:
    local = datetime(2026, 1, 2, 5, 4, 5, 123000).astimezone()
    message = convert.to_proto(degraded(at=local))
    assert message.generatedTimestamp.ToDatetime().replace(tzinfo=timezone.utc) == local


@pytest.mark.slow
def test_regenerate_reproduces_the_committed_stubs(tmp_path: Path) -> None:
    """The committed stubs, and the descriptor bytes in health_event_pb2.py, are exactly what
    regenerate.sh makes (grpcio-tools 1.51.3; a throwaway venv when this one lacks it)."""
    work = tmp_path / "connector"
    work.mkdir()
    for name in ("health_event.proto", "regenerate.sh"):
        shutil.copy2(CONNECTOR_DIR / name, work / name)
    # Our module with its descriptor line emptied: regenerate.sh must put protoc's bytes back.
    committed = (CONNECTOR_DIR / "health_event_pb2.py").read_text()
    emptied = re.sub(r"(?m)^_SERIALIZED_FILE = .*$", '_SERIALIZED_FILE = b""', committed)
    assert emptied != committed
    (work / "health_event_pb2.py").write_text(emptied)
    result = subprocess.run(["sh", str(work / "regenerate.sh"), sys.executable],
                            capture_output=True, text=True, timeout=600,
                            env={**os.environ, "PIP_DISABLE_PIP_VERSION_CHECK": "1"})
    pip_failed = (*skipreasons.NO_WHEEL, *skipreasons.NO_REGISTRY)
    if result.returncode != 0 and any(text in result.stderr for text in pip_failed):
        pytest.skip(skipreasons.pip_reason("grpcio-tools==1.51.3", result.stderr,
                                           wheels_for="CPython 3.7 to 3.11"))
    assert result.returncode == 0, result.stderr
    for name in ("health_event_pb2.py", "health_event_pb2.pyi", "health_event_pb2_grpc.py"):
        assert (work / name).read_text() == (CONNECTOR_DIR / name).read_text(), name


IMPORT_CHECK = """
import sys
sys.path.insert(0, sys.argv[1])
import grpc, google.protobuf
from nichealthd.surfaces.connector import health_event_pb2 as pb, health_event_pb2_grpc as pb_grpc
m = pb.HealthEvents(version=1, events=[pb.HealthEvent(agent="nic-health-monitor",
                                       recommendedAction=pb.REPLACE_VM)])
assert pb.HealthEvents.FromString(m.SerializeToString()) == m
assert pb_grpc.PlatformConnectorStub(grpc.insecure_channel("unix:/nonexistent"))
print(grpc.__version__, google.protobuf.__version__)
"""


def _import_with(python: str) -> str:
    """Import the stubs with another Python runtime (nothing else of the package loads)."""
    result = subprocess.run([python, "-c", IMPORT_CHECK, str(ROOT)], capture_output=True,
                            text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    return result.stdout.strip()


def test_stubs_import_on_debian_12_runtime() -> None:
    """Debian 12's python3-grpcio 1.51 / python3-protobuf 3.21 (apt), when installed."""
    python = "/usr/bin/python3"
    probe = subprocess.run([python, "-c", "import grpc, google.protobuf"], capture_output=True)
    if probe.returncode != 0:
        pytest.skip("Debian's python3-grpcio / python3-protobuf are not installed")
    versions = _import_with(python)
    assert versions.startswith("1.51"), versions


@pytest.mark.slow
def test_stubs_import_on_newest_pypi_runtime(tmp_path: Path) -> None:
    """The newest grpcio and protobuf from PyPI (needs the network; marked slow)."""
    env_dir = tmp_path / "venv"
    venv.create(env_dir)  # this pip installs into it: no pip of its own (1,700 files)
    python = str(env_dir / "bin" / "python")
    install = subprocess.run([sys.executable, "-m", "pip", "--python", python, "install",
                              "--quiet", "--no-compile", "--only-binary=:all:", "grpcio",
                              "protobuf"],
                             capture_output=True, text=True,
                             timeout=300, env={**os.environ, "PIP_DISABLE_PIP_VERSION_CHECK": "1"})
    if install.returncode != 0:
        pytest.skip(skipreasons.pip_reason("the newest grpcio and protobuf", install.stderr))
    versions = _import_with(python)
    grpc_version, protobuf_version = versions.split()
    print(f"newest PyPI runtime: grpcio {grpc_version}, protobuf {protobuf_version}")
    assert int(protobuf_version.split(".")[0]) >= 5, versions
