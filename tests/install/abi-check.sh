#!/bin/sh
# abi-check.sh - the exported ABI is exactly the public API: the symbols of
# libfaultd.map, each declared in faultd.h and exported (and versioned) by
# libfaultd.so, which exports nothing else; every function faultd.h
# declares is in the map; the version in faultd.h, in the library and in
# meson.build agree, and so does the soname.
#
# usage: abi-check.sh MAP HEADER LIBFAULTD.SO PROJECT_VERSION ABI_VERSION_PROG
set -eu

. "$(dirname "$0")/tap.sh"

[ $# -eq 5 ] || bail "usage: $0 MAP HEADER SO VERSION VERSION_PROG"
map=$1 header=$2 so=$3 version=$4 version_prog=$5
for tool in nm readelf "${CC:-cc}"; do
	command -v "$tool" >/dev/null 2>&1 || bail "$tool not found"
done

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# The names in the map's global: lists, and its version nodes.
sed -e 's,/\*.*\*/,,' -e 's/#.*//' "$map" | awk '
	/^[ \t]*global:/ { g = 1; next }
	/^[ \t]*local:/ { g = 0; next }
	g && /^[ \t]*[A-Za-z_][A-Za-z0-9_]*[ \t]*;/ {
		gsub(/[ \t;]/, ""); print }' | sort >"$tmp/map"
sed -n 's/^[ \t]*\([A-Za-z_][A-Za-z0-9_.]*\)[ \t]*{.*/\1/p' "$map" |
	sort >"$tmp/nodes"
[ -s "$tmp/map" ] || bail "no symbols found in $map"
[ -s "$tmp/nodes" ] || bail "no version node found in $map"

# The functions faultd.h declares, comments removed (they name functions
# too). A declaration has the name right before its "(".
"${CC:-cc}" -fpreprocessed -dD -E -P "$header" 2>/dev/null |
	grep -o '\bfaultd_[A-Za-z0-9_]*[ \t]*(' | sed 's/[ \t]*($//' |
	sort -u >"$tmp/header"
[ -s "$tmp/header" ] || bail "no function declarations found in $header"

# The dynamic symbols the library defines: "name@@NODE" (A: the nodes).
nm -D --defined-only "$so" >"$tmp/nm" || bail "nm -D $so failed"
awk '$2 != "A" { print $3 }' "$tmp/nm" | sort >"$tmp/exported-versioned"
sed 's/@.*//' "$tmp/exported-versioned" | sort >"$tmp/exported"
awk '$2 == "A" { print $3 }' "$tmp/nm" | sort >"$tmp/exported-nodes"

missing_decl=$(comm -23 "$tmp/map" "$tmp/header")
check "every symbol of the map is declared in faultd.h" \
	test -z "$missing_decl"
[ -z "$missing_decl" ] || diag "not in faultd.h:" $missing_decl

not_in_map=$(comm -13 "$tmp/map" "$tmp/header")
check "every function faultd.h declares is in the map" \
	test -z "$not_in_map"
[ -z "$not_in_map" ] || diag "not in the map:" $not_in_map

not_exported=$(comm -23 "$tmp/map" "$tmp/exported")
check "every symbol of the map is exported by $(basename "$so")" \
	test -z "$not_exported"
[ -z "$not_exported" ] || diag "not exported:" $not_exported

stray=$(comm -13 "$tmp/map" "$tmp/exported")
check "$(basename "$so") exports nothing but the map's symbols" \
	test -z "$stray"
[ -z "$stray" ] || diag "exported but not in the map:" $stray

unversioned=$(grep -v '@@' "$tmp/exported-versioned" || true)
bad_node=$(grep '@@' "$tmp/exported-versioned" | sed 's/.*@@//' | sort -u |
	comm -23 - "$tmp/nodes")
check "every exported symbol carries a version node of the map" \
	test -z "$unversioned$bad_node"
[ -z "$unversioned$bad_node" ] || diag "unversioned or foreign:" \
	$unversioned $bad_node
check "the version nodes exported are the map's" \
	cmp -s "$tmp/nodes" "$tmp/exported-nodes"

# Versions: faultd.h, meson.build, the library, the soname.
h_string=$(sed -n 's/^#define FAULTD_VERSION_STRING "\(.*\)"$/\1/p' "$header")
h_numbers=$(for part in MAJOR MINOR PATCH; do
	sed -n "s/^#define FAULTD_VERSION_$part \([0-9]*\)\$/\1/p" "$header"
done | paste -sd.)
check "FAULTD_VERSION_STRING ($h_string) is the project version ($version)" \
	test "$h_string" = "$version"
check "FAULTD_VERSION_MAJOR.MINOR.PATCH ($h_numbers) is the project version" \
	test "$h_numbers" = "$version"

if out=$("$version_prog"); then
	lib_version=${out% *}
	built_with=${out#* }
	check "faultd_version() ($lib_version) is the project version" \
		test "$lib_version" = "$version"
	check "a program built with faultd.h sees FAULTD_VERSION_STRING $version" \
		test "$built_with" = "$version"
else
	not_ok "$(basename "$version_prog") runs"
fi

soname=$(readelf -d "$so" | sed -n 's/.*(SONAME).*\[\(.*\)\]/\1/p')
check "the soname ($soname) is libfaultd.so.${version%%.*}" \
	test "$soname" = "libfaultd.so.${version%%.*}"

tap_end
