#!/usr/bin/env bash
# A TEST DOUBLE of QingLong 2.x's task shell (v2.21.0) around one long command, with shell/task.sh's signal
# trap: single_hanle takes $? (the killed command's 128 + N), replaces 0 with 1, sends the end callback as
# handle_task_end does (MANUAL=true) and exits 1. update_cron is shell/api.sh's (curl, no timeout, no retry).
# Usage: trap_shell_double.sh <base url> <token> <cron id> <begin epoch s> <log path> <seconds of sleep>
set -u
base_url=$1; token=$2; ID=$3; begin_timestamp=$4; log_path=$5; seconds=$6

update_cron() {
  local ids="$1" status="$2" pid="${3:-''}" logPath="$4" lastExecutingTime="${5:-0}" runningTime="${6:-0}"
  local exitCode="${7:-}"
  local dataRaw="{\"ids\":[$ids],\"status\":\"$status\",\"pid\":\"$pid\",\"log_path\":\"$logPath\",\"last_execution_time\":$lastExecutingTime,\"last_running_time\":$runningTime"
  if [[ -n $exitCode ]]; then
    dataRaw="${dataRaw},\"exit_code\":$exitCode"
  fi
  dataRaw="${dataRaw}}"
  curl -s --noproxy "*" "${base_url}/open/crons/status?t=$(date +%s)" \
    -X 'PUT' \
    -H "Authorization: Bearer ${token}" \
    -H "Content-Type: application/json;charset=UTF-8" \
    --data-raw "$dataRaw" \
    --compressed
  echo
}

handle_task_end() {
  local diff_time=$(($(date +%s) - begin_timestamp))
  [[ $diff_time == 0 ]] && diff_time=1
  update_cron "\"$ID\"" "1" "$$" "$log_path" "$begin_timestamp" "$diff_time" "${_task_exit_code:-0}"
}

single_hanle() {
  _task_exit_code="${_task_exit_code:-$?}"
  [[ "$_task_exit_code" == "0" ]] && _task_exit_code="1"
  eval MANUAL=true handle_task_end "$@"
  exit 1
}

trap 'single_hanle SIGINT' INT
trap 'single_hanle SIGTERM' TERM
trap 'single_hanle SIGHUP' HUP

update_cron "\"$ID\"" "0" "$$" "$log_path" "$begin_timestamp"
sleep "$seconds"
_task_exit_code=$?
handle_task_end
