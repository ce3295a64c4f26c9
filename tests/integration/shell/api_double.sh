# shellcheck shell=bash
# A TEST DOUBLE of QingLong 2.x's shell/api.sh update_cron (v2.21.0), sourced by the task shell doubles:
# the status callback built by string concatenation, sent with curl, no timeout, no retry. The caller sets
# ql_api (2.x's base URL as the shell reaches it: http://localhost:${ql_port}) and __ql_token__.
update_cron() {
  local ids="$1" status="$2" pid="${3:-''}" logPath="$4" lastExecutingTime="${5:-0}" runningTime="${6:-0}"
  local exitCode="${7:-}"
  local dataRaw="{\"ids\":[$ids],\"status\":\"$status\",\"pid\":\"$pid\",\"log_path\":\"$logPath\",\"last_execution_time\":$lastExecutingTime,\"last_running_time\":$runningTime"
  if [[ -n $exitCode ]]; then
    dataRaw="${dataRaw},\"exit_code\":$exitCode"
  fi
  dataRaw="${dataRaw}}"
  curl -s --noproxy "*" "${ql_api}/open/crons/status?t=$(date +%s)" \
    -X 'PUT' \
    -H "Authorization: Bearer ${__ql_token__}" \
    -H "Content-Type: application/json;charset=UTF-8" \
    --data-raw "$dataRaw" \
    --compressed
  echo
}
