#!/usr/bin/env bash
# A TEST DOUBLE of QingLong 2.x's task shell (v2.21.0) around one long command, with shell/task.sh's signal
# trap: single_hanle takes $? (the killed command's 128 + N), replaces 0 with 1, sends the end callback as
# handle_task_end does (MANUAL=true) and exits 1. update_cron is api_double.sh's.
# Usage: trap_shell_double.sh <base url> <token> <cron id> <begin epoch s> <log path> <seconds of sleep>
set -u
ql_api=$1; __ql_token__=$2; ID=$3; begin_timestamp=$4; log_path=$5; seconds=$6

. "$(dirname "$0")/api_double.sh"

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
