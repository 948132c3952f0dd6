#!/usr/bin/env bash
# Builds acemq-flow's two container images with ko, without a Docker daemon
# and without a registry: the runtime (the static acemq-flow binary) and the
# plugin image (the example plugins, installed by an init container; see
# deploy/README.md). For each NAME, acemq-flow and acemq-flow-plugins, writes
#   $IMAGE_OUT/NAME/       an OCI image layout
#   $IMAGE_OUT/NAME.tar    the image as a tarball (docker load, podman load,
#                          crane push, skopeo copy docker-archive:…)
# IMAGE_OUT is bin/image by default. Other settings:
#   IMAGE_REPO   the repository the images are named in (ghcr.io/acemq)
#   IMAGE_TAG    their tag (the version below)
#   IMAGE_BASE   the base image; by default the one deploy/imagebase builds
#                here from the machine's CA bundle and serves to ko from a
#                registry on 127.0.0.1, as no registry may be reachable
#   IMAGE_PLUGINS  the example plugins to put in the plugin image
# Installs ko (google/ko v0.19.1) into $(go env GOPATH)/bin when missing;
# `image.sh install-ko` does only that (make image-test).
set -euo pipefail
cd "$(dirname "$0")/.."

say() { printf 'image: %s\n' "$*" >&2; }

KO_VERSION=v0.19.1
GOBIN_DIR="$(go env GOPATH)/bin"
export PATH="$GOBIN_DIR:$PATH"
if ! command -v ko >/dev/null 2>&1 || [ "$(ko version 2>/dev/null)" != "$KO_VERSION" ]; then
  say "installing ko $KO_VERSION into $GOBIN_DIR"
  GOBIN="$GOBIN_DIR" go install "github.com/google/ko@$KO_VERSION"
fi
[ "${1:-}" = install-ko ] && exit 0

OUT="${IMAGE_OUT:-bin/image}"
REPO="${IMAGE_REPO:-ghcr.io/acemq}"
PLUGINS="${IMAGE_PLUGINS:-orders payments shipping stock}"
REVISION="$(git rev-parse HEAD 2>/dev/null || echo unknown)"
VERSION="${IMAGE_VERSION:-$(git describe --tags --always --dirty 2>/dev/null || echo dev)}"
TAG="${IMAGE_TAG:-$VERSION}"
# The images' times are the commit's, so that a rebuild of the same commit
# gives the same digests.
SOURCE_DATE_EPOCH="${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct 2>/dev/null || echo 0)}"
export SOURCE_DATE_EPOCH KO_DATA_DATE_EPOCH="$SOURCE_DATE_EPOCH"

work="$(mktemp -d)"
base_pid=
cleanup() {
  if [ -n "$base_pid" ]; then kill "$base_pid" 2>/dev/null || true; wait "$base_pid" 2>/dev/null || true; fi
  rm -rf "$work" deploy/acemq-flow-plugins/kodata
}
trap cleanup EXIT

if [ -n "${IMAGE_BASE:-}" ]; then
  export KO_DEFAULTBASEIMAGE="$IMAGE_BASE"
else
  go build -o "$work/imagebase" ./deploy/imagebase
  "$work/imagebase" --addr-file "$work/addr" &
  base_pid=$!
  for _ in $(seq 1 100); do [ -s "$work/addr" ] && break; kill -0 "$base_pid" 2>/dev/null || break; sleep 0.1; done
  [ -s "$work/addr" ] || { say "the base image registry did not start (deploy/imagebase)"; exit 1; }
  export KO_DEFAULTBASEIMAGE="$(cat "$work/addr")/acemq/base:static-nonroot"
fi
say "base image $KO_DEFAULTBASEIMAGE"

# The plugin image's kodata: each example plugin, static, for the image's platform.
rm -rf deploy/acemq-flow-plugins/kodata
mkdir -p deploy/acemq-flow-plugins/kodata
for p in $PLUGINS; do
  [ -f "examples/plugins/$p/main.go" ] || { say "examples/plugins/$p is not a Go plugin; IMAGE_PLUGINS names those under examples/plugins"; exit 1; }
  CGO_ENABLED=0 go build -trimpath -buildvcs=false -ldflags='-s -w' -o "deploy/acemq-flow-plugins/kodata/$p" "./examples/plugins/$p"
done

mkdir -p "$OUT"
# build_image NAME PACKAGE DESCRIPTION (no comma: ko splits labels at commas):
# ko builds PACKAGE as $REPO/NAME:$TAG
# into $OUT/NAME (an OCI layout) and $OUT/NAME.tar.
build_image() {
  rm -rf "${OUT:?}/$1" "$OUT/$1.tar"
  KO_DOCKER_REPO="$REPO" ko build --base-import-paths --push=false --sbom=none \
    --tags "$TAG" --image-user 65532:65532 \
    --image-label "org.opencontainers.image.title=$1" \
    --image-label "org.opencontainers.image.description=$3" \
    --image-label "org.opencontainers.image.source=https://github.com/acemq/acemq-flow" \
    --image-label "org.opencontainers.image.version=$VERSION" \
    --image-label "org.opencontainers.image.revision=$REVISION" \
    --oci-layout-path "$OUT/$1" --tarball "$OUT/$1.tar" "$2"
  say "built $REPO/$1:$TAG into $OUT/$1 (OCI layout) and $OUT/$1.tar"
}
build_image acemq-flow ./cmd/acemq-flow "acemq-flow: a declarative workflow runtime on RabbitMQ"
build_image acemq-flow-plugins ./deploy/acemq-flow-plugins "the acemq-flow example plugins ($PLUGINS) and the program that copies them into a directory"
say "version $VERSION, revision $REVISION"
