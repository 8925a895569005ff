# Sourced by the TPU scripts (issue62.sh, dropk.sh, remat.sh) from the project's root, with LOG_NAME
# set: installs jaxfeed's dependencies once a machine (tools/tpu/setup.sh), puts this checkout's
# src/ first, sets O (the folder whose files come back: $OUT) and LOG ($O/$LOG_NAME.log), and
# defines `run SECONDS NAME COMMAND...`, which runs one command with a time limit of its own (one
# stuck case does not take the others' time), its output teed into $LOG between lines that say
# when it started and how it exited.
set -o pipefail
# shellcheck source=tools/tpu/setup.sh
source tools/tpu/setup.sh
export PYTHONPATH="$PWD/src:$PYTHONPATH"
O=${OUT:-.}
LOG="$O/$LOG_NAME.log"
START=$(date +%s)

run() {  # run SECONDS NAME COMMAND...: one command, its output in the log
  local limit=$1 name=$2
  shift 2
  echo "== $name ($(($(date +%s) - START)) s in): $*" | tee -a "$LOG"
  timeout "$limit" "$@" 2>&1 | grep -vE "^\s*$|UserWarning|warnings.warn" | tee -a "$LOG" | tail -n 25
  echo "== $name: exit ${PIPESTATUS[0]}" | tee -a "$LOG"
}
