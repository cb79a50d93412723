#!/bin/sh
# consumer.sh - the library as an outside program sees it. Install the
# build into a temporary DESTDIR; check that nothing is installed outside
# the prefix, and that the shared and static library, faultd.h,
# libfaultd.pc, the man pages and the systemd units land where they
# belong; then build every program of examples/ against the installed
# copy only, with pkg-config (PKG_CONFIG_SYSROOT_DIR pointing into the DESTDIR), run them
# with LD_LIBRARY_PATH set to the installed lib dir, and link one against
# the static library with "pkg-config --static"; check that libfaultd.a
# defines nothing but the exported API, so that a static program with
# functions named as the library's internals (static-clash.c) links and
# works.
#
# usage: consumer.sh MESON BUILD_DIR SOURCE_DIR PROJECT_VERSION
set -eu

. "$(dirname "$0")/tap.sh"

[ $# -eq 4 ] || bail "usage: $0 MESON BUILD_DIR SOURCE_DIR VERSION"
meson=$1 build=$2 src=$3 version=$4
cc=${CC:-cc}
for tool in "$cc" pkg-config readelf ldd python3; do
	command -v "$tool" >/dev/null 2>&1 ||
		bail "$tool not found (scripts/deps.sh installs what is needed)"
done

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
dest=$tmp/destdir

# The directories meson installs to, absolute (before the DESTDIR).
"$meson" introspect "$build" --buildoptions >"$tmp/options.json" ||
	bail "meson introspect failed"
eval "$(python3 - "$tmp/options.json" <<'EOF'
import json, os, sys
opts = {o["name"]: o["value"] for o in json.load(open(sys.argv[1]))}
for name in ("libdir", "includedir", "mandir", "sbindir"):
    print("%s='%s'" % (name, os.path.join(opts["prefix"], opts[name])))
print("prefix='%s'" % opts["prefix"])
print("unitdir='%s'" % opts.get("systemdunitdir", ""))
print("sanitize='%s'" % opts.get("b_sanitize", "none"))
EOF
)"

# A library built with sanitizers needs their runtime in the program: an
# outside program built against it would use the same -fsanitize.
san=""
if [ "$sanitize" != none ]; then
	san="-fsanitize=$sanitize"
	diag "the library is built with $san: so are the programs here"
fi

# Nothing is built here: meson test built what the tests need, and ninja
# (make test) the rest. Say what is missing rather than fail in install.
"$meson" introspect "$build" --installed >"$tmp/installed.json"
missing=$(python3 - "$tmp/installed.json" <<'EOF'
import json, os, sys
for built in json.load(open(sys.argv[1])):
    if os.path.isabs(built) and not os.path.lexists(built):
        print(built)
EOF
)
[ -z "$missing" ] || bail "not built (run ninja -C $build first):" $missing

# Nothing goes outside the prefix unless the build was told so.
outside=$(python3 - "$tmp/installed.json" "$prefix" <<'EOF'
import json, os, sys
prefix = os.path.join(sys.argv[2], "")
for dest in json.load(open(sys.argv[1])).values():
    if not dest.startswith(prefix):
        print(dest)
EOF
)
if [ -z "$unitdir" ]; then
	check "every file installs under the prefix $prefix" test -z "$outside"
	[ -z "$outside" ] || diag "outside the prefix:" $outside
else
	skip "every file installs under the prefix $prefix" \
		"-Dsystemdunitdir=$unitdir"
fi

out=$("$meson" install -C "$build" --no-rebuild --destdir "$dest" 2>&1) || {
	diag "$out"
	bail "meson install --destdir failed"
}
ok "meson install --destdir"

lib=$dest$libdir
inc=$dest$includedir
mandest=$dest$mandir
soversion=${version%%.*}

check "faultd.h in $includedir is the source's" \
	cmp "$src/libfaultd/include/faultd.h" "$inc/faultd.h"
check "libfaultd.so.$version in $libdir" test -f "$lib/libfaultd.so.$version"
check "libfaultd.so.$soversion links to it" \
	test "$(readlink "$lib/libfaultd.so.$soversion")" = "libfaultd.so.$version"
check "libfaultd.so links to libfaultd.so.$soversion" \
	test "$(readlink "$lib/libfaultd.so")" = "libfaultd.so.$soversion"
check "libfaultd.a in $libdir" test -f "$lib/libfaultd.a"
check "libfaultd.pc in $libdir/pkgconfig" test -f "$lib/pkgconfig/libfaultd.pc"
if [ -z "$unitdir" ]; then
	units=$dest$prefix/lib/systemd/system
	check "faultd.socket in $prefix/lib/systemd/system" \
		test -f "$units/faultd.socket"
	check "faultd.service there starts $sbindir/faultd" \
		grep -qx "ExecStart=$sbindir/faultd --fd-store" "$units/faultd.service"
fi

man_missing=""
for page in "$src"/man/*.[1-9]; do
	name=$(basename "$page")
	cmp -s "$page" "$mandest/man${name##*.}/$name" ||
		man_missing="$man_missing $name"
done
check "every page of man/ is installed in $mandir/manN" test -z "$man_missing"
[ -z "$man_missing" ] || diag "missing or different:$man_missing"

# pkg-config as an outside build uses it, resolved into the DESTDIR.
PKG_CONFIG_PATH=$lib/pkgconfig
PKG_CONFIG_SYSROOT_DIR=$dest
export PKG_CONFIG_PATH PKG_CONFIG_SYSROOT_DIR
check "pkg-config --modversion libfaultd is $version" \
	test "$(pkg-config --modversion libfaultd)" = "$version"
cflags=$(pkg-config --cflags libfaultd)
libs=$(pkg-config --libs libfaultd)
case " $cflags " in
*" -I$inc "*) ok "pkg-config --cflags points into the DESTDIR" ;;
*) not_ok "pkg-config --cflags points into the DESTDIR"
   diag "cflags: $cflags" ;;
esac
case " $libs " in
*" -L$lib "*) ok "pkg-config --libs points into the DESTDIR" ;;
*) not_ok "pkg-config --libs points into the DESTDIR"
   diag "libs: $libs" ;;
esac

# Each example, built the way its header comment says, then run.
uses_installed_header() {
	deps=$("$cc" -M $san $cflags "$1") || return 1
	case $deps in
	*"$inc/faultd.h"*) ;;
	*) echo "faultd.h does not come from $inc: $deps"; return 1 ;;
	esac
}

uses_installed_lib() {
	out=$(LD_LIBRARY_PATH=$lib ldd "$1") || return 1
	echo "$out" | grep -q "libfaultd\.so\.$soversion => $lib/" || {
		echo "$out"
		return 1
	}
}

# run DESCRIPTION COMMAND...: a test point that is skipped, not failed,
# when the program cannot use userfaultfd here (as the uffd suite would)
# or says it cannot run here by exit status 77 (vmm without KVM).
run() {
	run_desc=$1
	shift
	status=0
	out=$("$@" 2>&1) || status=$?
	if [ $status -eq 0 ]; then
		ok "$run_desc"
	elif [ $status -eq 77 ]; then
		skip "$run_desc" "$out"
	elif echo "$out" | grep -Eq \
		'faultd_ctx_create: (Function not implemented|Operation not permitted)'
	then
		skip "$run_desc" "userfaultfd unavailable: $out"
	else
		not_ok "$run_desc"
		diag "$out"
	fi
}

for example in "$src"/examples/*.c; do
	name=$(basename "$example" .c)
	exe=$tmp/$name
	# $cflags and $libs are lists of words: unquoted on purpose.
	if out=$("$cc" -Wall -Werror $san -o "$exe" "$example" $cflags $libs \
		2>&1)
	then
		ok "examples/$name.c builds with pkg-config --cflags --libs"
	else
		not_ok "examples/$name.c builds with pkg-config --cflags --libs"
		diag "$out"
		continue
	fi
	check "examples/$name.c includes the installed faultd.h" \
		uses_installed_header "$example"
	check "$name loads the installed libfaultd.so.$soversion" \
		uses_installed_lib "$exe"
	run "$name runs with the installed library" \
		env LD_LIBRARY_PATH="$lib" "$exe"
done

# The static library: what --static adds must be enough to link it.
example=$src/examples/heap_alloc.c
exe=$tmp/heap_alloc-static
static_libs=$(pkg-config --static --libs libfaultd)
if out=$("$cc" -Wall -Werror $san -o "$exe" "$example" $cflags -Wl,--as-needed \
	-L"$lib" -l:libfaultd.a $static_libs 2>&1)
then
	ok "heap_alloc.c links libfaultd.a with pkg-config --static --libs"
	check "heap_alloc-static does not need libfaultd.so" \
		sh -c "! readelf -d '$exe' | grep -q 'NEEDED.*libfaultd'"
	run "heap_alloc-static runs" env -u LD_LIBRARY_PATH "$exe"
else
	not_ok "heap_alloc.c links libfaultd.a with pkg-config --static --libs"
	diag "$out"
fi

# What libfaultd.a defines for the linker of a static program: the
# exported API (the symbols libfaultd.so exports, so faultd_* only) and
# nothing of the library's internals, whose names (crc32c, now_ns...)
# would clash with the program's own.
nm -g --defined-only "$lib/libfaultd.a" | awk 'NF == 3 { print $3 }' |
	sort -u >"$tmp/static-globals"
nm -D --defined-only "$lib/libfaultd.so.$version" |
	awk '$2 != "A" { sub(/@.*/, "", $3); print $3 }' | sort -u \
	>"$tmp/shared-exports"
offenders=$(grep -v '^faultd_' "$tmp/static-globals" || true)
check "libfaultd.a defines no global symbol without the faultd_ prefix" \
	test -z "$offenders"
[ -z "$offenders" ] || diag "$(echo "$offenders" | wc -l) of them:" \
	"$(echo $offenders | fold -s -w 76)"
missing=$(comm -13 "$tmp/static-globals" "$tmp/shared-exports")
extra=$(comm -23 "$tmp/static-globals" "$tmp/shared-exports" | grep '^faultd_' ||
	true)
check "libfaultd.a defines every symbol libfaultd.so exports" \
	test -z "$missing"
[ -z "$missing" ] || diag "missing:" $missing
check "libfaultd.a defines no faultd_ symbol that libfaultd.so does not export" \
	test -z "$extra"
[ -z "$extra" ] || diag "not exported by libfaultd.so:" $extra

# A program with its own crc32c, now_ns, map_lookup and thread_start
# links statically and keeps them, while the library keeps its own.
exe=$tmp/static-clash
if out=$("$cc" -Wall -Werror $san -o "$exe" "$src/tests/install/static-clash.c" \
	$cflags -L"$lib" -l:libfaultd.a $static_libs 2>&1)
then
	ok "a program with its own crc32c, now_ns, map_lookup, thread_start links libfaultd.a"
	run "static-clash faults, checkpoints and restores with its own functions" \
		env -u LD_LIBRARY_PATH "$exe" "$tmp/static-clash.img"
else
	not_ok "a program with its own crc32c, now_ns, map_lookup, thread_start links libfaultd.a"
	diag "$(echo "$out" | grep -m 8 'multiple definition\|error')"
fi

tap_end
