#!/bin/sh
# Copy the project's source files from REPO into DEST (created if needed), for the package
# builds. From a git clone: the files git knows about (committed, staged or new and not
# ignored), as they are in the working tree. From a release tarball (no .git, e.g. `git
# archive` output): every file, without build output and caches.
#   packaging/copy-source.sh REPO DEST
set -eu
repo=$1
dest=$2
mkdir -p "$dest"
top=$(git -C "$repo" rev-parse --show-toplevel 2>/dev/null || true)
if [ -n "$top" ] && [ "$(cd "$top" && pwd -P)" = "$(cd "$repo" && pwd -P)" ]; then
    (cd "$repo" && git ls-files -z --cached --others --exclude-standard) |
        (cd "$repo" && xargs -0 cp --parents -P -t "$dest" 2>/dev/null || true)
else
    (cd "$repo" && find . \( -name .git -o -name __pycache__ -o -name '*.egg-info' \
        -o -name .mypy_cache -o -name .pytest_cache -o -name .ruff_cache \
        -o -path ./packaging/out -o -path ./build -o -path ./dist \) -prune \
        -o \( -type f -o -type l \) -print0) |
        (cd "$repo" && xargs -0 cp --parents -P -t "$dest")
fi
rm -rf "$dest/packaging/out"
