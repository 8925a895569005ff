#!/usr/bin/env bash
# Makes .tpu-wheels/ (ignored by git), the wheels tools/tpu/setup.sh installs on an offline TPU
# machine beside that machine's own package index: jaxfeed itself, built from this checkout, and
# the dependencies the index lacks, at the versions constraints.txt pins. Run it here, on a machine
# with the registries, before carrying the checkout (with .tpu-wheels/) to the TPU machine:
#   bash tools/tpu/wheels.sh                 # PY=.venv/bin/python by default
set -euo pipefail
cd "$(dirname "$0")/../.."
PY=${PY:-.venv/bin/python}
W=${TPU_WHEELS:-.tpu-wheels}
MISSING="jsonargparse simplejpeg cloudpickle fsspec flatbuffers qwix huggingface_hub"  # not in the TPU index (its huggingface_hub 2.0.0 breaks transformers)
rm -rf "$W"
mkdir -p "$W"
"$PY" -m pip wheel --disable-pip-version-check -q --no-deps -w "$W" .
pins=()
for name in $MISSING; do
  pin=$(grep -i "^$name==" constraints.txt) || { echo "constraints.txt pins no $name" >&2; exit 2; }
  pins+=("$pin")
done
"$PY" -m pip download --disable-pip-version-check -q --no-deps --only-binary=:all: \
  --python-version 3.11 --implementation cp --platform manylinux_2_28_x86_64 \
  --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 -d "$W" "${pins[@]}"
ls "$W"
