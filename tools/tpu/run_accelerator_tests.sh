#!/usr/bin/env bash
# The accelerator tier (tests/accelerator) on a TPU machine, from the project's root:
#   bash tools/tpu/run_accelerator_tests.sh [PYTEST ARGS]
# It installs jaxfeed's dependencies once per machine with tools/tpu/setup.sh (from .tpu-wheels/,
# made beforehand by tools/tpu/wheels.sh), then runs the tier in one process (one program holds the
# TPU at a time; its helper processes run with JAX_PLATFORMS=cpu) on this checkout's src/, as
# `make test-accelerator` does. The log goes to $OUT/accelerator-tests.log when OUT is set.
set -o pipefail
cd "$(dirname "$0")/../.."
# shellcheck source=tools/tpu/setup.sh
source tools/tpu/setup.sh
export PYTHONPATH="$PWD/src:$PYTHONPATH"  # the checkout's code, not the wheel's copy
LOG=${OUT:-.}/accelerator-tests.log
JAXFEED_TEST_ACCELERATOR=1 python3 -m pytest -q -m accelerator -p no:xdist -p no:randomly \
  -p no:cacheprovider --durations=15 tests/accelerator "$@" 2>&1 | tee "$LOG"
