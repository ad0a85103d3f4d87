#!/usr/bin/env bash
# A throwaway memcached for tests: loopback only, TCP only, 16 MB, its own temp dir.
#
#   port=$(scripts/memcached.sh start)    # prints only the port on stdout once it answers
#   scripts/memcached.sh stop "$port"     # stops it and removes its temp dir
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/throwaway_daemon.sh"

daemon_name=memcached
daemon_pidfile=memcached.pid
daemon_dir() { echo "${TMPDIR:-/tmp}/ratelimit-memcached-$1"; }
daemon_launch() {
  memcached -d -l 127.0.0.1 -p "$1" -U 0 -m 16 -P "$2/memcached.pid" -u "$(id -un)" \
    >"$2/memcached.log" 2>&1
}
daemon_answers() {  # "version" gets "VERSION ..."
  local reply
  exec 3<>"/dev/tcp/127.0.0.1/$1" || return 1
  printf 'version\r\n' >&3
  IFS= read -r -t 2 reply <&3 || reply=""
  exec 3>&-
  [[ "$reply" == VERSION* ]]
}
daemon_polite_stop() { :; }
daemon_log() { tail -5 "$1/memcached.log" 2>/dev/null; }

daemon_main "$@"
