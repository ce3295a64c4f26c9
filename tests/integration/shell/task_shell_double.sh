#!/usr/bin/env bash
# A TEST DOUBLE of the part of QingLong 2.x's task shell (v2.21.0) that reaches the backend, for the seam
# layout tests only. It keeps 2.x's order: shell/task.sh sources share.sh, whose import_config sources
# $QL_DIR/data/config/config.sh and only then runs load_ql_envs (ql_port=${QlPort:-"5700"}); api.sh's
# update_cron (api_double.sh) sends the status callback to http://localhost:${ql_port}.
# Usage: task_shell_double.sh <data dir> <cron id> <begin epoch s>   (the environment is the spawner's)
set -u
dir_data=$1; ID=$2; begin_timestamp=$3
file_config_user=$dir_data/config/config.sh

import_config() {
  [[ -f $file_config_user ]] && . "$file_config_user"
  ql_port=${QlPort:-"5700"}
  ql_api="http://localhost:${ql_port}"
}

. "$(dirname "$0")/api_double.sh"

import_config
__ql_token__=$(sed -E 's/.*"value":"([^"]+)".*/\1/' "$dir_data/config/token.json")
log_path="seam_${ID}/$(date +%Y-%m-%d-%H-%M-%S)-$$.log"
update_cron "\"$ID\"" "0" "$$" "$log_path" "$begin_timestamp"
update_cron "\"$ID\"" "1" "$$" "$log_path" "$begin_timestamp" "1" "0"
