#!/bin/sh
# Build the rpm of one target, lint it, and print its path as the last line of stdout:
#   packaging/build-rpm.sh [--target el9|el10|fedora42] [--no-rpmlint]
#   -> packaging/out/nichealthd-<version>-1.el9.x86_64.rpm (default target el9; rhel9 and
#      fedora are aliases of el9 and fedora42)
# packaging/targets.toml says what the target's archive holds (RHEL: BaseOS and AppStream,
# never EPEL): the rpm requires those libraries and carries the others, pinned, in
# /usr/lib/nichealthd/vendor (BUNDLED, Provides: bundled(python3dist(NAME)) = VERSION); such
# an rpm is built for x86_64 rather than noarch. The target also decides the layout: its
# Python's site-packages (/usr/lib/python3.9/site-packages for el9) and its dist tag.
# Bytecode is compiled by the target's Python version when this machine has it
# (/usr/bin/python3.X or pyenv's), else none is shipped. Carried wheels are fetched with pip
# (cached in $NICHEALTHD_WHEEL_CACHE when set).
# Works on Fedora/RHEL (with their macro packages) and on Debian (rpm, rpmlint,
# python3-build, python3-installer, python3-pip; .ci/system-deps.sh installs them). On Debian
# the build dependencies are not in an rpm database, so --nodeps is passed there. Runs from a
# git clone or from a release tarball.
set -eu

PATH=/usr/sbin:/usr/bin:/sbin:/bin
export PATH
unset PYTHONPATH VIRTUAL_ENV PYTHONHOME 2>/dev/null || true
export LC_ALL=C.UTF-8 SOURCE_DATE_EPOCH="${SOURCE_DATE_EPOCH:-1763780400}"

usage() { echo "usage: $0 [--target el9|el10|fedora42] [--no-rpmlint]" >&2; exit 2; }
repo=$(cd "$(dirname "$0")/.." && pwd)
out="$repo/packaging/out"
spec="$repo/packaging/rpm/nichealthd.spec"
lint=yes
target=el9
while [ $# -gt 0 ]; do
    case $1 in
    --no-rpmlint) lint=no ;;
    --target) [ $# -ge 2 ] || usage; target=$2; shift ;;
    --target=*) target=${1#--target=} ;;
    *) usage ;;
    esac
    shift
done
# target family distname python dist carries depends recommends bundled licence interpreter
# unmet
described=$(python3 "$repo/packaging/targets.py" shell "$target") || exit 2
eval "$described"
if [ -n "$unmet" ]; then  # one line: what to install (the Debian 12 tools are not enough)
    echo "build-rpm: $unmet" >&2
    exit 2
fi
if [ "$family" != rpm ]; then
    echo "build-rpm: $target is a deb target (packaging/build-deb.sh --target $target)" >&2
    exit 2
fi
case $target in
el*) distmacro="rhel ${target#el}" ;;
fedora*) distmacro="fedora ${target#fedora}" ;;
esac
sitelib="/usr/lib/python$python/site-packages"

version=$(python3 -c 'import sys, tomllib; print(tomllib.load(open(sys.argv[1], "rb"))["project"]["version"])' "$repo/pyproject.toml" 2>/dev/null ||
    sed -n 's/^version = "\(.*\)"/\1/p' "$repo/pyproject.toml")
spec_version=$(sed -n 's/^Version: *//p' "$spec")
if [ "$version" != "$spec_version" ]; then
    echo "build-rpm: pyproject.toml version $version != spec Version $spec_version" >&2
    exit 1
fi

# The target's interpreter, for bytecode only (the wheel is pure Python).
pycompile=$interpreter
[ -n "$pycompile" ] || echo "build-rpm: no python$python here: the rpm ships no bytecode" >&2

work=$(mktemp -d "${TMPDIR:-/tmp}/nichealthd-rpm.XXXXXX")
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/SOURCES" "$work/carried"
"$repo/packaging/copy-source.sh" "$repo" "$work/src/nichealthd-$version"
tar -C "$work/src" --sort=name --owner=0 --group=0 --numeric-owner --mtime="@$SOURCE_DATE_EPOCH" \
    -czf "$work/SOURCES/nichealthd-$version.tar.gz" "nichealthd-$version"
# Source1: BUNDLED, and the carried libraries with their marker (packaging/targets.py).
python3 "$repo/packaging/targets.py" carry "$target" "$work/carried" --sitelib "$sitelib" >&2
tar -C "$work/carried" --sort=name --owner=0 --group=0 --numeric-owner \
    --mtime="@$SOURCE_DATE_EPOCH" -czf "$work/SOURCES/nichealthd-$version-carried.tar.gz" .

set -- --define "nichealthd_license $licence"
[ -z "$depends" ] || set -- "$@" --define "nichealthd_requires $depends"
[ -z "$recommends" ] || set -- "$@" --define "nichealthd_recommends $recommends"
if [ -n "$carries" ]; then
    set -- "$@" --define "nichealthd_carries 1" --define "nichealthd_bundled $bundled"
fi
if [ -f /etc/debian_version ]; then
    # Debian's rpm has no Python or dist macros: the target's are defined here.
    set -- "$@" --nodeps --define "python3_version $python" \
        --define "python3_sitelib $sitelib" \
        --define "dist $dist" --define "$distmacro" --define "__python3 /usr/bin/python3"
fi
# Only when there is one: rpm 4.18 rejects a macro defined empty (the spec's default is %nil).
[ -z "$pycompile" ] || set -- "$@" --define "nichealthd_pycompile $pycompile"
rpmbuild -bb "$@" --define "_topdir $work" --define "_build_id_links none" \
    "$spec" >"$work/build.log" 2>&1 || {
    tail -n 60 "$work/build.log" >&2
    echo "build-rpm: rpmbuild failed" >&2
    exit 1
}
rpm_file=$(find "$work/RPMS" -name "nichealthd-$version-*.rpm" | head -n 1)

if [ "$lint" = yes ]; then
    # Configured in packaging/rpm/rpmlint.toml, each filter with its reason. rpmlint exits
    # non-zero on errors; warnings are made fatal here too.
    rpmlint -c "$repo/packaging/rpm/rpmlint.toml" "$rpm_file" "$spec" >"$work/rpmlint.log" 2>&1 || true
    cat "$work/rpmlint.log" >&2
    if ! grep -q ' 0 errors, 0 warnings' "$work/rpmlint.log"; then
        echo "build-rpm: rpmlint is not clean" >&2
        exit 1
    fi
    echo "build-rpm: rpmlint clean"
fi
mkdir -p "$out"
cp "$rpm_file" "$out/"
echo "$out/$(basename "$rpm_file")"
