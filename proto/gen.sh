#!/usr/bin/env bash
# Regenerate the Python stubs for the kubelet PodResources API. The one way they are made;
# tests/unit/test_proto_stubs_fresh.py fails when the committed stubs are stale.
#   PYTHON=.venv/bin/python proto/gen.sh [OUT_DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python3}"
OUT="${1:-.}"
# protoc finds protoc-gen-mypy (mypy-protobuf) next to the interpreter
PATH="$(dirname "$("$PYTHON" -c 'import sys; print(sys.executable)')"):$PATH"
"$PYTHON" -m grpc_tools.protoc -I . \
  --python_out="$OUT" --grpc_python_out="$OUT" --mypy_out="$OUT" \
  proto/podresources/v1/api.proto
