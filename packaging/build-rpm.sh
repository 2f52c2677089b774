#!/bin/sh
# Build packaging/out/nichealthd-<version>-1.noarch.rpm from the working tree and lint it.
#   packaging/build-rpm.sh [--no-rpmlint]
# Works on Fedora/RHEL (with their macro packages) and on Debian (rpm, rpmlint,
# python3-build, python3-installer; .ci/system-deps.sh installs them). On Debian the
# build dependencies are not in an rpm database, so --nodeps is passed there.
set -eu

PATH=/usr/sbin:/usr/bin:/sbin:/bin
export PATH
unset PYTHONPATH VIRTUAL_ENV PYTHONHOME 2>/dev/null || true
export LC_ALL=C.UTF-8 SOURCE_DATE_EPOCH="${SOURCE_DATE_EPOCH:-1763780400}"

repo=$(cd "$(dirname "$0")/.." && pwd)
out="$repo/packaging/out"
spec="$repo/packaging/rpm/nichealthd.spec"
lint=yes
[ "${1:-}" = "--no-rpmlint" ] && lint=no

version=$(python3 -c 'import sys, tomllib; print(tomllib.load(open(sys.argv[1], "rb"))["project"]["version"])' "$repo/pyproject.toml" 2>/dev/null ||
    sed -n 's/^version = "\(.*\)"/\1/p' "$repo/pyproject.toml")
spec_version=$(sed -n 's/^Version: *//p' "$spec")
if [ "$version" != "$spec_version" ]; then
    echo "build-rpm: pyproject.toml version $version != spec Version $spec_version" >&2
    exit 1
fi

work=$(mktemp -d /tmp/nichealthd-rpm.XXXXXX)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/SOURCES" "$work/src/nichealthd-$version"
(cd "$repo" && git ls-files -z --cached --others --exclude-standard) |
    (cd "$repo" && xargs -0 cp --parents -P -t "$work/src/nichealthd-$version" 2>/dev/null || true)
rm -rf "$work/src/nichealthd-$version/packaging/out"
tar -C "$work/src" --sort=name --owner=0 --group=0 --numeric-owner --mtime="@$SOURCE_DATE_EPOCH" \
    -czf "$work/SOURCES/nichealthd-$version.tar.gz" "nichealthd-$version"

nodeps=""
[ -f /etc/debian_version ] && nodeps="--nodeps"
rpmbuild -bb $nodeps --define "_topdir $work" --define "_build_id_links none" \
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
