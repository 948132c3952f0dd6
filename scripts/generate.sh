#!/usr/bin/env bash
# Regenerates the committed code derived from plugins/proto/plugin.proto:
#   plugins/proto/plugin.pb.go, plugins/proto/plugin_grpc.pb.go   (Go)
#   examples/plugins/python-echo/plugin_pb2.py                      (Python messages)
# Installs the pinned protoc plugins into $(go env GOPATH)/bin. protoc itself
# comes from the system (Debian: apt-get install protobuf-compiler).
set -euo pipefail

cd "$(dirname "$0")/.."

say() { printf 'generate: %s\n' "$*" >&2; }

if ! command -v protoc >/dev/null 2>&1; then
  say "protoc is missing; install it (apt-get install protobuf-compiler) and run make generate again"
  exit 1
fi

GOBIN_DIR="$(go env GOPATH)/bin"
GOBIN="$GOBIN_DIR" go install google.golang.org/protobuf/cmd/protoc-gen-go@v1.36.12
GOBIN="$GOBIN_DIR" go install google.golang.org/grpc/cmd/protoc-gen-go-grpc@v1.6.2
export PATH="$GOBIN_DIR:$PATH"

protoc \
  --proto_path=plugins/proto \
  --go_out=plugins/proto --go_opt=paths=source_relative \
  --go-grpc_out=plugins/proto --go-grpc_opt=paths=source_relative \
  plugins/proto/plugin.proto
say "wrote plugins/proto/plugin.pb.go and plugins/proto/plugin_grpc.pb.go"

# Python needs only the message classes: protoc generates them without a
# plugin; the Python example registers the service with grpc's generic handlers.
protoc \
  --proto_path=plugins/proto \
  --python_out=examples/plugins/python-echo \
  plugins/proto/plugin.proto
say "wrote examples/plugins/python-echo/plugin_pb2.py"
