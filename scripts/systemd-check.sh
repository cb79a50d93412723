#!/bin/bash
# systemd-check.sh - faultd's units and its fd store under a real systemd:
# a QEMU guest whose PID 1 is systemd (this machine's PID 1 is not, so
# the units cannot be run here) boots the Debian distribution kernel and
# a minimal Debian root, installs the build there under its prefix, and
# runs scripts/systemd-check-guest.sh: faultd.socket enabled, the first
# client's connection starting faultd.service, a 256 MiB restore with
# `systemctl kill -s KILL` in its middle (systemd restarts the daemon,
# which adopts the session from its fd store, every byte right), then
# `systemctl stop`, `systemctl restart` and a start limit hit, each as
# faultd(8) says, and the daemon's log lines read back from the journal
# with their priorities. One line per check, PASS or FAIL; exit 0 when
# all passed, 1 when one failed, 77 (skipped, with the reason) when a
# tool or package is missing or the guest does not boot in time.
#
#   scripts/systemd-check.sh [BUILD_DIR]          (default: build)
#
# The root file system is made with mmdebstrap from this machine's own
# apt sources and release (minbase, systemd, and the packages of the
# libraries the installed programs load, found with ldd and dpkg -S, so
# that the host's build runs there), as an ext4 image cached under
# /var/cache/faultd/systemd-root/ (made once, about 35 s; its name is a
# hash of what went in). The guest writes over it in a throw-away
# snapshot (qemu's snapshot=on). This machine's own root through an
# overlay was not taken: it needs 9p or virtiofs modules and a daemon in
# the guest, and it boots whatever this machine has enabled; a root of
# 150 MB with nothing but systemd boots to the check in about 6 s under
# TCG. The kernel is the host's /boot one (scripts/guest.sh), loaded with
# a busybox initramfs that holds the modules of virtio-blk and ext4, and
# hands over to systemd with switch_root.
#
# The build's installation (meson install --destdir), the check, its
# client and the images it restores (checkpointed here) go in on a second
# disk, an ext4 image made for the run; the guest writes its journal
# there, read back with debugfs.
#
# Environment: KERNEL (default: the newest /boot/vmlinuz-*),
# SYSTEMD_CHECK_ACCEL=kvm|tcg (default: see scripts/guest.sh),
# SYSTEMD_CHECK_BOOT_TIMEOUT (seconds for the guest to reach the check,
# else skip; default 300), SYSTEMD_CHECK_TIMEOUT (seconds for the whole
# guest, else fail; default 900), SYSTEMD_CHECK_LOGS (the folder of the
# console log and the guest's journal; default BUILD_DIR/systemd-check),
# SYSTEMD_CHECK_CACHE (default /var/cache/faultd/systemd-root).
# Needs, as root: qemu-system-x86, a kernel in /boot (linux-image-amd64),
# busybox-static, cpio, mmdebstrap, e2fsprogs, kmod, and the Debian
# mirror the apt sources name (once, to make the root); `make
# systemd-check` installs the packages.
set -euo pipefail

build=${1:-build}
boot_limit=${SYSTEMD_CHECK_BOOT_TIMEOUT:-300}
limit=${SYSTEMD_CHECK_TIMEOUT:-900}
logs=${SYSTEMD_CHECK_LOGS:-$build/systemd-check}
cache=${SYSTEMD_CHECK_CACHE:-/var/cache/faultd/systemd-root}
here=$(cd "$(dirname "$0")" && pwd)

die() { echo "systemd-check: $*" >&2; exit 2; }
skip() { echo "systemd-check: SKIP: $*"; exit 77; }

. "$here/guest.sh"
[ "$(id -u)" = 0 ] || skip "needs root (mmdebstrap, the guest's images)"
command -v dpkg-query >/dev/null || skip "not a Debian system"
guest_kernel || skip "$guest_why"
guest_accel "${SYSTEMD_CHECK_ACCEL:-}" ||
	die "SYSTEMD_CHECK_ACCEL: $guest_why"
guest_tools qemu-system-x86_64 busybox cpio mmdebstrap mke2fs debugfs \
	modprobe cc || skip "$guest_why"
[ -x "$build/daemon/faultd" ] || die "$build is not built (ninja -C $build)"

work=$(mktemp -d /var/tmp/systemd-check.XXXXXX)
trap 'rm -rf "$work"' EXIT

# ---------------------------------------------------------------------
# The build as it is installed, the client, the check
# ---------------------------------------------------------------------

# The build's directories (meson's options, the prefix first).
option() {
	meson introspect "$build" --buildoptions | python3 -c '
import json, sys
o = {x["name"]: x["value"] for x in json.load(sys.stdin)}
v = o[sys.argv[1]]
print(v if v.startswith("/") or sys.argv[1] == "prefix" or v in ("", "no")
      else o["prefix"] + "/" + v)' "$1"
}
prefix=$(option prefix)
libdir=$(option libdir)
unitdir=$(option systemdunitdir)
[ -n "$unitdir" ] || unitdir=$prefix/lib/systemd/system
[ "$unitdir" != no ] || skip "the build installs no units (-Dsystemdunitdir=no)"

payload=$work/payload
dest=$payload/dest
mkdir -p "$dest" "$payload/out"
meson install -C "$build" --destdir "$dest" --no-rebuild --quiet >/dev/null
cc -std=gnu11 -O2 -Wall -Wextra -Werror -I"$dest$prefix/include" \
	"$here/systemd-check-client.c" -L"$dest$libdir" -lfaultd \
	-o "$payload/client"
cp "$here/systemd-check-guest.sh" "$payload/guest.sh"
# The images the guest restores, checkpointed here: under TCG the guest
# takes minutes to fill and checksum 256 MiB.
for mib in 256 64; do
	LD_LIBRARY_PATH="$dest$libdir" "$payload/client" checkpoint \
		"$payload/image-$mib" $mib
done
cat >"$payload/env" <<EOF
prefix=$prefix
libdir=$libdir
unitdir=$unitdir
sbindir=$(option sbindir)
bindir=$(option bindir)
EOF

# The Debian packages of the libraries the installed programs load.
packages() {
	local lib real

	for f in "$dest$(option sbindir)/faultd" "$dest$(option bindir)/faultctl" \
		 "$payload/client"; do
		LD_LIBRARY_PATH="$dest$libdir" ldd "$f"
	done | awk '/=> \// { print $3 }' | sort -u | while read -r lib; do
		case $lib in "$dest"*) continue ;; esac
		real=$(readlink -f "$lib")
		{ dpkg -S "$lib" 2>/dev/null || dpkg -S "$real" 2>/dev/null ||
		  dpkg -S "${real#/usr}" 2>/dev/null ||
		  echo "UNKNOWN: $lib"; } | head -1
	done | sed 's/:.*//' | sort -u
}
pkgs=$(packages | tr '\n' ' ')
case $pkgs in *UNKNOWN*) skip "no Debian package holds a library: $pkgs" ;; esac

# ---------------------------------------------------------------------
# The root file system: made once, then cached
# ---------------------------------------------------------------------

. /etc/os-release
suite=${VERSION_CODENAME:-}
[ -n "$suite" ] || skip "no VERSION_CODENAME in /etc/os-release"
sources=()
for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list \
	 /etc/apt/sources.list.d/*.sources; do
	[ -f "$f" ] && grep -q '^[^#]' "$f" && sources+=("$f")
done
[ ${#sources[@]} -gt 0 ] || skip "no apt sources for mmdebstrap"

# What the root holds besides packages: the check's unit, which mounts
# the second disk and runs its guest.sh on the console, and units masked
# that would only slow the boot (gettys, timers of a long-lived system).
root_setup() {
	local r=$1 u

	echo systemd-check >"$r/etc/hostname"
	cat >"$r/etc/systemd/system/systemd-check.service" <<'EOF'
[Unit]
Description=faultd under systemd (scripts/systemd-check.sh)
After=basic.target

[Service]
Type=oneshot
ExecStart=/bin/sh -c 'mkdir -p /check && mount /dev/vdb /check && exec /bin/sh /check/guest.sh'
StandardOutput=tty
StandardError=inherit
TTYPath=/dev/ttyS0
TTYReset=no
TTYVHangup=no
TimeoutStartSec=infinity

[Install]
WantedBy=multi-user.target
EOF
	mkdir -p "$r/etc/systemd/system/multi-user.target.wants"
	ln -sf /etc/systemd/system/systemd-check.service \
		"$r/etc/systemd/system/multi-user.target.wants/"
	for u in getty@tty1.service serial-getty@ttyS0.service \
		 apt-daily.timer apt-daily-upgrade.timer dpkg-db-backup.timer \
		 e2scrub_all.timer e2scrub_reap.service fstrim.timer \
		 systemd-pstore.service; do
		ln -sf /dev/null "$r/etc/systemd/system/$u"
	done
}

# The root's name: what goes in, with the versions installed here (a
# library updated here is updated there).
recipe="$suite $(dpkg-query -W -f='${Package}=${Version} ' systemd $pkgs)
$(declare -f root_setup)"
image=$cache/$(echo "$recipe" | sha256sum | cut -c1-16).img
mkdir -p "$cache"
(
	flock 9
	if [ ! -f "$image" ]; then
		echo "systemd-check: making the root ($suite: systemd $pkgs)"
		rm -rf "$work/root"
		list=$(echo systemd $pkgs | tr ' ' ,)
		mmdebstrap --quiet --variant=minbase \
			--aptopt='APT::Install-Recommends "false"' \
			--dpkgopt='path-exclude=/usr/share/man/*' \
			--dpkgopt='path-exclude=/usr/share/locale/*' \
			--dpkgopt='path-exclude=/usr/share/doc/*' \
			--include="$list" "$suite" "$work/root" "${sources[@]}" \
			>"$work/mmdebstrap.log" 2>&1 || {
			tail -20 "$work/mmdebstrap.log"
			echo "systemd-check: SKIP: mmdebstrap failed (above)"
			exit 77
		}
		root_setup "$work/root"
		rm -f "$cache"/*.img # a run that has one open keeps it
		mke2fs -q -t ext4 -L root -d "$work/root" "$image.new" 1G
		mv "$image.new" "$image"
		rm -rf "$work/root"
	fi
) 9>"$cache/lock" || exit $?

# ---------------------------------------------------------------------
# The initramfs and the guest
# ---------------------------------------------------------------------

initrd=$work/initrd
guest_busybox "$initrd"
mkdir -p "$initrd/newroot"
guest_modules "$initrd" virtio_pci virtio_blk ext4 >"$work/insmod" ||
	skip "$guest_why"
{
	echo '#!/bin/sh'
	echo '# Load the disk and file system modules, mount the root, hand over.'
	echo 'mount -t devtmpfs dev /dev'
	sed 's|$| 2>/dev/null|' "$work/insmod"
	echo 'mount -t ext4 /dev/vda /newroot || { echo "@@ NOROOT"; poweroff -f; }'
	echo 'exec switch_root /newroot /lib/systemd/systemd'
} >"$initrd/init"
chmod +x "$initrd/init"
guest_initrd "$initrd" "$work/initrd.gz"
mke2fs -q -t ext4 -L check -d "$payload" "$work/check.img" 1G

mkdir -p "$logs"
rm -rf "$logs/out"
log=$logs/console.log
echo "systemd-check: booting $(basename "$guest_kernel") with systemd as PID 1" \
     "(${guest_accel%%,*}; root $(basename "$image"), prefix $prefix)"
start=$(date +%s)

# The boot deadline: no "@@ BOOTED" from the guest in time, no check.
(
	trap 'kill $nap 2>/dev/null; exit 0' TERM
	sleep "$boot_limit" & nap=$!
	wait $nap
	[ -e "$work/booted" ] && exit 0
	touch "$work/noboot"
	kill "$(cat "$work/qemu.pid")" 2>/dev/null
) &
watchdog=$!

set +e
timeout "$limit" qemu-system-x86_64 \
	-machine q35 -accel "$guest_accel" -cpu "$guest_cpu" -smp 2 -m 2G \
	-kernel "$guest_kernel" -initrd "$work/initrd.gz" \
	-drive file="$image",format=raw,if=virtio,snapshot=on \
	-drive file="$work/check.img",format=raw,if=virtio \
	-append "console=ttyS0 quiet panic=-1 systemd.show_status=false" \
	-nic none -display none -monitor none -serial stdio -no-reboot \
	-pidfile "$work/qemu.pid" </dev/null |
	guest_console | tee "$log" |
	awk -v booted="$work/booted" '
		/^@@ BOOTED/ { printf "" > booted; close(booted) }
		/^@@ / { sub(/^@@ /, "  "); print; fflush() }
		/Kernel panic|BUG:|Oops/ { print "  console: " $0; fflush() }'
qemu_rc=${PIPESTATUS[0]}
set -e
kill $watchdog 2>/dev/null || true
wait $watchdog 2>/dev/null || true
elapsed=$(( $(date +%s) - start ))

debugfs -R "rdump /out $logs" "$work/check.img" >/dev/null 2>&1 || true
if [ -e "$work/noboot" ]; then
	skip "the guest did not boot within ${boot_limit}s (console: $log)"
elif [ ! -e "$work/booted" ]; then
	tail -5 "$log" | sed 's/^/  console: /'
	skip "the guest did not boot: qemu exit $qemu_rc (console: $log)"
fi

# ---------------------------------------------------------------------
# The summary
# ---------------------------------------------------------------------

passed=$(grep -c '^@@ PASS' "$log" || true)
failed=$(grep -c '^@@ FAIL' "$log" || true)
if ! grep -q '^@@ DONE' "$log"; then
	echo "  FAIL the guest did not finish (qemu exit $qemu_rc, timeout" \
	     "${limit}s or a crash)"
	failed=$((failed + 1))
fi
echo
echo "systemd-check: guest ran ${elapsed}s under ${guest_accel%%,*};" \
     "console: $log; journal: $logs/out/"
echo "systemd-check: $passed passed, $failed failed"
[ "$failed" = 0 ]
