#!/bin/sh
# deps.sh - make sure the Debian packages the build and tests need are
# installed. As root, install what is missing with apt-get (refreshing the
# package lists once if the first attempt fails); otherwise print the exact
# command to run and fail.
set -u

PKGS="gcc libc6-dev make pkg-config meson ninja-build
liburing-dev libnuma-dev liburcu-dev libhugetlbfs-dev libcriterion-dev
libsystemd-dev
libprotobuf-c-dev protobuf-c-compiler libsodium-dev iproute2 libssl-dev
g++ mandoc clang libclang-rt-dev
libnbd-dev libnbd-bin nbdkit nginx
${FAULTD_EXTRA_PKGS:-}"

if ! command -v dpkg-query >/dev/null 2>&1; then
	echo "deps: not a Debian system; make sure these are installed:" $PKGS
	exit 0
fi

missing=""
for p in $PKGS; do
	if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null |
	     grep -q "install ok installed"; then
		missing="$missing $p"
	fi
done
[ -z "$missing" ] && exit 0

if [ "$(id -u)" != 0 ]; then
	echo "deps: missing Debian packages:$missing"
	echo "deps: run: sudo apt-get install -y --no-install-recommends$missing"
	exit 1
fi

echo "deps: installing$missing"
export DEBIAN_FRONTEND=noninteractive
apt-get install -y -q --no-install-recommends $missing ||
	{ apt-get update -q && apt-get install -y -q --no-install-recommends $missing; }
