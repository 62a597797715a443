#!/usr/bin/env bash
# install.sh: installs the built ljperf (scripts/build.sh) into $PREFIX/bin, default /usr/local,
# so that the README's `ljperf ...` commands work from any directory.
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
prefix=${PREFIX:-/usr/local}
[ -x "$repo/build/ljperf" ] || { echo "install.sh: $repo/build/ljperf is missing: run scripts/build.sh first" >&2; exit 1; }
cmake --install "$repo/build" --prefix "$prefix" >/dev/null
echo "install: $prefix/bin/ljperf ($("$prefix/bin/ljperf" --version 2>/dev/null | head -1 || echo installed))"
