#!/bin/sh
# Build packaging/out/nichealthd-<version>-1.<dist>.noarch.rpm for a target distribution and
# lint it.
#   packaging/build-rpm.sh [--target rhel9|fedora42|fedora43|fedora] [--no-rpmlint]
# The target (default rhel9) decides the layout: its Python's site-packages
# (/usr/lib/python3.9/site-packages for RHEL 9), its dist tag, and its requirements
# (packaging/rpm/README.md). Bytecode is compiled by the target's Python version when this
# machine has it (/usr/bin/python3.X or pyenv's), else none is shipped.
# Works on Fedora/RHEL (with their macro packages) and on Debian (rpm, rpmlint,
# python3-build, python3-installer; .ci/system-deps.sh installs them). On Debian the build
# dependencies are not in an rpm database, so --nodeps is passed there. Runs from a git
# clone or from a release tarball.
set -eu

pyenv_root=${PYENV_ROOT:-${HOME:-/root}/.pyenv}
PATH=/usr/sbin:/usr/bin:/sbin:/bin
export PATH
unset PYTHONPATH VIRTUAL_ENV PYTHONHOME 2>/dev/null || true
export LC_ALL=C.UTF-8 SOURCE_DATE_EPOCH="${SOURCE_DATE_EPOCH:-1763780400}"

usage() { echo "usage: $0 [--target rhel9|fedora42|fedora43|fedora] [--no-rpmlint]" >&2; exit 2; }
repo=$(cd "$(dirname "$0")/.." && pwd)
out="$repo/packaging/out"
spec="$repo/packaging/rpm/nichealthd.spec"
lint=yes
target=rhel9
while [ $# -gt 0 ]; do
    case $1 in
    --no-rpmlint) lint=no ;;
    --target) [ $# -ge 2 ] || usage; target=$2; shift ;;
    --target=*) target=${1#--target=} ;;
    *) usage ;;
    esac
    shift
done
# target -> Python version of its python3, dist tag, distribution macro
case $target in
rhel9) pyver=3.9 dist=.el9 distmacro="rhel 9" ;;
fedora42 | fedora) pyver=3.13 dist=.fc42 distmacro="fedora 42" ;;
fedora43) pyver=3.14 dist=.fc43 distmacro="fedora 43" ;;
*) echo "build-rpm: unknown target '$target' (rhel9, fedora42, fedora43)" >&2; exit 2 ;;
esac

version=$(python3 -c 'import sys, tomllib; print(tomllib.load(open(sys.argv[1], "rb"))["project"]["version"])' "$repo/pyproject.toml" 2>/dev/null ||
    sed -n 's/^version = "\(.*\)"/\1/p' "$repo/pyproject.toml")
spec_version=$(sed -n 's/^Version: *//p' "$spec")
if [ "$version" != "$spec_version" ]; then
    echo "build-rpm: pyproject.toml version $version != spec Version $spec_version" >&2
    exit 1
fi

# The target's interpreter, for bytecode only (the wheel is pure Python).
pycompile=""
for py in "/usr/bin/python$pyver" "$pyenv_root"/versions/"$pyver".*/bin/"python$pyver"; do
    if [ -x "$py" ]; then pycompile=$py; fi
done
[ -n "$pycompile" ] || echo "build-rpm: no python$pyver here: the rpm ships no bytecode"

work=$(mktemp -d "${TMPDIR:-/tmp}/nichealthd-rpm.XXXXXX")
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/SOURCES"
"$repo/packaging/copy-source.sh" "$repo" "$work/src/nichealthd-$version"
tar -C "$work/src" --sort=name --owner=0 --group=0 --numeric-owner --mtime="@$SOURCE_DATE_EPOCH" \
    -czf "$work/SOURCES/nichealthd-$version.tar.gz" "nichealthd-$version"

set --
if [ -f /etc/debian_version ]; then
    # Debian's rpm has no Python or dist macros: the target's are defined here.
    set -- --nodeps --define "python3_version $pyver" \
        --define "python3_sitelib /usr/lib/python$pyver/site-packages" \
        --define "dist $dist" --define "$distmacro" --define "__python3 /usr/bin/python3" \
        --define "nichealthd_pycompile $pycompile"
fi
rpmbuild -bb "$@" --define "_topdir $work" --define "_build_id_links none" \
    "$spec" >"$work/build.log" 2>&1 || {
    tail -n 60 "$work/build.log" >&2
    echo "build-rpm: rpmbuild failed" >&2
    exit 1
}
mkdir -p "$out"
rpm_file=$(find "$work/RPMS" -name "nichealthd-$version-*.noarch.rpm" | head -n 1)
cp "$rpm_file" "$out/"
echo "build-rpm: $out/$(basename "$rpm_file")"

if [ "$lint" = yes ]; then
    # Configured in packaging/rpm/rpmlint.toml, each filter with its reason. rpmlint exits
    # non-zero on errors; warnings are made fatal here too.
    rpmlint -c "$repo/packaging/rpm/rpmlint.toml" "$out/$(basename "$rpm_file")" "$spec" |
        tee "$work/rpmlint.log"
    if ! grep -q ' 0 errors, 0 warnings' "$work/rpmlint.log"; then
        echo "build-rpm: rpmlint is not clean" >&2
        exit 1
    fi
    echo "build-rpm: rpmlint clean"
fi
