#!/usr/bin/env bash
# Checks the example Kubernetes manifests (deploy/kubernetes): its own Go module
# decodes each strictly into the Kubernetes API types and checks the project's rules,
# and proves, by breaking them one way at a time, that the check fails. The library's
# go.mod never sees the Kubernetes modules.
set -euo pipefail
cd "$(dirname "$0")/../deploy/kubernetes/validate"
export PATH=/usr/local/go/bin:$PATH
GOFLAGS=-mod=readonly go test -count=1 ./...
