#!/bin/sh
# Regenerate health_event_pb2.py (+ .pyi for mypy) and health_event_pb2_grpc.py from
# health_event.proto.
#
# Why this exact generator: stubs made by a new grpcio-tools import
# google.protobuf.runtime_version and fail on Debian 12's python3-protobuf 3.21 /
# python3-grpcio 1.51. Stubs made by grpcio-tools 1.51.3 (protoc 3.21) import on those AND on
# current PyPI releases (REFERENCE §1; tests/connector/test_proto.py checks both). The stubs are
# committed so that neither the build nor the host needs a protobuf compiler.
#
# Usage: nichealthd/connector/regenerate.sh [PYTHON]
#   PYTHON must have grpcio-tools==1.51.3; without it a throwaway venv is made in a temp dir.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
python=${1:-python3}
tmp=""
if ! "$python" -c 'import grpc_tools, sys; from importlib.metadata import version; sys.exit(version("grpcio-tools") != "1.51.3")' 2>/dev/null; then
    tmp=$(mktemp -d)
    trap 'rm -rf "$tmp"' EXIT
    "$python" -m venv "$tmp/venv"
    "$tmp/venv/bin/pip" install --quiet "grpcio-tools==1.51.3"
    python="$tmp/venv/bin/python"
fi
cd "$here"
"$python" -m grpc_tools.protoc -I. --python_out=. --pyi_out=. --grpc_python_out=. health_event.proto
# The generated _grpc module imports its sibling as a top-level module; make it package-relative.
sed -i 's/^import health_event_pb2 as /from . import health_event_pb2 as /' health_event_pb2_grpc.py
echo "regenerated $here/health_event_pb2.py and health_event_pb2_grpc.py"
