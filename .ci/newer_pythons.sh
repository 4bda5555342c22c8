#!/usr/bin/env bash
# Python 3.14 and 3.15, from Debian's unstable archive, in a chroot built once and cached
# outside the repository: the README's test command on each, from a copy of the repository.
# Needs root (debootstrap, chroot, mounts) and Debian's archive; without, a line "SKIPPED: why" (.ci/run counts it).
#   bash .ci/newer_pythons.sh                       # the README's test command on each
#   bash .ci/newer_pythons.sh --run SCRIPT ARGS...  # a script of the repository instead (chroot built already)
set -euo pipefail
cd "$(dirname "$0")/.."
cache="${TMPDIR:-/tmp}/dataset-client-ci-sid"  # ~330 MB, about a minute to build
versions=(3.14 3.15)
command=(.ci/unittest_summary.py)
built_only=false
if [ "${1:-}" = "--run" ]; then
  shift
  command=("$@")
  built_only=true
fi

skip() {
  echo "SKIPPED: Python ${versions[*]} (Debian unstable chroot): $*"
  exit 0
}

chroot_ready() {
  [ -f "$cache/.built" ] && for version in "${versions[@]}"; do [ -x "$cache/usr/bin/python$version" ] || return 1; done
}

build_chroot() {
  if ! command -v debootstrap >/dev/null; then
    { apt-get update -q && apt-get install -y -q debootstrap; } >/dev/null 2>&1 || return 1
  fi
  local building="$cache.building" packages
  packages="$(printf 'python%s,' "${versions[@]}")ca-certificates"
  remove_chroot "$building"
  echo "== building the Debian unstable chroot in $cache (debootstrap --variant=minbase, about a minute)"
  debootstrap --variant=minbase --include="$packages" sid "$building" >"$cache.log" 2>&1 || return 1
  touch "$building/.built"
  remove_chroot "$cache"
  mv "$building" "$cache"
}

mounts=(dev dev/pts proc)
mount_all() {
  for point in "${mounts[@]}"; do mount --bind "/$point" "$cache/$point"; done
}

unmount_all() {  # $1: a chroot; whatever is mounted below it (ours, or left by a failed debootstrap), deepest first
  local point
  awk -v root="$1/" 'index($2, root) == 1 { print $2 }' /proc/mounts | sort -r | while read -r point; do
    umount -l "$point"
  done
}

remove_chroot() {  # never into a file system mounted below it, should one be left
  unmount_all "$1"
  rm -rf --one-file-system "$1"
}

[ "$(id -u)" = 0 ] || skip "it needs root (debootstrap, chroot and bind mounts)"
command -v chroot >/dev/null || skip "no chroot command here"
if ! chroot_ready; then
  [ "$built_only" = false ] || skip "no chroot built in $cache (bash .ci/newer_pythons.sh builds it)"
  build_chroot || skip "debootstrap of Debian sid failed (no Debian archive reachable?); see $cache.log"
fi
chroot_ready || skip "the chroot in $cache has no ${versions[*]}"

trap 'unmount_all "$cache"' EXIT
mount_all
rm -rf "$cache/repo"
mkdir -p "$cache/repo"
tar --exclude=.git -cf - . | tar -xf - -C "$cache/repo"
status=0
for version in "${versions[@]}"; do
  # A clean environment: the host's proxy and CA variables would mean nothing inside.
  chroot "$cache" /usr/bin/env -i PATH=/usr/bin:/bin HOME=/root TERM=dumb PYTHONDONTWRITEBYTECODE=1 \
    sh -c 'cd /repo && exec "$@"' sh "python$version" "${command[@]}" || status=1
done
exit "$status"
