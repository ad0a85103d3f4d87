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
#
# The container always runs as Envoy Gateway runs it: user 65534, read-only root, every
# capability dropped, no new privileges. Two ways, and the script prints which it took:
#   podman run      the image through podman and its OCI runtime, joined to the namespace;
#   export+chroot   where the runtime cannot start it (crun may not set rlimits inside another
#                   container, as on some CI machines): `podman create` + `podman export` into a
#                   directory, then the image's Entrypoint, Cmd, Env and User from `podman image
#                   inspect`, under `unshare --mount --pid` in the namespace, with /proc, /dev,
#                   /etc/hosts and the volumes mounted, the root remounted read-only, and capsh
#                   entering the root as 65534 with no capability.
# The namespace has only a loopback interface: nothing started here reaches another address.
set -euo pipefail

image="" env_file="" command_words="" args_words="" ready=""
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
    --) shift; break ;;
    *) echo "sandbox.sh: unknown option '$1'" >&2; exit 2 ;;
  esac
done
[[ -n "$image" && $# -gt 0 ]] || { echo "sandbox.sh: --image and a client command are needed" >&2; exit 2; }
for tool in podman unshare nsenter capsh ip; do
  command -v "$tool" >/dev/null || { echo "sandbox.sh: '$tool' is not installed" >&2; exit 1; }
done

work=$(mktemp -d "${TMPDIR:-/tmp}/ratelimit-sandbox.XXXXXX")
holder="" container="" chroot_pid="" service_pids=()
cleanup() {
  local pid
  set +e  # every step is tried; the script's status stays the client's
  [[ -n "$container" ]] && podman rm -f -t 5 "$container" >/dev/null 2>&1
  # unshare --fork blocks SIGTERM while it waits for its child; SIGKILL ends it, and
  # --kill-child then ends the server, the namespace's first process, and so the namespace.
  [[ -n "$chroot_pid" ]] && kill -KILL "$chroot_pid" 2>/dev/null && wait "$chroot_pid" 2>/dev/null
  for pid in "${service_pids[@]}"; do
    kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null
  done
  [[ -n "$holder" ]] && kill "$holder" 2>/dev/null && wait "$holder" 2>/dev/null
  # The exported root may still be a mount point for a moment after its namespace is gone.
  rm -rf "$work" 2>/dev/null || true
  return 0
}
trap cleanup EXIT

# --- the network namespace: one process holds it, every part joins it --------------------------

unshare --net sleep infinity &
holder=$!
own_ns=$(readlink /proc/self/ns/net)
for _ in $(seq 1 500); do
  ns=$(readlink "/proc/$holder/ns/net" 2>/dev/null || true)
  [[ -n "$ns" && "$ns" != "$own_ns" ]] && break
  kill -0 "$holder" 2>/dev/null || { echo "sandbox.sh: unshare --net failed" >&2; exit 1; }
  sleep 0.01  # between looks at the holder's namespace (a wait on a condition, 5 s at most)
done
netns="/proc/$holder/ns/net"
in_ns() { nsenter --net="$netns" -- "$@"; }
in_ns ip link set lo up

{
  printf '127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n'
  for h in "${hosts[@]}"; do printf '127.0.0.1\t%s\n' "$h"; done
} >"$work/hosts"

# Started by nsenter itself (not through a function), so $! is the process to stop.
for service in "${services[@]}"; do
  nsenter --net="$netns" -- bash -c "$service" >"$work/service.${#service_pids[@]}.log" 2>&1 &
  service_pids+=($!)
done

# --- what the image says to run --------------------------------------------------------------

mapfile -t entrypoint < <(podman image inspect --format '{{range .Config.Entrypoint}}{{println .}}{{end}}' "$image")
mapfile -t cmd < <(podman image inspect --format '{{range .Config.Cmd}}{{println .}}{{end}}' "$image")
mapfile -t image_env < <(podman image inspect --format '{{range .Config.Env}}{{println .}}{{end}}' "$image")
user=65534:65534
if [[ -n "$command_words" ]]; then
  read -r -a entrypoint <<<"$command_words"
  cmd=()
fi
[[ -n "$args_words" ]] && read -r -a cmd <<<"$args_words"
# Empty lines of the template output are not elements.
clean() { local x; for x in "$@"; do [[ -n "$x" ]] && printf '%s\n' "$x"; done; return 0; }
mapfile -t entrypoint < <(clean "${entrypoint[@]}")
mapfile -t cmd < <(clean "${cmd[@]}")
mapfile -t image_env < <(clean "${image_env[@]}")
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
  local args=(--detach --network "ns:$netns" --read-only --user "$user" --cap-drop ALL
              --security-opt no-new-privileges --entrypoint "${argv[0]}"
              -v "$work/hosts:/etc/hosts:ro")
  local v e
  for v in "${volumes[@]}"; do args+=(-v "$v:ro"); done
  for e in "${manifest_env[@]}"; do args+=(--env "$e"); done
  container=$(podman run "${args[@]}" "$image" "${argv[@]:1}" 2>"$work/podman.err") || {
    container=""
    return 1
  }
  # The runtime may accept the container and fail to start it a moment later.
  [[ "$(podman inspect --format '{{.State.Status}}' "$container" 2>/dev/null)" != "exited" ]]
}

start_chroot() {
  local id root="$work/root"
  id=$(podman create "$image")
  mkdir -p "$root"
  podman export "$id" | tar -x -C "$root"
  podman rm "$id" >/dev/null
  # The mount points the runtime would make: the volumes' targets, /etc/hosts, /proc, /dev.
  mkdir -p "$root/proc" "$root/dev" "$root/etc"
  touch "$root/etc/hosts"
  local v src dst mounts=""
  for v in "${volumes[@]}"; do
    src=${v%%:*}
    dst=${v#*:}
    if [[ -d "$src" ]]; then mkdir -p "$root$dst"; else mkdir -p "$root$(dirname "$dst")"; touch "$root$dst"; fi
    mounts+="mount --bind '$src' '$root$dst' && mount -o remount,bind,ro '$root$dst' && "
  done
  local setup="mount --make-rprivate / && mount --bind '$root' '$root' &&
    mount -t proc -o nosuid,nodev,noexec proc '$root/proc' && mount --rbind /dev '$root/dev' &&
    mount --bind '$work/hosts' '$root/etc/hosts' && ${mounts}
    mount -o remount,bind,ro '$root' && exec \"\$@\""
  # env -i: the container sees the image's Env and the manifest's, nothing of this shell's.
  # capsh: chroot, empty the bounding set, become 65534 (which clears the permitted and
  # effective sets), forbid new privileges, then exec the entrypoint with the image's argv.
  nsenter --net="$netns" -- unshare --mount --pid --fork --kill-child -- bash -c "$setup" sandbox \
    env -i "${image_env[@]}" "${manifest_env[@]}" \
    capsh --chroot="$root" --drop=all --gid="${user#*:}" --groups="${user#*:}" \
          --uid="${user%%:*}" --no-new-privs --shell="${argv[0]}" -- "${argv[@]:1}" \
    >"$work/server.log" 2>&1 &
  chroot_pid=$!
}

server_log() {
  if [[ -n "$container" ]]; then podman logs "$container" 2>&1; else cat "$work/server.log"; fi
}

if start_podman; then
  echo "sandbox.sh: path: podman run (container ${container:0:12})"
else
  if [[ -n "$container" ]]; then
    podman logs "$container" >"$work/podman.err" 2>&1 || true
    podman rm -f "$container" >/dev/null 2>&1 || true
    container=""
  fi
  echo "sandbox.sh: podman run failed: $(tr '\n' ' ' <"$work/podman.err" | cut -c1-200)"
  echo "sandbox.sh: path: podman export + unshare + chroot (uid 65534, read-only root, no capabilities)"
  start_chroot
fi

# --- the client -------------------------------------------------------------------------------

status=0
if [[ -n "$ready" ]]; then
  ok=0
  for _ in $(seq 1 600); do
    if in_ns bash -c "$ready" >/dev/null 2>&1; then ok=1; break; fi
    if [[ -n "$chroot_pid" ]] && ! kill -0 "$chroot_pid" 2>/dev/null; then break; fi
    sleep 0.1  # between probes: a wait on a condition, 60 s at most
  done
  if [[ $ok -eq 0 ]]; then
    echo "sandbox.sh: not ready: $ready" >&2
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
