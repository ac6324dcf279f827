#!/usr/bin/env bash
# Regenerate the Python stubs of the kubelet PodResources API: the one way they are made.
#
#   PYTHON=.venv/bin/python proto/gen.sh
#
# Writes proto/podresources/v1/api_pb2.py, api_pb2.pyi and api_pb2_grpc.py next to api.proto.
# Runs from the directory above proto/ with -I . so the generated imports read
# `from proto.podresources.v1 import ...`. The output is deterministic: the same api.proto and
# the tool versions pinned in pyproject.toml give the same bytes (checked below, and by
# tests/unit/test_proto_stubs_fresh.py, which runs a copy of this script in a temp dir).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

PYTHON="${PYTHON:-python3}"
export LC_ALL=C PYTHONHASHSEED=0 PYTHONDONTWRITEBYTECODE=1

# The installed generators must be the versions pyproject.toml pins: other versions write other
# bytes (and a different protobuf runtime floor into api_pb2.py).
"$PYTHON" - <<'PY'
import re, sys, tomllib
from importlib.metadata import PackageNotFoundError, version

with open("pyproject.toml", "rb") as f:
    project = tomllib.load(f)["project"]
pins = dict(
    re.fullmatch(r"([A-Za-z0-9_.-]+)==([^;\s]+)", spec).groups()
    for spec in project["optional-dependencies"]["dev"] + project["dependencies"]
    if "==" in spec
)
for name in ("grpcio-tools", "mypy-protobuf"):
    try:
        have = version(name)
    except PackageNotFoundError:
        have = "(not installed)"
    if have != pins[name]:
        sys.exit(f"proto/gen.sh: {sys.executable} has {name} {have}, pyproject.toml pins "
                 f"{pins[name]}: set PYTHON to the project's venv (pip install -e '.[dev]')")
PY

# protoc runs plugins as executables: run mypy-protobuf with this same interpreter, whatever
# directory its console script was installed into.
plugin_dir="$(mktemp -d)"
trap 'rm -rf "$plugin_dir"' EXIT
interpreter="$("$PYTHON" -c 'import sys; print(sys.executable)')"
printf '#!/bin/sh\nexec "%s" -m mypy_protobuf.main "$@"\n' "$interpreter" >"$plugin_dir/protoc-gen-mypy"
chmod +x "$plugin_dir/protoc-gen-mypy"

"$PYTHON" -m grpc_tools.protoc -I . \
  --plugin=protoc-gen-mypy="$plugin_dir/protoc-gen-mypy" \
  --python_out=. --grpc_python_out=. --mypy_out=. \
  proto/podresources/v1/api.proto
