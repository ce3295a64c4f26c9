#!/bin/sh
# Entrypoint of the ql-bridge image. Its arguments are a ql-bridge command line (the image's CMD is `serve`):
#
#   (none) | serve [ARGS...]   `ql-bridge db upgrade`, then `exec ql-bridge serve ARGS...`
#   ql-bridge ARGS...          the same as ARGS... (so `docker run IMAGE ql-bridge status` works too)
#   anything else              `exec ql-bridge ARGS...` as given, with no upgrade first: one-off commands
#                              (`status`, `doctor`, `flags show`, `report`, `db upgrade`, `--help`) never
#                              change the store's schema on their own
#
# For something that is not a ql-bridge command (a shell, say), override the entrypoint:
# `docker run --entrypoint sh ...`.
#
# `exec` makes the serving process take this script's pid, so the SIGTERM `docker stop` sends reaches the
# bridge itself, which closes its listener, drains in-flight requests (BRIDGE_DRAIN_TIMEOUT_S) and exits 0;
# its exit code is the container's. Without `exec` the signal would stop only this shell (or, as pid 1,
# nothing at all) and Docker would end the bridge with SIGKILL after the grace period.
set -eu

if [ "$#" -gt 0 ] && [ "$1" = ql-bridge ]; then
  shift
fi
if [ "$#" -gt 0 ] && [ "$1" != serve ]; then
  exec ql-bridge "$@"
fi
if [ "$#" -gt 0 ]; then
  shift  # "serve"
fi

# A stop requested during the upgrade lets the migration finish (the shell runs a trap only once its
# foreground command has ended) and then ends here instead of starting to serve. Without the trap, a shell
# that is pid 1 would ignore the signal, and one that is not would leave the migration running without it.
stop_signal=""
trap 'stop_signal=TERM' TERM
trap 'stop_signal=INT' INT

upgrade_status=0
ql-bridge db upgrade || upgrade_status=$?
if [ "$upgrade_status" -ne 0 ]; then
  echo "ql-bridge-entrypoint: 'ql-bridge db upgrade' exited with $upgrade_status; not starting serve" >&2
  exit "$upgrade_status"
fi

trap - TERM INT
case "$stop_signal" in
  TERM) echo "ql-bridge-entrypoint: stopped (SIGTERM) during the upgrade; not starting serve" >&2; exit 143 ;;
  INT) echo "ql-bridge-entrypoint: stopped (SIGINT) during the upgrade; not starting serve" >&2; exit 130 ;;
esac

exec ql-bridge serve "$@"
