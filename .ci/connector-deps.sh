#!/bin/sh
# Debian 12's own gRPC runtime (python3-grpcio 1.51 / python3-protobuf 3.21) for
# tests/connector/test_proto.py::test_stubs_import_on_debian_12_runtime (stubs made by protoc
# 3.21 import on old and new runtimes).
set -eu
apt-get install -y -qq --no-install-recommends python3-grpcio python3-protobuf >/dev/null
