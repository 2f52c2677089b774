#!/bin/sh
# Regenerate the wire module's descriptor (the `_SERIALIZED_FILE = ...` line of
# health_event_pb2.py), health_event_pb2.pyi (for mypy) and health_event_pb2_grpc.py from
# health_event.proto.
#
# Why not protoc's health_event_pb2.py itself: it needs google.protobuf.internal.builder
# (protobuf >= 3.20), which RHEL 9's and Fedora 42's python3-protobuf lack. Our
# health_event_pb2.py builds the classes at import time from protoc's serialized
# FileDescriptorProto (see its docstring); this script puts protoc's bytes there.
#
# Why this exact generator: gRPC stubs made by a new grpcio-tools import
# google.protobuf.runtime_version and use grpcio >= 1.62 APIs, which fail on Debian 12's
# python3-protobuf 3.21 / python3-grpcio 1.51 and EPEL 9's python3-grpcio 1.46. Stubs made by
# grpcio-tools 1.51.3 (protoc 3.21) work on those AND on current PyPI releases
# (tests/connector/test_proto.py and test_proto_runtimes.py check that). The outputs are
# committed so that neither the build nor the host needs a protobuf compiler.
#
# Usage: nichealthd/surfaces/connector/regenerate.sh [PYTHON]
#   PYTHON must have grpcio-tools==1.51.3; without it a throwaway venv is made in a temp dir,
#   from the wheels of the registry (CPython 3.7 to 3.11; never a build from source).
set -eu
here=$(cd "$(dirname "$0")" && pwd)
python=${1:-python3}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
if ! "$python" -c 'import grpc_tools, sys; from importlib.metadata import version; sys.exit(version("grpcio-tools") != "1.51.3")' 2>/dev/null; then
    "$python" -m venv "$tmp/venv"
    "$tmp/venv/bin/pip" install --quiet --only-binary=:all: "grpcio-tools==1.51.3"
    python="$tmp/venv/bin/python"
fi
mkdir "$tmp/out"
cd "$here"
"$python" -m grpc_tools.protoc -I. --python_out="$tmp/out" --pyi_out=. --grpc_python_out=. \
    health_event.proto
# The generated _grpc module imports its sibling as a top-level module; make it package-relative.
sed -i 's/^import health_event_pb2 as /from . import health_event_pb2 as /' health_event_pb2_grpc.py
# Take the serialized descriptor out of protoc's module and put it in ours, on its one line.
"$python" - "$tmp/out/health_event_pb2.py" health_event_pb2.py <<'PY'
import ast
import sys

generated, ours = sys.argv[1], sys.argv[2]
data = [node.args[0].value for node in ast.walk(ast.parse(open(generated).read()))
        if isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "AddSerializedFile"]
if len(data) != 1 or not isinstance(data[0], bytes):
    sys.exit(f"regenerate.sh: no serialized descriptor found in protoc's {generated}")
lines = open(ours).read().splitlines(keepends=True)
marked = [i for i, line in enumerate(lines) if line.startswith("_SERIALIZED_FILE = ")]
if len(marked) != 1:
    sys.exit(f"regenerate.sh: {ours} needs exactly one '_SERIALIZED_FILE = ' line")
lines[marked[0]] = f"_SERIALIZED_FILE = {data[0]!r}\n"
open(ours, "w").write("".join(lines))
PY
echo "regenerated $here/health_event_pb2.py (descriptor), .pyi and health_event_pb2_grpc.py"
