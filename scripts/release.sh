#!/usr/bin/env bash
# Release binaries of the skiplock CLI: linux and darwin, amd64 and arm64, static
# (CGO_ENABLED=0) and reproducible — the same commit and Go toolchain give the same
# bytes: built from the commit itself (git archive HEAD, never the working tree's
# uncommitted edits) with -trimpath, -buildvcs=false, and the version, commit and date
# stamped with -ldflags -X, the date being the commit's (never the clock's). Time zone
# data is compiled in (-tags timetzdata): the container image has no /usr/share/zoneinfo.
# Writes dist/skiplock_<version>_<os>_<arch> and dist/SHA256SUMS.
#
#   scripts/release.sh           build every target (make release)
#   scripts/release.sh --check   the same, then build linux/amd64 again in another
#                                directory with an empty build cache and require the
#                                same sha256; check the binaries are static and that
#                                the host's reports the stamp (CI)
#
# VERSION overrides the version (default: git describe --tags --always); TARGETS the
# targets (default: the four above). Uncommitted changes are not built: a warning
# says so.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH=/usr/local/go/bin:$PATH
check=0
case "${1:-}" in
  --check) check=1 ;;
  "") ;;
  *) echo "usage: $0 [--check]" >&2; exit 2 ;;
esac

targets=${TARGETS:-"linux/amd64 linux/arm64 darwin/amd64 darwin/arm64"}
version=${VERSION:-$(git describe --tags --always 2>/dev/null || echo dev)}
commit=$(git rev-parse HEAD)
date=$(TZ=UTC git log -1 --format=%cd --date=format-local:%Y-%m-%dT%H:%M:%SZ)
if [ -n "$(git status --porcelain --untracked-files=no)" ]; then
  echo "release: !!! the tree has uncommitted changes; they are not built (the binaries are of $commit)" >&2
fi
ldflags="-s -w -buildid= -X main.version=$version -X main.commit=$commit -X main.date=$date"

# export_commit <dir>: the commit's files ($commit, fixed when the script starts), and nothing else, in dir.
export_commit() {
  mkdir -p "$1"
  git archive --format=tar "$commit" | tar -x -C "$1"
}

# build <source dir> <os> <arch> <output>
build() {
  (cd "$1" && CGO_ENABLED=0 GOOS=$2 GOARCH=$3 GOFLAGS=-mod=readonly \
    go build -trimpath -buildvcs=false -tags timetzdata -ldflags "$ldflags" -o "$4" ./cmd/skiplock)
}

work=$(mktemp -d)
trap 'chmod -R u+w "$work" 2>/dev/null; rm -rf "$work"' EXIT
export_commit "$work/src"
rm -rf dist
mkdir -p dist
for t in $targets; do
  os=${t%/*} arch=${t#*/}
  start=$SECONDS
  build "$work/src" "$os" "$arch" "$PWD/dist/skiplock_${version}_${os}_${arch}"
  echo "release: dist/skiplock_${version}_${os}_${arch} ($((SECONDS - start))s)" >&2
done
(cd dist && sha256sum skiplock_* > SHA256SUMS)
cat dist/SHA256SUMS

[ $check = 1 ] || exit 0

# Reproducible: one target again, from an empty build cache (every package compiled
# anew, in another directory), must give the same bytes. One target is enough to
# catch a clock, a path or a random value reaching the binary; all four twice would
# double CI's few minutes.
export_commit "$work/again"
start=$SECONDS
GOCACHE="$work/cache" build "$work/again" linux amd64 "$work/skiplock"
first=$(sha256sum < "dist/skiplock_${version}_linux_amd64" | cut -d' ' -f1)
second=$(sha256sum < "$work/skiplock" | cut -d' ' -f1)
if [ "$first" != "$second" ]; then
  echo "release: NOT reproducible: linux/amd64 built twice: $first then $second" >&2
  exit 1
fi
echo "release: linux/amd64 rebuilt in another directory from an empty cache in $((SECONDS - start))s: same sha256 $first" >&2

# Static: no cgo, so no dynamic loader (an ELF program interpreter) is needed.
for t in $targets; do
  os=${t%/*} arch=${t#*/}
  go version -m "dist/skiplock_${version}_${os}_${arch}" | grep -q 'CGO_ENABLED=0' ||
    { echo "release: $t was not built with CGO_ENABLED=0" >&2; exit 1; }
done
if head -c 4 "dist/skiplock_${version}_linux_amd64" | grep -q ELF && grep -qa '/lib64/ld-linux' "dist/skiplock_${version}_linux_amd64"; then
  echo "release: linux/amd64 names a dynamic loader: not static" >&2
  exit 1
fi

# The stamp: the host's binary reports the version, the commit and the commit's date.
host="dist/skiplock_${version}_$(go env GOHOSTOS)_$(go env GOHOSTARCH)"
if [ -x "$host" ]; then
  line=$("$host" version)
  for want in "$version" "$commit" "$date"; do
    case "$line" in *"$want"*) ;; *) echo "release: '$host version' does not report $want: $line" >&2; exit 1 ;; esac
  done
  echo "release: $line" >&2
fi
(cd dist && sha256sum --quiet -c SHA256SUMS)
echo "release: ok" >&2
