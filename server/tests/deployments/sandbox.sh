#!/usr/bin/env bash
# Runs the server's image as a container runtime runs it, in a network namespace of its own, and
# a client command beside it in that namespace; exits with the client's status.
#
#   sandbox.sh --image TAG [--env-file FILE] [--host NAME]... [--volume SRC:DST]...
#              [--command 'WORDS'] [--args 'WORDS'] [--service 'SHELL COMMAND']...
#              [--ready 'SHELL COMMAND'] -- CLIENT...
#
#   --env-file  NAME=value lines (the manifest's environment), after the image's Env
#   --host      a name /etc/hosts maps to 127.0.0.1 (the manifest's service names)
#   --volume    SRC bind-mounted read-only at DST (a directory, or a file for a subPath mount)
#   --command   replaces the image's Entrypoint, and drops its Cmd (Kubernetes' `command:`)
#   --args      replaces the image's Cmd (Kubernetes' `args:`, Compose's `command:`)
#   --service   started in the namespace before the container (e.g. a redis-server); stopped after
#   --ready     polled (up to 60 s) in the namespace before the client runs; fails the run if it
#               never succeeds
#   --user      uid:gid to run as, instead of the image's User
#   --rootfs-cache DIR  where the image's exported files are kept, per image id, for the next
#               runs (export + chroot only)
#
# The container always runs as Envoy Gateway runs it: read-only root, every capability dropped,
# no new privileges (and as user 65534 when --user says so). Two ways; the script prints which:
#   podman run      the image through podman and its OCI runtime, joined to the namespace;
#   export+chroot   where the runtime cannot start it (crun may not set rlimits inside another
#                   container, as on some CI machines): `podman create` + `podman export` into a
#                   directory, then the image's Entrypoint, Cmd, Env and User from `podman image
#                   inspect`, under `unshare --mount --pid` in the namespace, with an overlay of
#                   the run's own over the exported files, /proc, /dev, /etc/hosts and the
#                   volumes mounted, the root remounted read-only, and capsh entering the root
#                   as the user with no capability.
# Once the server answers, its process is checked from outside: the user, no effective,
# permitted or bounding capability, no_new_privs, and a read-only root.
# The namespace has only a loopback interface: nothing started here reaches another address.
set -euo pipefail

image="" env_file="" command_words="" args_words="" ready="" rootfs_cache="" user=""
hosts=() volumes=() services=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    --image) image=$2; shift 2 ;;
    --env-file) env_file=$2; shift 2 ;;
    --host) hosts+=("$2"); shift 2 ;;
    --volume) volumes+=("$2"); shift 2 ;;
    --command) command_words=$2; shift 2 ;;
    --args) args_words=$2; shift 2 ;;
    --service) services+=("$2"); shift 2 ;;
    --ready) ready=$2; shift 2 ;;
    --rootfs-cache) rootfs_cache=$2; shift 2 ;;
    --user) user=$2; shift 2 ;;
    --) shift; break ;;
    *) echo "sandbox.sh: unknown option '$1'" >&2; exit 2 ;;
  esac
done
[[ -n "$image" && $# -gt 0 ]] || { echo "sandbox.sh: --image and a client command are needed" >&2; exit 2; }
# Namespaces, mounts and chroot: root, as CI runs the test command.
[[ $(id -u) -eq 0 ]] || { echo "sandbox.sh: needs root (network, mount and pid namespaces)" >&2; exit 1; }
for tool in podman unshare nsenter setpriv capsh ip flock; do
  command -v "$tool" >/dev/null || { echo "sandbox.sh: '$tool' is not installed" >&2; exit 1; }
done

work=$(mktemp -d "${TMPDIR:-/tmp}/ratelimit-sandbox.XXXXXX")
holder="" container="" chroot_pid="" init_pid="" service_pids=()
cleanup() {
  local pid
  set +e  # every step is tried; the script's status stays the client's
  : >"$work/reap"  # stopped here: nothing is left for the reaper (its pids may be reused)
  [[ -n "$container" ]] && podman rm -f -t 5 "$container" >/dev/null 2>&1
  # The server is its pid namespace's first process: SIGKILL from here ends it and so the
  # namespace (it changed its user, so no parent-death signal reaches it). unshare --fork
  # blocks SIGTERM while it waits for its child: SIGKILL ends it too.
  [[ -n "$init_pid" ]] && kill -KILL "$init_pid" 2>/dev/null
  [[ -n "$chroot_pid" ]] && kill -KILL "$chroot_pid" 2>/dev/null && wait "$chroot_pid" 2>/dev/null
  for pid in "${service_pids[@]}"; do
    kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null
  done
  [[ -n "$holder" ]] && kill "$holder" 2>/dev/null && wait "$holder" 2>/dev/null
  rm -rf "$work" 2>/dev/null || true
  return 0
}
trap cleanup EXIT
# The reaper: when this script dies without its cleanup (SIGKILL at a timeout), a process that
# outlives it stops what it started, listed in $work/reap ("pid N", "container ID"): it waits
# for the end of a pipe that only this script holds (every background command closes it).
: >"$work/reap"
exec {reaper_fd}> >(
  exec >/dev/null 2>&1
  cat
  [[ -f "$work/reap" ]] || exit 0
  while read -r kind what; do
    case "$kind" in
      pid) kill -KILL "$what" ;;
      container) podman rm -f "$what" ;;
    esac
  done <"$work/reap"
  rm -rf "$work"
)
reap() { echo "$1 $2" >>"$work/reap"; }

# --- the network namespace: one process holds it, every part joins it --------------------------

# Every process started here in the background gets SIGKILL when this script dies, even by
# SIGKILL (a timeout): setpriv --pdeathsig, kept across exec.
orphan_proof=(setpriv --pdeathsig KILL)
"${orphan_proof[@]}" unshare --net sleep infinity {reaper_fd}>&- &
holder=$!
own_ns=$(readlink /proc/self/ns/net)
for _ in $(seq 1 500); do
  ns=$(readlink "/proc/$holder/ns/net" 2>/dev/null || true)
  [[ -n "$ns" && "$ns" != "$own_ns" ]] && break
  kill -0 "$holder" 2>/dev/null || { echo "sandbox.sh: unshare --net failed" >&2; exit 1; }
  sleep 0.01  # between looks at the holder's namespace (a wait on a condition, 5 s at most)
done
[[ "$ns" != "$own_ns" ]] || { echo "sandbox.sh: no network namespace of its own" >&2; exit 1; }
netns="/proc/$holder/ns/net"
# in_ns COMMAND...: in the namespace, killed with this script, without the reaper's pipe.
in_ns() { "${orphan_proof[@]}" nsenter --net="$netns" -- "$@" {reaper_fd}>&-; }
in_ns ip link set lo up

{
  printf '127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n'
  for h in "${hosts[@]}"; do printf '127.0.0.1\t%s\n' "$h"; done
} >"$work/hosts"

# Started by nsenter itself (not through a function), so $! is the process to stop.
for service in "${services[@]}"; do
  "${orphan_proof[@]}" nsenter --net="$netns" -- bash -c "$service" \
    >"$work/service.${#service_pids[@]}.log" 2>&1 {reaper_fd}>&- &
  service_pids+=($!)
done

# --- what the image says to run --------------------------------------------------------------

# One inspect, one element a line, each tagged with its field.
entrypoint=() cmd=() image_env=() image_user="" image_id=""
while IFS= read -r line; do
  case "$line" in
    'entrypoint '*) entrypoint+=("${line#entrypoint }") ;;
    'cmd '*) cmd+=("${line#cmd }") ;;
    'env '*) image_env+=("${line#env }") ;;
    'user '*) image_user=${line#user } ;;
    'id '*) image_id=${line#id } ;;
  esac
done < <(podman image inspect --format '{{range .Config.Entrypoint}}entrypoint {{.}}{{println}}{{end}}{{range .Config.Cmd}}cmd {{.}}{{println}}{{end}}{{range .Config.Env}}env {{.}}{{println}}{{end}}user {{.Config.User}}{{println}}id {{.Id}}{{println}}' "$image")
[[ -n "$image_id" ]] || { echo "sandbox.sh: no image '$image'" >&2; exit 1; }
# The image's User unless --user names another (numeric uid:gid: the image has no user names
# a runtime would look up).
[[ -z "$user" ]] && user=$image_user
[[ "$user" =~ ^[0-9]+:[0-9]+$ ]] || { echo "sandbox.sh: user '$user' is not uid:gid" >&2; exit 1; }
if [[ -n "$command_words" ]]; then
  read -r -a entrypoint <<<"$command_words"
  cmd=()
fi
[[ -n "$args_words" ]] && read -r -a cmd <<<"$args_words"
manifest_env=()
if [[ -n "$env_file" ]]; then
  while IFS= read -r line || [[ -n "$line" ]]; do
    [[ "$line" =~ ^[A-Za-z_][A-Za-z0-9_]*= ]] && manifest_env+=("$line")
  done <"$env_file"
fi
argv=("${entrypoint[@]}" "${cmd[@]}")
[[ ${#argv[@]} -gt 0 ]] || { echo "sandbox.sh: the image names no program" >&2; exit 1; }
echo "sandbox.sh: argv: ${argv[*]}; user $user; ${#manifest_env[@]} variables"

# --- the container: podman run, else export + chroot --------------------------------------------

start_podman() {
  # Named, so that a container the runtime could not start (podman leaves it "Created") is
  # removed too.
  local name
  name="ratelimit-sandbox-$(basename "$work" | tr -cd 'A-Za-z0-9')"
  reap container "$name"
  local args=(--detach --name "$name" --network "ns:$netns" --read-only --user "$user" --cap-drop ALL
              --security-opt no-new-privileges --entrypoint "${argv[0]}"
              -v "$work/hosts:/etc/hosts:ro")
  local v e
  for v in "${volumes[@]}"; do args+=(-v "$v:ro"); done
  for e in "${manifest_env[@]}"; do args+=(--env "$e"); done
  # A runtime that cannot start the container fails `podman run` itself (crun's setrlimit
  # refusal exits 126); a server that starts and then exits is the server's failure, seen below.
  container=$(podman run "${args[@]}" "$image" "${argv[@]:1}" 2>"$work/podman.err" {reaper_fd}>&-) || {
    container=""
    podman rm -f "$name" >/dev/null 2>&1 || true
    return 1
  }
}

# alive: the server's container or namespace is still there.
alive() {
  if [[ -n "$container" ]]; then
    [[ "$(podman inspect --format '{{.State.Running}}' "$container" 2>/dev/null)" == true ]]
  else
    kill -0 "$chroot_pid" 2>/dev/null
  fi
}

# export_root: the image's files, exported once per image (podman create + podman export) into
# the cache folder when one is given (--rootfs-cache; flock serialises runs side by side), else
# into this run's folder. Prints the folder.
export_root() {
  local dir
  if [[ -n "$rootfs_cache" ]]; then
    dir="$rootfs_cache/$image_id"
    mkdir -p "$rootfs_cache"
    (
      flock 9
      if [[ ! -d "$dir" ]]; then
        rm -rf "$dir.tmp"
        mkdir -p "$dir.tmp"
        export_into "$dir.tmp"
        mv "$dir.tmp" "$dir"
      fi
    ) 9>"$rootfs_cache/.lock"
  else
    dir="$work/image"
    mkdir -p "$dir"
    export_into "$dir"
  fi
  echo "$dir"
}

# export_into DIR: podman create + podman export of the image, untarred into DIR; the
# container (never started) is removed, on failure too.
export_into() {
  local c status=0
  c=$(podman create "$image")
  reap container "$c"
  podman export "$c" | tar -x -C "$1" || status=$?
  podman rm -f "$c" >/dev/null
  return "$status"
}

start_chroot() {
  local lower root="$work/root"
  lower=$(export_root)
  mkdir -p "$root" "$work/upper" "$work/overlay-work"
  # In the run's own mount namespace: the image's files under an overlay whose upper layer is
  # this run's (the mount points made here never reach the shared export), /proc, /dev,
  # /etc/hosts and the volumes mounted, then the root remounted read-only, as a runtime does.
  local v src dst mounts=""
  for v in "${volumes[@]}"; do
    src=${v%%:*}
    dst=${v#*:}
    if [[ -d "$src" ]]; then
      mounts+="mkdir -p '$root$dst' && "
    else
      mounts+="mkdir -p '$root$(dirname "$dst")' && touch '$root$dst' && "
    fi
    mounts+="mount --bind '$src' '$root$dst' && mount -o remount,bind,ro '$root$dst' && "
  done
  local setup="mount --make-rprivate / &&
    mount -t overlay overlay -o 'lowerdir=$lower,upperdir=$work/upper,workdir=$work/overlay-work' '$root' &&
    mkdir -p '$root/proc' '$root/dev' '$root/etc' && touch '$root/etc/hosts' && ${mounts}
    mount -t proc -o nosuid,nodev,noexec proc '$root/proc' && mount --rbind /dev '$root/dev' &&
    mount --bind '$work/hosts' '$root/etc/hosts' &&
    mount -o remount,ro '$root' && exec \"\$@\""
  # env -i: the container sees the image's Env and the manifest's, nothing of this shell's.
  # capsh: chroot, empty the bounding set, become 65534 (which clears the permitted and
  # effective sets), forbid new privileges, then exec the entrypoint with the image's argv.
  "${orphan_proof[@]}" nsenter --net="$netns" -- unshare --mount --pid --fork --kill-child -- \
    bash -c "$setup" sandbox \
    env -i "${image_env[@]}" "${manifest_env[@]}" \
    capsh --chroot="$root" --drop=all --gid="${user#*:}" --groups="${user#*:}" \
          --uid="${user%%:*}" --no-new-privs --shell="${argv[0]}" -- "${argv[@]:1}" \
    >"$work/server.log" 2>&1 {reaper_fd}>&- &
  chroot_pid=$!
  # unshare's child, the namespace's first process, becomes the server through exec.
  for _ in $(seq 1 500); do
    init_pid=$(pgrep -P "$chroot_pid" | head -n 1 || true)
    [[ -n "$init_pid" ]] && break
    kill -0 "$chroot_pid" 2>/dev/null || break
    sleep 0.01  # a wait on a condition, 5 s at most
  done
  [[ -n "$init_pid" ]] && reap pid "$init_pid"
  return 0
}

server_log() {
  if [[ -n "$container" ]]; then podman logs "$container" 2>&1; else cat "$work/server.log"; fi
}

if start_podman; then
  echo "sandbox.sh: path: podman run (container ${container:0:12})"
else
  echo "sandbox.sh: podman run failed: $(tr '\n' ' ' <"$work/podman.err" | cut -c1-200)"
  echo "sandbox.sh: path: podman export + unshare + chroot (user $user, read-only root, no capabilities)"
  start_chroot
fi

# --- the client -------------------------------------------------------------------------------

status=0
if [[ -n "$ready" ]]; then
  ok=0
  for _ in $(seq 1 600); do
    if in_ns bash -c "$ready" >/dev/null 2>&1; then ok=1; break; fi
    alive || break
    sleep 0.1  # between probes: a wait on a condition, 60 s at most
  done
  if [[ $ok -eq 0 ]]; then
    echo "sandbox.sh: not ready: $ready" >&2
    status=1
  fi
fi
# confinement PID: what a runtime that honours the manifest leaves the process, read from
# /proc: the user, capabilities (effective, permitted, bounding), no_new_privs, its root's mount.
confinement() {
  local pid=$1 uid caps nnp root_opts
  uid=$(awk '/^Uid:/ {print $2}' "/proc/$pid/status")
  caps=$(awk '/^Cap(Eff|Prm|Bnd):/ {sub(":", "", $1); printf "%s=%s ", $1, $2}' "/proc/$pid/status")
  nnp=$(awk '/^NoNewPrivs:/ {print $2}' "/proc/$pid/status")
  # mountinfo field 5 is the mount point as the process sees it, field 6 its options.
  root_opts=$(awk '$5 == "/" {print $6}' "/proc/$pid/mountinfo" | tail -n 1)
  echo "sandbox.sh: the server runs as uid $uid; ${caps}NoNewPrivs=$nnp; / mounted $root_opts"
  [[ "$uid" == "${user%%:*}" && "$nnp" == 1 && "$root_opts" == ro,* ]] &&
    [[ "$caps" == "CapPrm=0000000000000000 CapEff=0000000000000000 CapBnd=0000000000000000 " ]]
}
server_pid() {
  if [[ -n "$container" ]]; then
    podman inspect --format '{{.State.Pid}}' "$container"
  else
    echo "$init_pid"
  fi
}
if [[ $status -eq 0 ]]; then
  pid=$(server_pid || true)
  if [[ -z "$pid" ]] || ! confinement "$pid"; then
    echo "sandbox.sh: the server is not confined as the manifest asks" >&2
    status=1
  fi
fi
if [[ $status -eq 0 ]]; then
  in_ns "$@" || status=$?
fi
echo "--- server output"
server_log | tail -n 40
if [[ $status -ne 0 ]]; then
  for f in "$work"/service.*.log; do
    [[ -s "$f" ]] && { echo "--- $(basename "$f")"; tail -n 20 "$f"; }
  done
fi
exit "$status"
