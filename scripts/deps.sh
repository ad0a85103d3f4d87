#!/usr/bin/env bash
# Installs the Debian 12 packages ratelimit needs, only those missing.
#
#   scripts/deps.sh [GROUP|PACKAGE]...
#
# Groups: demo (build and run the example), test (everything scripts/test.sh builds and runs,
# the gateways NGINX, Caddy and HAProxy that the server's gateway test puts in front of it),
# bench (bench/run; nginx-light, wrk and curl for its gateway phase, util-linux's taskset to
# pin), gateway (the HTTP gateway example), all (the default). Any other argument is taken as a
# Debian package name. Recommends are not installed, so every needed package is
# listed (libclang-rt-14-dev: clang's sanitizer runtimes, only recommended by clang; openssl:
# the CLI that makes the TLS tests' certificates, scripts/tls_certs.sh; ninja-build: the test
# command's generator, which builds several named targets in parallel; podman, libcap2-bin
# (capsh), iproute2, util-linux, nodejs, npm and memcached: the server's image and the
# deployments run through it, server/tests/deployments; nodejs also runs the xDS tests'
# management server and the statsd daemon of the stats tests, whose npm packages
# scripts/test.sh installs with npm).
# Runs apt-get as root, or through sudo when not root.
set -euo pipefail

declare -A groups=(
  [demo]="cmake g++ make"
  [test]="cmake ninja-build g++ clang libclang-rt-14-dev clang-format make git pkg-config catch2 libhiredis-dev libssl-dev redis-server redis-tools libbenchmark-dev libyaml-cpp-dev libcpp-httplib-dev libhowardhinnant-date-dev tzdata openssl libgrpc++-dev libprotobuf-dev protobuf-compiler protobuf-compiler-grpc dpkg-dev libmicrohttpd-dev libre2-dev nginx-light caddy haproxy zlib1g-dev memcached podman libcap2-bin iproute2 util-linux nodejs npm"
  [bench]="cmake g++ make pkg-config libhiredis-dev libssl-dev redis-server redis-tools libbenchmark-dev gnuplot-nox python3 libevent-dev memcached zlib1g-dev libmicrohttpd-dev libre2-dev nginx-light wrk curl util-linux"
  [gateway]="cmake g++ make pkg-config libhiredis-dev libssl-dev libyaml-cpp-dev libcpp-httplib-dev redis-server redis-tools wrk curl"
)
groups[all]="${groups[test]} ${groups[bench]} ${groups[gateway]}"

[[ $# -eq 0 ]] && set -- all
wanted=()
for arg in "$@"; do
  if [[ -n "${groups[$arg]:-}" ]]; then
    read -r -a pkgs <<<"${groups[$arg]}"
    wanted+=("${pkgs[@]}")
  else
    wanted+=("$arg")
  fi
done

missing=()
for pkg in $(printf '%s\n' "${wanted[@]}" | sort -u); do
  # dpkg -s also lists removed-but-configured packages; only "install ok installed" counts.
  # npm comes inside some Node.js packages, which then provide it: its command counts, and
  # installing Debian's npm beside such a Node.js would conflict with it.
  if [[ "$pkg" == npm ]] && command -v npm >/dev/null; then
    continue
  fi
  if ! dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$pkg")
  fi
done

if [[ ${#missing[@]} -eq 0 ]]; then
  echo "deps: all present (${*})"
  exit 0
fi

if [[ $(id -u) -eq 0 ]]; then
  as_root=()
elif command -v sudo >/dev/null 2>&1; then
  as_root=(sudo)
else
  echo "deps: missing ${missing[*]}; run as root or install sudo" >&2
  exit 1
fi

echo "deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
"${as_root[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -qq
"${as_root[@]}" env DEBIAN_FRONTEND=noninteractive \
  apt-get install -y -qq --no-install-recommends "${missing[@]}"
