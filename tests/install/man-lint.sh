#!/bin/sh
# man-lint.sh - the manual is clean and complete: every page passes
# "mandoc -T lint" (and groff's warnings) with nothing at the warning level
# or worse and has the sections a page of ours must have; every .so link
# resolves, from a man3/ man7/ tree as installed, to a page whose NAME
# lists it; every exported symbol has a page and is in libfaultd(7), and
# so is every page of sections 1, 5, 7 and 8; every page documents an
# exported function; every cross-reference to one of our pages, name(N) in
# any section, resolves; every file of man/ is installed by man/meson.build.
#
# usage: man-lint.sh MAN_DIR MAP
set -eu

. "$(dirname "$0")/tap.sh"

[ $# -eq 2 ] || bail "usage: $0 MAN_DIR MAP"
man=$1 map=$2
command -v mandoc >/dev/null 2>&1 ||
	bail "mandoc not found (Debian: mandoc; scripts/deps.sh installs it)"

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# The installed layout, where ".so man3/x.3" resolves.
for f in "$man"/*.[1-9]; do
	sect=${f##*.}
	mkdir -p "$tmp/man$sect"
	ln -s "$(cd "$(dirname "$f")" && pwd)/$(basename "$f")" "$tmp/man$sect/"
done

sed -e 's,/\*.*\*/,,' "$map" | awk '
	/^[ \t]*global:/ { g = 1; next }
	/^[ \t]*local:/ { g = 0; next }
	g && /^[ \t]*[A-Za-z_][A-Za-z0-9_]*[ \t]*;/ {
		gsub(/[ \t;]/, ""); print }' | sort >"$tmp/symbols"
[ -s "$tmp/symbols" ] || bail "no symbols found in $map"

# A .so link: nothing but comments and one ".so manN/page.N" line.
is_link() {
	[ "$(grep -v '^\.\\"' "$1" | grep -c .)" -eq 1 ] &&
		grep -q '^\.so man[1-9]/[A-Za-z0-9_.]*\.[1-9]$' "$1"
}

link_target() {
	sed -n 's/^\.so //p' "$1"
}

# The names a page's NAME section lists, one a line.
page_names() {
	awk '/^\.SH /{ f = ($2 == "NAME"); next } f' "$1" | tr '\n' ' ' |
		sed 's/\\-.*//' | tr ', ' '\n\n' | grep .
}

page_sections() {
	sed -n 's/^\.SH "*\([^"]*\)"*$/\1/p' "$1"
}

# The body of section $2 of page $1.
page_section() {
	awk -v s="$2" '/^\.SH /{ t = $0; sub(/^\.SH "?/, "", t);
		sub(/"$/, "", t); f = (t == s); next } f' "$1"
}

has_sections() {
	has_f=$1
	shift
	for s in "$@"; do
		page_sections "$has_f" | grep -qx "$s" || {
			echo "no $s section"
			return 1
		}
	done
}

title_ok() {
	base=$(basename "$1")
	want="$(echo "${base%.*}" | tr '[:lower:]' '[:upper:]') ${base##*.}"
	got=$(sed -n 's/^\.TH \([^ ]*\) \([^ ]*\).*/\1 \2/p' "$1")
	[ "$got" = "$want" ] || {
		echo ".TH says \"$got\", the file name \"$want\""
		return 1
	}
}

mandoc_clean() {
	out=$(mandoc -T lint -W warning "$1" 2>&1) && [ -z "$out" ] || {
		echo "$out"
		return 1
	}
}

groff_clean() {
	out=$(groff -man -ww -z -Tutf8 "$1" 2>&1) && [ -z "$out" ] || {
		echo "$out"
		return 1
	}
}

link_ok() {
	target=$(link_target "$1")
	[ -f "$tmp/$target" ] || {
		echo "$target: no such page"
		return 1
	}
	! is_link "$tmp/$target" || {
		echo "$target is a link itself"
		return 1
	}
	base=$(basename "$1")
	page_names "$tmp/$target" | grep -qx "${base%.*}" || {
		echo "the NAME of $target does not list ${base%.*}"
		return 1
	}
	# From the installed layout, at the error level: the target resolves
	# (mandoc warns about every .so, so the warning level cannot be used).
	out=$(cd "$tmp" && mandoc -T lint -W error \
		"man${base##*.}/$base" 2>&1) || {
		echo "$out"
		return 1
	}
}

# The references "name(N)" page $1 makes to pages of ours (names that
# begin with faultd, faultctl or libfaultd: faultd_x(3), faultctl(1),
# faultd-image(5), libfaultd(7), faultd(8)), one "name.N" a line: in macro
# arguments (".BR faultd (8)," or ".RB ( faultd\-image (5)):") as in text
# ("\fBfaultd\fP(8)"), comments left out.
page_refs() {
	sed -e '/^\.\\"/d' -e 's/\\-/-/g' -e 's/\\f[BIRP]//g' \
		-e 's/\\f([A-Z][A-Z]//g' -e 's/"//g' "$1" |
		grep -oE '(^|[^A-Za-z0-9_.-])(faultd[A-Za-z0-9_.-]*|faultctl|libfaultd) ?\([1-9]\)' |
		sed -E 's/^[^A-Za-z0-9_.-]//; s/ ?\(([1-9])\)$/.\1/'
}

# Every reference to a page of ours names a file of man/, in any section.
refs_ok() {
	bad=""
	for ref in $(page_refs "$1"); do
		[ -f "$man/$ref" ] || bad="$bad $ref"
	done
	[ -z "$bad" ] || {
		echo "no such page:$bad"
		return 1
	}
}

installed() {
	grep -q "'$(basename "$1")'" "$man/meson.build" || {
		echo "not in $man/meson.build"
		return 1
	}
}

have_groff=1
command -v groff >/dev/null 2>&1 || have_groff=0

for f in "$man"/*.[1-9]; do
	page=$(basename "$f")
	check "$page is installed by man/meson.build" installed "$f"
	if is_link "$f"; then
		check "$page links to a page that lists it" link_ok "$f"
		continue
	fi
	check "$page: mandoc -T lint, nothing at warning level" \
		mandoc_clean "$f"
	if [ "$have_groff" = 1 ]; then
		check "$page: groff -ww, no warning" groff_clean "$f"
	else
		skip "$page: groff -ww, no warning" "groff not found"
	fi
	check "$page: .TH matches the file name" title_ok "$f"
	case $page in
	*.3)
		check "$page has the sections of a function page" \
			has_sections "$f" NAME SYNOPSIS DESCRIPTION \
			"RETURN VALUE" ERRORS "THREAD SAFETY" "SEE ALSO"
		;;
	*)
		check "$page has the sections of an overview page" \
			has_sections "$f" NAME SYNOPSIS DESCRIPTION "SEE ALSO"
		;;
	esac
	check "$page: its references name pages of man/" refs_ok "$f"
done

# Symbols and pages, both ways.
for f in "$man"/*.3; do
	is_link "$f" || page_names "$f"
done | sort -u >"$tmp/documented"
unknown=$(grep '^faultd_' "$tmp/documented" | comm -23 - "$tmp/symbols")
check "every function a page documents is exported (in the map)" \
	test -z "$unknown"
[ -z "$unknown" ] || diag "not in the map:" $unknown

no_page="" not_named="" no_synopsis="" not_in_overview=""
while read -r sym; do
	f="$man/$sym.3"
	if [ ! -f "$f" ]; then
		no_page="$no_page $sym"
		continue
	fi
	is_link "$f" && f="$tmp/$(link_target "$f")"
	[ -f "$f" ] || continue # reported by the link check
	page_names "$f" | grep -qx "$sym" || not_named="$not_named $sym"
	page_section "$f" SYNOPSIS | grep -q "[ *]$sym(" ||
		no_synopsis="$no_synopsis $sym"
	grep -q "^\.BR $sym (3)" "$man/libfaultd.7" ||
		not_in_overview="$not_in_overview $sym"
done <"$tmp/symbols"
check "every exported symbol has a page or a .so link" test -z "$no_page"
[ -z "$no_page" ] || diag "no man/SYMBOL.3 for:$no_page"
check "every exported symbol is in the NAME of its page" test -z "$not_named"
[ -z "$not_named" ] || diag "not in NAME:$not_named"
check "every exported symbol is declared in the SYNOPSIS of its page" \
	test -z "$no_synopsis"
[ -z "$no_synopsis" ] || diag "not in SYNOPSIS:$no_synopsis"
check "libfaultd(7) refers to every exported symbol" \
	test -z "$not_in_overview"
[ -z "$not_in_overview" ] || diag "not in libfaultd.7:$not_in_overview"

# The pages that are not about one function: the overview refers to each.
page_refs "$man/libfaultd.7" | sort -u >"$tmp/overview_refs"
unlisted=""
for f in "$man"/*.[1-9]; do
	page=$(basename "$f")
	case $page in
	*.3 | libfaultd.7) continue ;;
	esac
	grep -qxF "$page" "$tmp/overview_refs" || unlisted="$unlisted $page"
done
check "libfaultd(7) refers to every page of sections 1, 5, 7 and 8" \
	test -z "$unlisted"
[ -z "$unlisted" ] || diag "not in libfaultd.7:$unlisted"

tap_end
