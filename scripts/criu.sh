#!/bin/sh
# criu.sh - print the path of a working criu (v4.1 or later, lazy pages
# usable on this kernel), or exit 77 with the reason on stderr.
#
#   $CRIU set:   that binary, if its version is >= 4.1 and it works here.
#   otherwise:   CRIU v4.2 built from criu-4.2.tar.gz (the peers folder
#                beside the checkout, or $CRIU_TARBALL) into
#                ${FAULTD_CACHE:-/var/cache/faultd}/criu-4.2, installing
#                the Debian packages its build needs when they are missing.
#
# The build and the checks run once: a stamp names the tarball's digest
# and the kernel they passed on, so a warm cache costs a few milliseconds.
# Callers running at the same time wait on one lock.
set -u

skip() {
	echo "criu.sh: $*" >&2
	exit 77
}

top=$(cd "$(dirname "$0")/.." && pwd)
cache=${FAULTD_CACHE:-/var/cache/faultd}/criu-4.2
kernel=$(uname -r)

# "criu check" and the lazy-pages feature, on this kernel.
works() {
	"$1" check >/dev/null 2>&1 || return 1
	"$1" check --feature uffd-noncoop >/dev/null 2>&1
}

version_ok() {
	v=$("$1" --version 2>/dev/null | sed -n 's/^Version: *//p')
	major=${v%%.*}
	rest=${v#*.}
	minor=${rest%%[!0-9]*}
	case "$major$minor" in
	'' | *[!0-9]*) return 1 ;;
	esac
	[ "$major" -gt 4 ] || { [ "$major" -eq 4 ] && [ "$minor" -ge 1 ]; }
}

if [ -n "${CRIU:-}" ]; then
	command -v "$CRIU" >/dev/null 2>&1 || skip "CRIU=$CRIU: not found"
	bin=$(command -v "$CRIU")
	version_ok "$bin" || skip "CRIU=$CRIU: its version is not 4.1 or later (4.1 fixed the vDSO bounds for kernels >= 6.13)"
	works "$bin" || skip "CRIU=$CRIU: 'criu check' or lazy pages (uffd-noncoop) fail on this kernel"
	echo "$bin"
	exit 0
fi

# The tarball: the peers folder beside this checkout, or beside the main
# checkout when this is a git worktree.
find_tarball() {
	if [ -n "${CRIU_TARBALL:-}" ]; then
		echo "$CRIU_TARBALL"
		return
	fi
	for base in "$top/.." \
	    "$(git -C "$top" rev-parse --path-format=absolute \
		--git-common-dir 2>/dev/null)/../.."; do
		f="$base/shared/peers/criu-4.2.tar.gz"
		[ -f "$f" ] && { echo "$f"; return; }
	done
}

tarball=$(find_tarball)
[ -n "$tarball" ] && [ -f "$tarball" ] ||
	skip "no criu-4.2.tar.gz (looked in ../shared/peers; set CRIU or CRIU_TARBALL)"

bin=$cache/criu/criu
stamp=$cache/.faultd-ok
sum=$(sha256sum "$tarball" | cut -d' ' -f1)
want="$sum $kernel"

[ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ] && [ -x "$bin" ] && {
	echo "$bin"
	exit 0
}

mkdir -p "$(dirname "$cache")" 2>/dev/null ||
	skip "cannot create $(dirname "$cache") (set FAULTD_CACHE)"
exec 9>"$cache.lock" || skip "cannot write $cache.lock"
flock 9 || skip "cannot lock $cache.lock"

# Another caller may have finished while we waited.
[ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ] && [ -x "$bin" ] && {
	echo "$bin"
	exit 0
}

# The build needs (criu-4.2/INSTALL.md and the peers README).
PKGS="gcc make pkg-config libprotobuf-dev libprotobuf-c-dev
protobuf-c-compiler protobuf-compiler python3-protobuf libnl-3-dev
libnl-route-3-dev libnet1-dev libcap-dev libaio-dev libgnutls28-dev
python3-yaml libbsd-dev libdrm-dev uuid-dev iproute2"

install_pkgs() {
	command -v dpkg-query >/dev/null 2>&1 || return 0
	missing=""
	for p in $PKGS; do
		dpkg-query -W -f='${Status}' "$p" 2>/dev/null |
			grep -q "install ok installed" || missing="$missing $p"
	done
	[ -z "$missing" ] && return 0
	[ "$(id -u)" = 0 ] || skip "missing Debian packages:$missing (run as root, or set CRIU)"
	echo "criu.sh: installing$missing" >&2
	export DEBIAN_FRONTEND=noninteractive
	{ apt-get install -y -q --no-install-recommends $missing ||
	  { apt-get update -q &&
	    apt-get install -y -q --no-install-recommends $missing; }; } \
		>"$cache.apt.log" 2>&1 ||
		skip "apt-get install$missing failed (see $cache.apt.log)"
}

install_pkgs
rm -rf "$cache"
mkdir -p "$cache.tmp" || skip "cannot create $cache.tmp"
tar -xzf "$tarball" -C "$cache.tmp" || skip "cannot unpack $tarball"
mv "$cache.tmp/criu-4.2" "$cache" && rmdir "$cache.tmp" ||
	skip "cannot move the source into $cache"
echo "criu.sh: building CRIU 4.2 in $cache" >&2
nice -n 10 make -C "$cache" -j"$(nproc)" criu >"$cache/build.log" 2>&1 ||
	skip "the build of CRIU 4.2 failed (see $cache/build.log)"
[ -x "$bin" ] || skip "the build left no $bin"
works "$bin" || skip "$bin: 'criu check' or lazy pages (uffd-noncoop) fail on this kernel"
echo "$want" >"$stamp"
echo "$bin"
