#!/bin/sh
# layers.sh - check that the daemon's folders are layers: a file uses only
# what its own folder and the folders below it define, never a folder
# above (daemon/common/common.h draws them), so no cycle can run between
# folders. Two checks, each of which would catch a slip the other missed:
#
#   includes  a file of a folder includes no header of a folder above,
#             nor the library's private internal.h (the daemon uses the
#             library through its narrow headers);
#   symbols   an object of a folder calls or reads no symbol that only an
#             object of a folder above defines (nm of the built objects:
#             what the daemon links, not what it says it includes).
#
#   layers.sh SOURCE_DIR BUILD_DIR
#
# Prints each violation (file, what it uses, from where) and exits 1 if
# there is one; 0 and one line saying what was checked otherwise.
set -eu
src=$1
build=$2
order="common sources engine fronts server tools"

rank() {
	i=0
	for l in $order; do
		[ "$l" = "$1" ] && { echo $i; return; }
		i=$((i + 1))
	done
	echo -1
}

bad=0
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# Headers: which folder each belongs to.
for l in $order; do
	for h in "$src"/daemon/$l/*.h; do
		[ -e "$h" ] && echo "$(basename "$h") $l"
	done
done >"$tmp/headers"

# 1. Includes.
for l in $order; do
	r=$(rank $l)
	for f in "$src"/daemon/$l/*.[ch]; do
		[ -e "$f" ] || continue
		sed -n 's/^#include "\([^"]*\)".*/\1/p' "$f" | while read -r h; do
			if [ "$h" = internal.h ]; then
				echo "layers: daemon/$l/$(basename "$f") includes" \
				     "the library's internal.h (use its narrow" \
				     "headers: uffd.h, lib.h, stats.h, img.h...)"
				echo x >>"$tmp/bad"
				continue
			fi
			hl=$(awk -v h="$h" '$1 == h { print $2 }' "$tmp/headers")
			[ -n "$hl" ] || continue # the library's, or generated
			if [ "$(rank "$hl")" -gt "$r" ]; then
				echo "layers: daemon/$l/$(basename "$f") includes" \
				     "$h of daemon/$hl/, a layer above"
				echo x >>"$tmp/bad"
			fi
		done
	done
done

# 2. Symbols. Meson names an object after its source's path: engine/space.c
# is engine_space.c.o, in whichever library or program links it.
objs=$(find "$build/daemon" -name '*.c.o' \( -path '*faultd-*.a.p/*' \
	-o -path '*faultd.p/*' \) | sort)
for o in $objs; do
	l=$(basename "$o" | sed 's/_.*//')
	[ "$(rank "$l")" -ge 0 ] || continue
	nm --defined-only -g "$o" | awk -v l="$l" 'NF == 3 { print $3, l }'
done | sort -u >"$tmp/defs"
for o in $objs; do
	l=$(basename "$o" | sed 's/_.*//')
	r=$(rank "$l")
	[ "$r" -ge 0 ] || continue
	nm --undefined-only -g "$o" | awk '{ print $NF }' | sort -u |
	join - "$tmp/defs" | while read -r sym dl; do
		# Defined in this layer or below as well: not an upward use.
		awk -v s="$sym" '$1 == s { print $2 }' "$tmp/defs" |
		while read -r any; do
			[ "$(rank "$any")" -le "$r" ] && echo ok
		done | grep -q ok && continue
		echo "layers: $(basename "$o" .o | sed 's/_/\//') uses $sym," \
		     "defined in daemon/$dl/, a layer above"
		echo x >>"$tmp/bad"
	done
done

if [ -s "$tmp/bad" ]; then
	echo "layers: $(wc -l <"$tmp/bad") uses break the layers ($order, bottom first; no internal.h)"
	exit 1
fi
echo "layers: $(echo "$objs" | wc -l) objects and their headers use only their layer and those below ($order)"
