#!/usr/bin/env bash
# Builds the container image (Containerfile: FROM scratch, the static CLI, user 65532)
# from dist/'s linux binary (make release) with podman, then checks it without running
# it — this CI's sandbox refuses to run containers (crun and runc cannot set rlimits
# there): the entrypoint, the numeric user, the OCI labels, the size, and that the one
# file in the image is byte for byte the binary of dist/ (read through `podman image
# mount`, which needs root, as CI is).
#
#   scripts/image.sh                 build and check localhost/skiplock:<version>
#   ARCH=arm64 scripts/image.sh      from dist/'s linux/arm64 binary
#
# Storage: PODMAN_STORAGE_DRIVER (default vfs, which works everywhere, overlay mounts
# included); isolation chroot (no user namespaces needed). The image's creation time
# is the commit's, so the same binary gives the same image id.
set -euo pipefail
cd "$(dirname "$0")/.."
arch=${ARCH:-amd64}
shopt -s nullglob
bins=(dist/skiplock_*_linux_"$arch")
if [ ${#bins[@]} -ne 1 ]; then
  echo "image: want exactly one dist/skiplock_*_linux_$arch (run make release first), found ${#bins[@]}" >&2
  exit 1
fi
bin=${bins[0]}
version=${bin#dist/skiplock_}
version=${version%_linux_"$arch"}
commit=$(git rev-parse HEAD)
created=$(TZ=UTC git log -1 --format=%cd --date=format-local:%Y-%m-%dT%H:%M:%SZ)
epoch=$(git log -1 --format=%ct)
tag=localhost/skiplock:$version
podman=(podman --storage-driver "${PODMAN_STORAGE_DRIVER:-vfs}")

ctx=$(mktemp -d)
trap 'rm -rf "$ctx"' EXIT
cp "$bin" "$ctx/skiplock"
start=$SECONDS
"${podman[@]}" build --quiet --isolation chroot --platform "linux/$arch" --timestamp "$epoch" \
  --build-arg VERSION="$version" --build-arg REVISION="$commit" --build-arg CREATED="$created" \
  -f Containerfile -t "$tag" "$ctx" >/dev/null
echo "image: built $tag in $((SECONDS - start))s" >&2

fail=0
check() { # check <what> <got> <want>
  if [ "$2" != "$3" ]; then
    echo "image: $1 is '$2', want '$3'" >&2
    fail=1
  fi
}
inspect() { "${podman[@]}" image inspect --format "$1" "$tag"; }
check "the entrypoint" "$(inspect '{{json .Config.Entrypoint}}')" '["/usr/local/bin/skiplock"]'
check "the user" "$(inspect '{{.Config.User}}')" "65532:65532"
check "the architecture" "$(inspect '{{.Architecture}}')" "$arch"
check "the label version" "$(inspect '{{index .Labels "org.opencontainers.image.version"}}')" "$version"
check "the label revision" "$(inspect '{{index .Labels "org.opencontainers.image.revision"}}')" "$commit"
check "the label created" "$(inspect '{{index .Labels "org.opencontainers.image.created"}}')" "$created"
check "the label source" "$(inspect '{{index .Labels "org.opencontainers.image.source"}}')" "https://github.com/skiplock/skiplock"
check "the layer count" "$(inspect '{{len .RootFS.Layers}}')" "1"
size=$(inspect '{{.Size}}')
binsize=$(stat -c %s "$bin")
if [ "$size" -gt $((binsize + 1048576)) ]; then
  echo "image: $size bytes, more than the binary ($binsize) and 1 MiB" >&2
  fail=1
fi

# The one file in the image is the binary of dist/, executable and not writable by
# the image's user.
root=$("${podman[@]}" image mount "$tag")
files=$(cd "$root" && find . -type f -o -type l | sort | tr '\n' ' ')
check "the image's files" "$files" "./usr/local/bin/skiplock "
check "the binary's sha256" "$(sha256sum < "$root/usr/local/bin/skiplock" | cut -d' ' -f1)" "$(sha256sum < "$bin" | cut -d' ' -f1)"
check "the binary's owner and mode" "$(stat -c '%u:%g %a' "$root/usr/local/bin/skiplock")" "0:0 555"
"${podman[@]}" image unmount "$tag" >/dev/null

if [ $fail = 1 ]; then
  exit 1
fi
echo "image: ok: $tag, $size bytes, user 65532:65532, entrypoint /usr/local/bin/skiplock, id $(inspect '{{.Id}}' | cut -c1-12); not run (this sandbox cannot run containers)" >&2
