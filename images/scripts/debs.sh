#!/bin/sh
# The deb flavour's CUDA toolkit from Debian's archive (main, contrib, non-free), pinned by a lock.
# apt verifies every .deb against the archive's signed index (InRelease -> Packages -> sha256,
# with the base image's Debian archive keyring); the lock then fixes which packages, at which
# versions, with which sha256 (as that index published them) make up the image.
#   debs.sh lock PACKAGE[=VERSION]...  print the lock: every package apt would add to this image,
#                                      "name version sha256 size pool-path" from the signed index
#   debs.sh install LOCK               install exactly the locked packages; refuse if what apt
#                                      downloads differs from the lock in any package or digest
set -eu
# The suite's contrib and non-free components next to the base image's own main.
. /etc/os-release
echo "deb http://deb.debian.org/debian $VERSION_CODENAME contrib non-free" \
  > /etc/apt/sources.list.d/opforge-cuda.list
apt-get update -qq
mode=$1; shift
case "$mode" in
lock)
  apt-get install -s --no-install-recommends "$@" | awk '/^Inst /{print $2, substr($3, 2)}' |
  while read -r name version; do
    apt-cache show "$name=$version" | awk -v n="$name" -v v="$version" '
      /^SHA256:/ {s = $2} /^Size:/ {z = $2} /^Filename:/ {f = $2} /^$/ {exit}
      END {print n, v, s, z, f}'
  done
  ;;
install)
  lock=$1
  grep -v '^#' "$lock" | awk 'NF {print $1 "=" $2}' > /tmp/debs.wanted
  apt-get clean  # a debootstrap base keeps its own .debs in apt's archive folder
  # shellcheck disable=SC2046
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends --download-only \
    $(cat /tmp/debs.wanted) >/dev/null
  grep -v '^#' "$lock" | awk 'NF {print $3}' | sort > /tmp/debs.locked
  (cd /var/cache/apt/archives && sha256sum ./*.deb) | awk '{print $1}' | sort > /tmp/debs.got
  if ! cmp -s /tmp/debs.locked /tmp/debs.got; then
    echo "debs.sh: the packages apt resolved differ from $lock (base image or archive changed):" >&2
    diff /tmp/debs.locked /tmp/debs.got | grep '^[<>]' | head -20 \
      | sed 's/^</  locked, not downloaded:/; s/^>/  downloaded, not locked:/' >&2
    echo "debs.sh: re-lock with \`opforge images lock-debs\` for this base image" >&2
    exit 1
  fi
  # shellcheck disable=SC2046
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends --no-download \
    $(cat /tmp/debs.wanted) >/dev/null
  echo "debs.sh: installed $(wc -l < /tmp/debs.wanted) packages, each matching $lock"
  apt-get clean
  rm -rf /var/lib/apt/lists/* /etc/apt/sources.list.d/opforge-cuda.list /tmp/debs.*
  ;;
*)
  echo "usage: debs.sh lock PACKAGE... | debs.sh install LOCK" >&2; exit 2
  ;;
esac
