#!/usr/bin/env bash
# Regenerates the Go code of every .proto under proto/.
#
#   go generate ./proto        (or: ./proto/generate.sh)
#
# Generator versions are pinned: protoc-gen-go and protoc-gen-go-grpc run as
# `go tool` dependencies recorded in go.mod, and protoc must be 3.21.12
# (Debian bookworm's protobuf-compiler); the script installs it with apt when
# it is missing and refuses any other version, so the committed output is
# reproducible byte for byte.
set -euo pipefail
cd "$(dirname "$0")/.."

want="libprotoc 3.21.12"
if ! command -v protoc >/dev/null 2>&1; then
  echo "protoc not found; installing protobuf-compiler with apt" >&2
  apt-get update -qq && apt-get install -y -qq protobuf-compiler >/dev/null
fi
have="$(protoc --version)"
if [ "$have" != "$want" ]; then
  echo "protoc is '$have'; want '$want' (Debian bookworm protobuf-compiler)" >&2
  exit 1
fi

bin="$(mktemp -d)"
trap 'rm -rf "$bin"' EXIT
go build -o "$bin/protoc-gen-go" google.golang.org/protobuf/cmd/protoc-gen-go
go build -o "$bin/protoc-gen-go-grpc" google.golang.org/grpc/cmd/protoc-gen-go-grpc

module="github.com/norsk-oss/norsk-manager"
files=(shared/common.proto shared/error.proto manager.proto worker.proto internal/internal.proto internal/cluster.proto)
PATH="$bin:$PATH" protoc -I proto \
  --go_out=. --go_opt=module="$module" \
  --go-grpc_out=. --go-grpc_opt=module="$module" \
  "${files[@]}"
echo "generated Go code for: ${files[*]}"
