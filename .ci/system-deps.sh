#!/bin/sh
# Install the Debian packages the tests need (systemd tools, dbus, packaging and lint tools,
# the real-systemd harness; kernel log: systemd-journal-remote writes the real journal files of the
# kernel-log tests, libsystemd-dev/pkg-config/gcc/python3-dev build the journal extra's
# systemd-python in the venv, python3-systemd is what the packages recommend) and prebuild the
# cached Debian 12 and 13 rootfs trees of tests/e2e (the newcomer ones too).
# Called by .ci/run; safe to run again (apt-get is idempotent, the rootfs is cached under
# /var/tmp/nichealthd-rootfs{,-trixie} and rebuilt only when its package list changes).
# Usage: .ci/system-deps.sh [--no-rootfs]
set -eu

export DEBIAN_FRONTEND=noninteractive
PATH=/usr/sbin:/usr/bin:/sbin:/bin
export PATH
here=$(cd "$(dirname "$0")/.." && pwd)

if [ "$(id -u)" != 0 ]; then
    echo "system-deps: not root, skipping apt installs" >&2
    exit 0
fi

# tests/test_completions.py: zsh loads nichealthctl's zsh completion.
# tests/packaging: python3-pip fetches the wheels a package carries (gcc and libsystemd-dev
# build systemd-python's from its sdist), binutils strips them, cpio unpacks the rpms.
packages="
    systemd systemd-container debootstrap util-linux dbus man-db groff-base
    debhelper dh-python pybuild-plugin-pyproject python3-all python3-setuptools
    python3-wheel python3-build python3-installer dpkg-dev fakeroot lintian
    rpm rpmlint protobuf-compiler protobuf-compiler-grpc
    python3-pip cpio binutils
    systemd-journal-remote python3-systemd libsystemd-dev pkg-config gcc python3-dev
    zsh
"
missing=""
for p in $packages; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing="$missing $p"
done
if [ -n "$missing" ]; then
    echo "system-deps: installing$missing"
    apt-get update -qq
    # shellcheck disable=SC2086
    apt-get install -y -qq --no-install-recommends $missing >/dev/null
fi

if [ "${1:-}" != "--no-rootfs" ]; then
    start=$(date +%s)
    /usr/bin/python3 "$here/tests/e2e/nspawn.py" build base deps trixie trixie-build \
        newcomer-bookworm newcomer-trixie
    echo "system-deps: e2e rootfs ready in $(( $(date +%s) - start ))s"
fi
