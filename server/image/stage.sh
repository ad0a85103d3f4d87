#!/usr/bin/env bash
# Stages the server's image context from a build: CONTEXT/rootfs/ gets /bin/ratelimit (the built
# binary, copied as it is: nothing is compiled), the dynamic loader and every shared library ldd
# names, at their own paths, the CA bundle, the time zone database, /etc/passwd and /etc/group
# naming user 65534, /etc/nsswitch.conf (host names from /etc/hosts, then DNS, as glibc reads
# them), and empty /etc/hosts, /etc/resolv.conf, /proc, /dev and /tmp for the runtime to mount
# over. CONTEXT/Containerfile is a copy of the one beside this script.
#
#   server/image/stage.sh BINARY CONTEXT
#
# The libraries come from this machine (the ones the binary was linked against), so the image
# runs on any Linux kernel the build machine's glibc supports.
set -euo pipefail
if [[ $# -ne 2 ]]; then
  echo "usage: stage.sh BINARY CONTEXT" >&2
  exit 2
fi
binary=$1
context=$2
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
[[ -x "$binary" ]] || { echo "stage.sh: BINARY '$binary' is not an executable" >&2; exit 2; }

root="$context/rootfs"
rm -rf "$root"
mkdir -p "$root/bin" "$root/etc/ssl/certs" "$root/usr/share" "$root/proc" "$root/dev" "$root/tmp"
chmod 1777 "$root/tmp"
install -m 0755 "$binary" "$root/bin/ratelimit"

# copy_path FILE: the file FILE names (a library's or the loader's name is a symbolic link to a
# versioned file) as a regular file at FILE's own path under rootfs: the loader finds it by that
# name, and the image needs no link into a directory layout (usrmerge) it may not share.
copy_path() {
  mkdir -p "$root$(dirname "$1")"
  cp -L "$1" "$root$1"
}
# ldd prints "name => /path (addr)" for a library and "/path (addr)" for the loader; linux-vdso
# has no file. A library ldd cannot find is an error, not a broken image.
if ldd "$binary" | grep -q "not found"; then
  ldd "$binary" >&2
  echo "stage.sh: a shared library of $binary is not found" >&2
  exit 1
fi
count=0
while read -r lib; do
  copy_path "$lib"
  count=$((count + 1))
done < <(ldd "$binary" | grep -o '/[^ ]*' | sort -u)
# The loader is also named by the usrmerged path the binary's PT_INTERP may use.
interp=$(readelf -l "$binary" | sed -n 's/.*Requesting program interpreter: \(.*\)]/\1/p')
[[ -n "$interp" && ! -e "$root$interp" ]] && copy_path "$interp"

cp -L /etc/ssl/certs/ca-certificates.crt "$root/etc/ssl/certs/ca-certificates.crt"
cp -a /usr/share/zoneinfo "$root/usr/share/zoneinfo"
printf 'root:x:0:0:root:/:/sbin/nologin\nnobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin\n' \
  >"$root/etc/passwd"
printf 'root:x:0:\nnogroup:x:65534:\n' >"$root/etc/group"
printf 'hosts: files dns\n' >"$root/etc/nsswitch.conf"
: >"$root/etc/hosts"
: >"$root/etc/resolv.conf"
cp "$here/Containerfile" "$context/Containerfile"
echo "stage.sh: $root: /bin/ratelimit, $count shared objects, CA bundle, zoneinfo ($(du -sh "$root" | cut -f1))"
