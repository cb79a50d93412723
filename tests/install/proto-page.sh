#!/bin/sh
# proto-page.sh - faultd-protocol(7) and libfaultd/proto.h say the same: the
# page's constants, its table of messages (type numbers, lengths, bodies)
# and every struct it declares are turned into C and compiled against
# proto.h, and each is compared with the code's: values, enum values,
# sizeof, and each field's offset, size and type. Every constant and
# struct of proto.h must be on the page, and every message type of the
# enum in its table. A name the page uses that the code lacks is a compile
# error, reported as this test's failure.
#
# usage: proto-page.sh PAGE PROTO_H
set -eu

. "$(dirname "$0")/tap.sh"

[ $# -eq 2 ] || bail "usage: $0 PAGE PROTO_H"
page=$1 proto_h=$2
cc=${CC:-cc}
command -v "$cc" >/dev/null 2>&1 || bail "$cc not found"
[ -f "$page" ] || bail "$page: no such file"
[ -f "$proto_h" ] || bail "$proto_h: no such file"

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# The page's .EX blocks, roff escapes undone. Of them only #defines of
# PROTO_*, the rows of the table of messages and struct proto_* are read:
# the synopsis and the example client match none.
awk '/^\.EX/ { ex = 1; next } /^\.EE/ { ex = 0; print ""; next }
	ex { gsub(/\\\(mu/, "*"); gsub(/\\e/, "\\"); gsub(/\\-/, "-");
	     print }' "$page" >"$tmp/blocks"

# The checker: the page's declarations renamed page_*, then main(), which
# compares each with proto.h's and prints PASS/FAIL lines.
cat >"$tmp/gen.awk" <<'AWK'
function trim(s) { sub(/^[ \t]+/, "", s); sub(/[ \t]+$/, "", s); return s }
function page_type(t) { gsub(/struct proto_/, "struct page_proto_", t); return t }
# "A bytes" or "A + B * name bytes" in a comment: into sz_a, sz_b.
function stated_size(c) {
	sz_a = ""; sz_b = ""
	if (match(c, /[0-9]+ \+ [0-9]+ \* [a-z_]+ bytes/)) {
		split(substr(c, RSTART, RLENGTH), w, " ")
		sz_a = w[1]; sz_b = w[3]
		return 1
	}
	if (match(c, /[0-9]+ bytes/)) {
		split(substr(c, RSTART, RLENGTH), w, " ")
		sz_a = w[1]
		return 1
	}
	return 0
}
# Print the page's struct @name, after the structs its fields are of.
function emit(name,    k, t) {
	if (name in emitted)
		return
	emitted[name] = 1
	for (k = 1; k <= nf[name]; k++) {
		t = ftype[name, k]
		if (t ~ /^struct proto_/) {
			sub(/^struct /, "", t)
			if (t in nf)
				emit(t)
		}
	}
	print "struct page_" name " {"
	for (k = 1; k <= nf[name]; k++)
		print "\t" page_type(ftype[name, k]) " " fdecl[name, k] ";"
	print "};"
}
BEGIN { depth = 0; incomment = 0; nstructs = 0; rows = 0; ndefs = 0 }
{
	rest = $0; code = ""; comment = ""; started = 0
	while (rest != "") {
		if (incomment) {
			i = index(rest, "*/")
			if (!i) { rest = ""; break }
			rest = substr(rest, i + 2); incomment = 0
			continue
		}
		i = index(rest, "/*")
		if (!i) { code = code rest; break }
		code = code substr(rest, 1, i - 1)
		rest = substr(rest, i + 2)
		j = index(rest, "*/")
		if (!started) { comment = j ? substr(rest, 1, j - 1) : rest; started = 1 }
		if (!j) { incomment = 1; rest = "" } else rest = substr(rest, j + 2)
	}
	code = trim(code)
}
# The constants.
code ~ /^#define PROTO_[A-Z0-9_]+[ \t]/ {
	split(code, w, /[ \t]+/)
	val = code; sub(/^#define[ \t]+[A-Z0-9_]+[ \t]+/, "", val)
	defs[++ndefs] = w[2]; defval[ndefs] = val
	next
}
# The table of messages: type, name, sender, length, body.
depth == 0 && code ~ /^[0-9]+ +[A-Z_]+ +(both|client|daemon) / {
	n = split(code, w, / +/)
	rows++
	row_type[rows] = w[1]; row_name[rows] = w[2]
	s = code; sub(/^[0-9]+ +[A-Z_]+ +[a-z]+ +/, "", s)
	if (!match(s, / proto_[a-z_]+( \+ proto_[a-z_]+)*$/)) {
		bad_rows = bad_rows " " w[2]
		next
	}
	row_len[rows] = trim(substr(s, 1, RSTART - 1))
	row_body[rows] = trim(substr(s, RSTART))
	next
}
# A struct opens (also inside another: proto_status's sessions).
code ~ /^struct proto_[a-z_]+ \{$/ {
	name = code; sub(/^struct /, "", name); sub(/ \{$/, "", name)
	stack[++depth] = name
	nf[name] = 0
	has_off[name] = comment ~ /offset/
	if (stated_size(comment)) { size_a[name] = sz_a; size_b[name] = sz_b }
	next
}
depth > 0 && code ~ /^\}/ {
	name = stack[depth--]
	order[++nstructs] = name
	if (stated_size(comment)) { size_a[name] = sz_a; size_b[name] = sz_b }
	member = trim(substr(code, 2)); sub(/;$/, "", member)
	if (depth > 0 && member != "") {
		parent = stack[depth]
		k = ++nf[parent]
		ftype[parent, k] = "struct " name
		fdecl[parent, k] = member
	}
	next
}
depth > 0 && code ~ /;$/ {
	name = stack[depth]
	decl = code; sub(/;$/, "", decl)
	k = ++nf[name]
	n = split(decl, w, /[ \t]+/)
	fdecl[name, k] = w[n]
	t = w[1]; for (i = 2; i < n; i++) t = t " " w[i]
	ftype[name, k] = t
	if (has_off[name] && match(comment, /^ *[0-9]+(:| *$)/))
		foff[name, k] = substr(comment, RSTART, RLENGTH) + 0
	next
}
END {
	print "#include <stddef.h>"
	print "#include <stdio.h>"
	print "#include \"proto.h\""
	print ""
	print "static int failed, point_failed;"
	print "static void begin(void) { point_failed = 0; }"
	print "static void end(const char *what)"
	print "{ printf(\"%s\\t%s\\n\", point_failed ? \"FAIL\" : \"PASS\", what); failed += point_failed; }"
	print "#define EXPECT(c, ...) do { if (!(c)) { point_failed = 1; printf(\"# \" __VA_ARGS__); printf(\"\\n\"); } } while (0)"
	print "#define ULL(x) ((unsigned long long)(x))"
	print ""
	for (i = 1; i <= ndefs; i++)
		print "#define PAGE_" defs[i] " (" defval[i] ")"
	for (s = 1; s <= nstructs; s++)
		emit(order[s])
	print ""
	print "int main(void)"
	print "{"
	print "\tstatic const int page_types[] = {"
	for (r = 1; r <= rows; r++)
		print "\t\t" row_type[r] ","
	print "\t};"
	# Constants: each of the page's has the code's value.
	print "\tbegin();"
	for (i = 1; i <= ndefs; i++)
		printf "\tEXPECT(ULL(PAGE_%s) == ULL(%s), \"%s: the page says %%llu, the code %%llu\", ULL(PAGE_%s), ULL(%s));\n", defs[i], defs[i], defs[i], defs[i], defs[i]
	printf "\tend(\"the page's %d constants have the code's values\");\n", ndefs
	# Structs: size, and each field where the code has it, of its size
	# and type, one after the other without a gap.
	for (s = 1; s <= nstructs; s++) {
		name = order[s]
		p = "struct page_" name; c = "struct " name
		print "\tbegin();"
		printf "\tEXPECT(sizeof(%s) == sizeof(%s), \"sizeof: the page's %%zu, the code's %%zu\", sizeof(%s), sizeof(%s));\n", p, c, p, c
		if (size_a[name] != "")
			printf "\tEXPECT(sizeof(%s) == %s, \"the page says %s bytes, the code has %%zu\", sizeof(%s));\n", c, size_a[name], size_a[name], c
		prev = ""
		for (k = 1; k <= nf[name]; k++) {
			d = fdecl[name, k]; f = d; sub(/\[.*/, "", f)
			flex = d ~ /\[\]$/
			el = flex ? f "[0]" : f
			printf "\tEXPECT(offsetof(%s, %s) == offsetof(%s, %s), \"%s: at %%zu on the page, %%zu in the code\", offsetof(%s, %s), offsetof(%s, %s));\n", p, f, c, f, f, p, f, c, f
			printf "\tEXPECT(sizeof(((%s *)0)->%s) == sizeof(((%s *)0)->%s), \"%s: %%zu bytes on the page, %%zu in the code\", sizeof(((%s *)0)->%s), sizeof(((%s *)0)->%s));\n", p, el, c, el, d, p, el, c, el
			if (ftype[name, k] !~ /^struct /)
				printf "\tEXPECT(__builtin_types_compatible_p(__typeof__(((%s *)0)->%s), __typeof__(((%s *)0)->%s)), \"%s: the page's type is not the code's\");\n", p, el, c, el, d
			if ((name, k) in foff)
				printf "\tEXPECT(offsetof(%s, %s) == %d, \"%s: the page says offset %d, the code has %%zu\", offsetof(%s, %s));\n", c, f, foff[name, k], f, foff[name, k], c, f
			if (k == 1)
				printf "\tEXPECT(offsetof(%s, %s) == 0, \"%s: a gap before it\");\n", p, f, f
			else if (prev != "")
				printf "\tEXPECT(offsetof(%s, %s) == offsetof(%s, %s) + sizeof(((%s *)0)->%s), \"%s: a gap before it\");\n", p, f, p, prevf, p, prevf, f
			prev = d; prevf = prev; sub(/\[.*/, "", prevf)
			if (flex) { prev = ""; flexname[name] = f }
		}
		if (prev != "")
			printf "\tEXPECT(sizeof(%s) == offsetof(%s, %s) + sizeof(((%s *)0)->%s), \"padding after the last field\");\n", p, p, prevf, p, prevf
		else if (name in flexname)
			printf "\tEXPECT(sizeof(%s) == offsetof(%s, %s), \"padding before the array\");\n", p, p, flexname[name]
		if (size_b[name] != "" && name in flexname)
			printf "\tEXPECT(sizeof(((%s *)0)->%s[0]) == %s, \"the page says %s bytes each, the code has %%zu\", sizeof(((%s *)0)->%s[0]));\n", c, flexname[name], size_b[name], size_b[name], c, flexname[name]
		printf "\tend(\"struct %s: the page's fields are the code's, at its offsets, of its sizes and types\");\n", name
	}
	# Messages: the type number, and the length from the body.
	for (r = 1; r <= rows; r++) {
		len = row_len[r]; body = row_body[r]
		opt = ""
		if (match(len, /\[\+ [0-9]+\]$/)) {
			opt = substr(len, RSTART + 3, RLENGTH - 4)
			len = trim(substr(len, 1, RSTART - 1))
		}
		n = split(len, w, / +/)
		sum = ""
		m = split(body, parts, / *\+ */)
		for (i = 1; i <= m; i++)
			sum = sum (sum == "" ? "" : " + ") "sizeof(struct " parts[i] ")"
		print "\tbegin();"
		printf "\tEXPECT(MSG_%s == %s, \"MSG_%s is %%d in the code\", (int)MSG_%s);\n", row_name[r], row_type[r], row_name[r], row_name[r]
		printf "\tEXPECT(%s == %s, \"the page says %s bytes, the body has %%zu\", (size_t)(%s));\n", w[1], sum, w[1], sum
		if (n == 5) {
			st = body
			if (!(st in flexname))
				printf "\tEXPECT(0, \"%s: no array of %s on the page\");\n", st, w[5]
			else
				printf "\tEXPECT(%s == sizeof(((struct %s *)0)->%s[0]) && offsetof(struct %s, %s) < sizeof(struct %s), \"each of the %s: %s bytes on the page, %%zu in the code\", sizeof(((struct %s *)0)->%s[0]));\n", w[3], st, flexname[st], st, w[5], st, w[5], w[3], st, flexname[st]
		} else if (n != 1) {
			printf "\tEXPECT(0, \"cannot read the length \\\"%s\\\"\");\n", len
		}
		if (opt != "")
			printf "\tEXPECT(%s == PROTO_KEY_LEN, \"the optional %s bytes are not PROTO_KEY_LEN\");\n", opt, opt
		printf "\tend(\"message %s (%s), %s: type and length\");\n", row_name[r], row_type[r], row_body[r]
	}
	# Every type of the code's enum has a row.
	print "\tbegin();"
	if (bad_rows != "")
		printf "\tEXPECT(0, \"rows without a body of proto_* structs:%s\");\n", bad_rows
	print "\tfor (int t = 1; t < MSG_TYPE_MAX; t++) {"
	print "\t\tint found = 0;"
	print "\t\tfor (size_t i = 0; i < sizeof(page_types) / sizeof(page_types[0]); i++)"
	print "\t\t\tfound |= page_types[i] == t;"
	print "\t\tEXPECT(found, \"message type %d is not in the page's table\", t);"
	print "\t}"
	print "\tend(\"every message type of enum proto_type is in the page's table\");"
	print "\treturn failed != 0;"
	print "}"
}
AWK
awk -f "$tmp/gen.awk" "$tmp/blocks" >"$tmp/check.c"

# What the page must hold: every constant and struct of proto.h.
sed -n 's/^#define \(PROTO_[A-Z0-9_]*\)[ \t].*/\1/p' "$proto_h" |
	sort -u >"$tmp/code_defs"
sed -n 's/^#define PAGE_\(PROTO_[A-Z0-9_]*\) .*/\1/p' "$tmp/check.c" |
	sort -u >"$tmp/page_defs"
missing=$(comm -23 "$tmp/code_defs" "$tmp/page_defs")
check "every constant of proto.h is in the page's Constants" test -z "$missing"
[ -z "$missing" ] || diag "not on the page:" $missing

sed -n 's/^struct \(proto_[a-z_]*\) {$/\1/p' "$proto_h" | sort -u \
	>"$tmp/code_structs"
sed -n 's/^struct page_\(proto_[a-z_]*\) {$/\1/p' "$tmp/check.c" | sort -u \
	>"$tmp/page_structs"
missing=$(comm -23 "$tmp/code_structs" "$tmp/page_structs")
check "every struct of proto.h is declared on the page" test -z "$missing"
[ -z "$missing" ] || diag "not on the page:" $missing

if ! out=$("$cc" -std=gnu11 -Wall -Werror -I"$(dirname "$proto_h")" \
	-o "$tmp/check" "$tmp/check.c" 2>&1); then
	not_ok "the page's declarations compile against proto.h"
	diag "$out"
	tap_end
	exit 1
fi
ok "the page's declarations compile against proto.h"

"$tmp/check" >"$tmp/out" || true
while IFS= read -r line; do
	case $line in
	PASS*) ok "${line#PASS	}" ;;
	FAIL*) not_ok "${line#FAIL	}" ;;
	"# "*) diag "${line#\# }" ;;
	*) diag "$line" ;;
	esac
done <"$tmp/out"
grep -q '^PASS\|^FAIL' "$tmp/out" || not_ok "the checker reported nothing"

tap_end
