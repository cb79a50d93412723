#!/bin/sh
# header-check.sh - faultd.h compiles on its own, warning-free, in the
# strictest modes a user may build in: ISO C11 with -pedantic, and C++
# (C++11 and the compiler's default) with -pedantic; included twice, it
# still compiles (include guard); and a C++ program links its functions
# (extern "C").
#
# usage: header-check.sh c|c++ INCLUDE_DIR LIBFAULTD.SO
set -eu

. "$(dirname "$0")/tap.sh"

[ $# -eq 3 ] || bail "usage: $0 c|c++ INCLUDE_DIR LIBFAULTD.SO"
lang=$1 inc=$2 so=$3
case $lang in
c) compiler=${CC:-gcc} ext=c ;;
c++) compiler=${CXX:-g++} ext=cc ;;
*) bail "unknown language $lang" ;;
esac
command -v "$compiler" >/dev/null 2>&1 ||
	bail "$compiler not found (scripts/deps.sh installs it)"

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# Nothing before the header: it must bring what it uses itself.
cat >"$tmp/use.$ext" <<'EOF'
#include <faultd.h>
#include <faultd.h>

int main(void)
{
	return faultd_version()[0] == 0;
}
EOF

warn="-Wall -Wextra -pedantic -Werror"
if [ "$lang" = c ]; then
	# $warn is a list of words: unquoted on purpose.
	check "faultd.h: gcc -std=c11 -pedantic -Wall -Wextra, no warning" \
		"$compiler" -std=c11 $warn -Wstrict-prototypes -fsyntax-only \
		-I"$inc" "$tmp/use.c"
else
	check "faultd.h: g++ -std=c++11 -pedantic -Wall -Wextra, no warning" \
		"$compiler" -std=c++11 $warn -fsyntax-only -I"$inc" "$tmp/use.cc"
	check "faultd.h: g++ (default standard) -pedantic -Wall -Wextra" \
		"$compiler" $warn -fsyntax-only -I"$inc" "$tmp/use.cc"
	check "a C++ program links libfaultd's functions (extern \"C\")" \
		"$compiler" -I"$inc" -o "$tmp/use" "$tmp/use.cc" "$so"
fi

tap_end
