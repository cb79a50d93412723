#!/bin/sh
# units.sh - where the systemd units go. The source is configured (not
# built) in temporary build directories with --prefix P and each kind of
# -Dsystemdunitdir, and "meson introspect --installed" says where
# faultd.service and faultd.socket would be installed: by default in
# P/lib/systemd/system, a relative directory under P, an absolute one as
# given, and with "no" nowhere.
#
# usage: units.sh MESON SOURCE_DIR
set -eu

. "$(dirname "$0")/tap.sh"

[ $# -eq 2 ] || bail "usage: $0 MESON SOURCE_DIR"
meson=$1 src=$2
command -v python3 >/dev/null 2>&1 || bail "python3 not found"

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
prefix=$tmp/prefix

# units_of VALUE: where the units would go with -Dsystemdunitdir=VALUE,
# one line each, sorted.
units_of() {
	dir=$tmp/build-$(printf '%s' "$1" | tr -c 'a-z0-9' _)
	"$meson" setup "$dir" "$src" --prefix "$prefix" -Dsystemdunitdir="$1" \
		-Dtests=false -Dexamples=false -Dbench=false >"$dir.log" 2>&1 || {
		cat "$dir.log"
		return 1
	}
	"$meson" introspect "$dir" --installed | python3 -c '
import json, sys
for dest in sorted(json.load(sys.stdin).values()):
    if dest.endswith(("/faultd.service", "/faultd.socket")):
        print(dest)'
}

# expect DESCRIPTION VALUE DIR: the units go to DIR ("" for nowhere).
expect() {
	if got=$(units_of "$2"); then
		want=""
		[ -z "$3" ] || want=$(printf '%s\n' "$3/faultd.service" \
			"$3/faultd.socket")
		check "$1" test "$got" = "$want"
		[ "$got" = "$want" ] || diag "want: $want" "got: $got"
	else
		not_ok "$1"
		diag "meson setup -Dsystemdunitdir=$2 failed: $got"
	fi
}

expect "default: under the prefix" "" "$prefix/lib/systemd/system"
expect "a relative directory: under the prefix" "etc/units" \
	"$prefix/etc/units"
expect "an absolute directory: as given" "$tmp/system-units" \
	"$tmp/system-units"
expect "no: not installed" "no" ""

tap_end
