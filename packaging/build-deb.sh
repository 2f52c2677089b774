#!/bin/sh
# Build the .deb of one target with Debian's tools (dpkg-buildpackage, debhelper 13,
# dh-python/pybuild with pyproject), lint it, and print its path as the last line of stdout:
#   packaging/build-deb.sh [--target debian12|debian13|ubuntu2204|ubuntu2404] [--no-lintian]
#   -> packaging/out/nichealthd_<version>+deb12_all.deb (default target debian12)
# packaging/targets.toml says what the target's archive holds: the package depends on those
# libraries and carries the others, pinned, in /usr/lib/nichealthd/vendor (listed in
# /usr/share/doc/nichealthd/BUNDLED); such a package is built for the target's CPython minor
# and architecture (packaging/README.md). Carried wheels are fetched with pip (cached in
# $NICHEALTHD_WHEEL_CACHE when set).
# Needs: debhelper dh-python pybuild-plugin-pyproject python3-all python3-setuptools
# python3-pip dpkg-dev fakeroot lintian (.ci/system-deps.sh installs them). Runs from a git
# clone or from a release tarball.
set -eu

# pybuild must see Debian's python3, not a pyenv/venv one that happens to be first on PATH.
PATH=/usr/sbin:/usr/bin:/sbin:/bin
export PATH
unset PYTHONPATH VIRTUAL_ENV PYTHONHOME 2>/dev/null || true
export LC_ALL=C.UTF-8 SOURCE_DATE_EPOCH="${SOURCE_DATE_EPOCH:-1763780400}"

usage() {
    echo "usage: $0 [--target debian12|debian13|ubuntu2204|ubuntu2404] [--no-lintian]" >&2
    exit 2
}
repo=$(cd "$(dirname "$0")/.." && pwd)
out="$repo/packaging/out"
lint=yes
target=debian12
while [ $# -gt 0 ]; do
    case $1 in
    --no-lintian) lint=no ;;
    --target) [ $# -ge 2 ] || usage; target=$2; shift ;;
    --target=*) target=${1#--target=} ;;
    *) usage ;;
    esac
    shift
done
# target family distname python suite version_suffix carries depends recommends ...
described=$(python3 "$repo/packaging/targets.py" shell "$target") || exit 2
eval "$described"
if [ -n "$unmet" ]; then  # one line: what to install (the Debian 12 tools are not enough)
    echo "build-deb: $unmet" >&2
    exit 2
fi
if [ "$family" != deb ]; then
    echo "build-deb: $target is an rpm target (packaging/build-rpm.sh --target $target)" >&2
    exit 2
fi

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

# The target's own version (nichealthd_0.1.0+ubuntu22.04) and suite, on top of the changelog.
full_version="$version$version_suffix"
maintainer=$(dpkg-parsechangelog -l "$repo/packaging/deb/debian/changelog" -S Maintainer)
# A minute after the release's entry: lintian wants each entry newer than the one below.
date=$(date -u -R -d "@$(( $(dpkg-parsechangelog -l "$repo/packaging/deb/debian/changelog" \
    -S Timestamp) + 60 ))")
{
    printf 'nichealthd (%s) %s; urgency=medium\n\n' "$full_version" "$suite"
    printf '  * Built for %s (packaging/targets.toml).\n\n' "$distname"
    printf ' -- %s  %s\n\n' "$maintainer" "$date"
    cat "$repo/packaging/deb/debian/changelog"
} >"$src/debian/changelog"

# The target's dependencies (debian/rules adds them to the package's substvars), and what
# it carries: BUNDLED always, the vendor directory and its marker when it carries any.
printf 'nichealthd:Depends=%s\nnichealthd:Recommends=%s\n' "$depends" "$recommends" \
    >"$src/debian/nichealthd-target.substvars"
python3 "$repo/packaging/targets.py" carry "$target" "$src/debian/carried" \
    --sitelib /usr/lib/python3/dist-packages >&2
arch=all
if [ -n "$carries" ]; then
    # Binary wheels for x86_64 and one CPython minor: the scripts name that interpreter.
    arch=amd64
    sed -i 's/^Architecture: all$/Architecture: amd64/' "$src/debian/control"
    cp "$repo/packaging/deb/carried.lintian-overrides" "$src/debian/nichealthd.lintian-overrides"
    printf 'NICHEALTHD_PYTHON = %s\n' "$python" >"$src/debian/nichealthd-target.mk"
fi

(cd "$src" && dpkg-buildpackage -us -uc -b --no-sign) >"$work/build.log" 2>&1 || {
    tail -n 60 "$work/build.log" >&2
    echo "build-deb: dpkg-buildpackage failed (full log above)" >&2
    exit 1
}
deb="nichealthd_${full_version}_${arch}.deb"

if [ "$lint" = yes ]; then
    # --fail-on warning: any error or warning fails the build. Overrides, each with its
    # reason, live in packaging/deb/debian/nichealthd.lintian-overrides.
    profile=debian
    case $target in ubuntu*) profile=ubuntu ;; esac
    lintian --profile "$profile" --fail-on error,warning --display-info \
        --tag-display-limit 0 "$work/$deb" >&2
    echo "build-deb: lintian clean ($profile profile)"
fi
mkdir -p "$out"
cp "$work/$deb" "$out/$deb"
echo "$out/$deb"
