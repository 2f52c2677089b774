#!/bin/sh
# Build packaging/out/nichealthd_<version>_all.deb from the working tree with Debian's tools
# (dpkg-buildpackage, debhelper 13, dh-python/pybuild with pyproject) and lint it.
#   packaging/build-deb.sh [--no-lintian]
# Needs: debhelper dh-python pybuild-plugin-pyproject python3-all python3-setuptools
# dpkg-dev fakeroot lintian (.ci/system-deps.sh installs them). Runs from a git clone or
# from a release tarball.
set -eu

# pybuild must see Debian's python3, not a pyenv/venv one that happens to be first on PATH.
PATH=/usr/sbin:/usr/bin:/sbin:/bin
export PATH
unset PYTHONPATH VIRTUAL_ENV PYTHONHOME 2>/dev/null || true
export LC_ALL=C.UTF-8 SOURCE_DATE_EPOCH="${SOURCE_DATE_EPOCH:-1763780400}"

repo=$(cd "$(dirname "$0")/.." && pwd)
out="$repo/packaging/out"
lint=yes
[ "${1:-}" = "--no-lintian" ] && lint=no

version=$(python3 -c 'import sys, tomllib; print(tomllib.load(open(sys.argv[1], "rb"))["project"]["version"])' "$repo/pyproject.toml")
deb_version=$(dpkg-parsechangelog -l "$repo/packaging/deb/debian/changelog" -S Version)
if [ "$version" != "$deb_version" ]; then
    echo "build-deb: pyproject.toml version $version != debian/changelog $deb_version" >&2
    exit 1
fi

work=$(mktemp -d "${TMPDIR:-/tmp}/nichealthd-deb.XXXXXX")
trap 'rm -rf "$work"' EXIT
src="$work/nichealthd-$version"
"$repo/packaging/copy-source.sh" "$repo" "$src"
rm -rf "$src/debian"
# debian/ holds symlinks into the tree (unit, sysusers): copy it dereferenced.
cp -rL "$repo/packaging/deb/debian" "$src/debian"

(cd "$src" && dpkg-buildpackage -us -uc -b --no-sign) >"$work/build.log" 2>&1 || {
    tail -n 60 "$work/build.log" >&2
    echo "build-deb: dpkg-buildpackage failed (full log above)" >&2
    exit 1
}
mkdir -p "$out"
deb="nichealthd_${version}_all.deb"
cp "$work/$deb" "$out/$deb"
echo "build-deb: $out/$deb"

if [ "$lint" = yes ]; then
    # --fail-on warning: any error or warning fails the build. Overrides, each with its
    # reason, live in packaging/deb/debian/nichealthd.lintian-overrides.
    lintian --fail-on error,warning --display-info --tag-display-limit 0 "$out/$deb"
    echo "build-deb: lintian clean"
fi
