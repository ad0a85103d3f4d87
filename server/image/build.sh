#!/usr/bin/env bash
# Builds the server's OCI image from a built binary, offline: stages the context (stage.sh) and
# runs `podman build` (Debian's podman; buildah when podman is missing) on the Containerfile,
# FROM scratch, pulling nothing.
#
#   server/image/build.sh BINARY CONTEXT TAG
#
# e.g. server/image/build.sh build/gcc/server/ratelimit_server build/gcc/image localhost/ratelimit:dev
set -euo pipefail
if [[ $# -ne 3 ]]; then
  echo "usage: build.sh BINARY CONTEXT TAG" >&2
  exit 2
fi
binary=$1
context=$2
tag=$3
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
bash "$here/stage.sh" "$binary" "$context"
if command -v podman >/dev/null; then
  builder=(podman build)
elif command -v buildah >/dev/null; then
  builder=(buildah build)
else
  echo "build.sh: neither podman nor buildah is installed (Debian: podman)" >&2
  exit 1
fi
# --pull=never: FROM scratch needs no registry; --network=none: no step may reach one.
"${builder[@]}" --pull=never --network=none -q -t "$tag" -f "$context/Containerfile" "$context"
echo "build.sh: built $tag with ${builder[*]}"
