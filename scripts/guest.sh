# guest.sh - what the guests of scripts/numa-check.sh and
# scripts/systemd-check.sh share: the Debian distribution kernel they boot
# (linux-image-amd64), the accelerator, a busybox initramfs with the
# kernel's modules it needs, and the serial console read as text.
# Sourced by bash. A function that cannot do its part returns 1 with the
# reason in $guest_why; the caller decides whether that is an error (2)
# or a skip (77).
#
# The accelerator: kvm when the host has hardware virtualization (kvm_intel
# or kvm_amd), tcg otherwise. A /dev/kvm backed by kvm_pvm, as on the
# project's machines, runs a stock kernel far slower than TCG: it did not
# leave the kernel's decompressor in 5 minutes, where TCG boots in 10 s.

# guest_kernel: the kernel to boot ($KERNEL, else the newest
# /boot/vmlinuz-*) in $guest_kernel, its release in $guest_kver.
guest_kernel() {
	guest_kernel=${KERNEL:-$(ls -v /boot/vmlinuz-* 2>/dev/null | tail -1 || true)}
	if [ -z "$guest_kernel" ] || [ ! -r "$guest_kernel" ]; then
		guest_why="no kernel in /boot (Debian: apt-get install linux-image-amd64)"
		return 1
	fi
	guest_kver=$(basename "$guest_kernel")
	guest_kver=${guest_kver#vmlinuz-}
}

# guest_accel [kvm|tcg]: $guest_accel and $guest_cpu for qemu; without an
# argument, the host's best (above).
guest_accel() {
	local want=${1:-}

	if [ -z "$want" ]; then
		want=tcg
		if [ -w /dev/kvm ] && { [ -d /sys/module/kvm_intel ] ||
					[ -d /sys/module/kvm_amd ]; }; then
			want=kvm
		fi
	fi
	case $want in
	kvm)	guest_cpu=host guest_accel=kvm ;;
	tcg)	guest_cpu=max guest_accel=tcg,thread=multi ;;
	*)	guest_why="the accelerator must be kvm or tcg, not $want"
		return 1 ;;
	esac
}

# guest_tools TOOL...: every TOOL is on the PATH, and busybox (if named)
# is a static one: it runs in an initramfs without libraries.
guest_tools() {
	local tool

	for tool in "$@"; do
		if ! command -v "$tool" >/dev/null; then
			guest_why="$tool is missing"
			return 1
		fi
	done
	case " $* " in
	*" busybox "*)
		if ldd "$(command -v busybox)" >/dev/null 2>&1; then
			guest_why="$(command -v busybox) is dynamically linked (Debian: busybox-static)"
			return 1
		fi ;;
	esac
}

# guest_busybox ROOT: an initramfs tree in ROOT with busybox and a link
# for each of its applets in ROOT/bin.
guest_busybox() {
	local root=$1 busybox applet

	busybox=$(command -v busybox)
	mkdir -p "$root"/{bin,dev,proc,sys,tmp}
	cp "$busybox" "$root/bin/busybox"
	for applet in $("$busybox" --list); do
		[ "$applet" = busybox ] || ln -sf busybox "$root/bin/$applet"
	done
}

# guest_copy_with_libs FILE ROOT DIR: FILE into ROOT/DIR, and every shared
# library it loads at the same path under ROOT.
guest_copy_with_libs() {
	local file=$1 root=$2 dir=$3 lib

	mkdir -p "$root/$dir"
	cp "$file" "$root/$dir/"
	for lib in $(ldd "$file" | awk '/=> \// { print $3 } /^\t\// { print $1 }')
	do
		[ -e "$root$lib" ] || cp -L --parents "$lib" "$root"
	done
}

# guest_modules ROOT MODULE...: the modules of $guest_kver that MODULE...
# need, copied into ROOT/lib/modules; prints the insmod commands that load
# them, in order.
guest_modules() {
	local root=$1 mod deps="" ko
	shift

	if [ ! -d "/lib/modules/$guest_kver" ]; then
		guest_why="no /lib/modules/$guest_kver for $guest_kernel"
		return 1
	fi
	for mod in "$@"; do
		if ! ko=$(modprobe -S "$guest_kver" --show-depends "$mod"); then
			guest_why="modprobe: no module $mod for $guest_kver"
			return 1
		fi
		deps="$deps$ko"$'\n'
	done
	mkdir -p "$root/lib/modules"
	for ko in $(echo "$deps" |
		    awk '$1 == "insmod" && !seen[$2]++ { print $2 }'); do
		cp "$ko" "$root/lib/modules/"
		echo "insmod /lib/modules/$(basename "$ko")"
	done
}

# guest_initrd ROOT OUT: the initramfs of ROOT, as the kernel takes it.
guest_initrd() {
	(cd "$1" && find . | cpio -o -H newc --quiet | gzip -1) >"$2"
}

# guest_console: the serial console as text lines (no carriage returns,
# no colours), line by line as they come.
guest_console() {
	tr -d '\r' | sed -u 's/\x1b\[[0-9;]*m//g'
}
