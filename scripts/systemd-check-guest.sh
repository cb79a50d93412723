#!/bin/sh
# systemd-check-guest.sh - the checks of scripts/systemd-check.sh, run by
# the guest's systemd (systemd-check.service) from the check disk,
# mounted on /check: the build installed under its prefix, faultd.socket
# enabled, and faultd.service driven by systemd as faultd(8) says it
# behaves. Each check prints "@@ PASS what" or "@@ FAIL what" on the
# serial console; the journal is written to /check/out; then the guest
# powers off.
#
# The units are the installed ones, with one drop-in: ExecStart gets
# -v -v, so that the daemon's info and debug lines exist for the journal
# to file at their priorities (and say what the daemon did: "adopted").
# The start-limit check adds StartLimitBurst= for its duration. A restore
# is made by systemd-check-client from an image the host checkpointed; it
# pauses half way on a line of its standard input, so that systemd acts
# at a known point of the restore. The restores are FAULTD_RESTORE_LAZY:
# nothing but the client's reads brings pages in, so the daemon is
# always killed in the middle.

# Run from a copy, so that /check can be unmounted at the end.
if [ "$0" != /run/systemd-check-guest.sh ]; then
	cp "$0" /run/systemd-check-guest.sh
	exec /bin/sh /run/systemd-check-guest.sh
fi
PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
export PATH
. /check/env

unit=faultd.service
sock=/run/faultd/faultd.sock
run=/run/systemd-check
dropins=/etc/systemd/system/$unit.d
client=/check/client
nfail=0

pass() { echo "@@ PASS $*"; }
fail() { echo "@@ FAIL $*"; nfail=$((nfail + 1)); }
info() { echo "@@ INFO $*"; }
# expect WHAT COMMAND...: PASS or FAIL WHAT on the command's status.
expect() {
	what=$1
	shift
	if "$@"; then pass "$what"; else fail "$what"; fi
}
prop() { systemctl show --value -p "$2" "$1"; }
mainpid() { prop $unit MainPID; }
# The descriptors systemd holds for the service (its fd store).
stored() { prop $unit NFileDescriptorStore; }

# ---------------------------------------------------------------------
# A client's restore, paused in its middle
# ---------------------------------------------------------------------

# client_start MIB PAUSE_MIB: a restore of the host's image of MIB MiB
# through $sock in the background, up to its pause; 0 once it is paused.
# Its standard input is fd 7, its output fd 8.
client_start() {
	size=$1
	rm -f $run/in $run/out
	mkfifo $run/in $run/out
	timeout 600 $client restore $sock /check/image-$1 $1 $2 <$run/in \
		>$run/out 2>$run/client.err &
	cpid=$!
	exec 7>$run/in 8<$run/out
	read -r line <&8
	[ "$line" = paused ] && return 0
	fail "the client did not reach its pause: $(cat $run/client.err)"
	return 1
}

# client_finish: let the client read the rest; its result line in
# $result, its exit status in $crc.
client_finish() {
	echo go >&7
	result=
	read -r result <&8
	wait $cpid
	crc=$?
	exec 7>&- 8<&-
	[ -n "$result" ] || result="none: $(cat $run/client.err)"
}

# field NAME: the value of NAME=... in $result.
field() {
	echo "$result" | tr ' ' '\n' | sed -n "s/^$1=//p"
}

# restored HOW WHEN: every byte right and done; HOW "served": by the
# daemon to the end; "taken over": the library finished it itself.
restored() {
	ok=0
	[ "$crc" = 0 ] && [ "$(field bad)" = 0 ] && [ "$(field done)" = 1 ] ||
		ok=1
	case $1 in
	served)	[ "$(field daemon_died)" = 0 ] || ok=1 ;;
	taken*)	[ "$(field daemon_died)" = 1 ] || ok=1 ;;
	esac
	expect "$2: every byte of the $size MiB restore right, done, $1 (client: $result)" \
		[ $ok = 0 ]
}

# adopted_again: 0 once a daemon serves the socket again and lists the
# one session (it lists an adopted session once the session's thread
# runs, a little after it answers); 1 when the socket is refused.
adopted_again() {
	tries=0
	while [ $tries -lt 100 ]; do
		timeout 60 faultctl --socket $sock status >$run/status 2>&1 ||
			return 1
		head -1 $run/status | grep -q ', 1 session$' && return 0
		tries=$((tries + 1))
	done
	return 1
}

# The lines the unit's processes logged at exactly priority $2 (a name).
journal_at() {
	journalctl --no-pager -o cat _SYSTEMD_UNIT=$1 -p "$2..$2"
}

# ---------------------------------------------------------------------
# Install, enable
# ---------------------------------------------------------------------

echo "@@ BOOTED $(cut -d' ' -f1 /proc/uptime)s after the kernel started," \
     "$(systemctl --version | head -1), kernel $(uname -r)"
mkdir -p $run
cp -a /check/dest/. /
ldconfig
expect "install: faultd, faultctl, libfaultd and the units under $prefix" \
	test -x "$sbindir/faultd" -a -x "$bindir/faultctl" \
	     -a -f "$unitdir/faultd.service" -a -f "$unitdir/faultd.socket"
# --man=no: the root has no man(1) to look up Documentation= with.
out=$(systemd-analyze verify --man=no "$unitdir/faultd.socket" \
	"$unitdir/faultd.service" 2>&1)
expect "systemd-analyze verify: no error or warning in the units" \
	[ $? = 0 -a -z "$out" ]
[ -z "$out" ] || echo "$out" | sed 's/^/    /'

if systemd-analyze unit-paths | grep -qx "$unitdir"; then
	how=enable
	systemctl enable faultd.socket >$run/enable.log 2>&1
else
	how="link and enable"
	systemctl link "$unitdir/faultd.service" "$unitdir/faultd.socket" \
		>$run/enable.log 2>&1 &&
	systemctl enable faultd.socket >>$run/enable.log 2>&1
fi
expect "systemctl $how faultd.socket ($unitdir)" [ $? = 0 ]
mkdir -p $dropins
cat >$dropins/verbose.conf <<EOF
[Service]
ExecStart=
ExecStart=$(sed -n 's/^ExecStart=//p' "$unitdir/faultd.service") -v -v
EOF
systemctl daemon-reload
systemctl start faultd.socket
expect "faultd.socket listens on $sock (mode $(stat -c %a $sock)), $unit not started ($(prop $unit ActiveState))" \
	[ "$(prop faultd.socket ActiveState)" = active -a -S $sock -a \
	  "$(stat -c %a $sock)" = 666 -a \
	  "$(prop $unit ActiveState)" = inactive ]

# ---------------------------------------------------------------------
# Socket activation; kill -9 in the middle of a restore
# ---------------------------------------------------------------------

client_start 256 128
pid1=$(mainpid)
expect "socket activation: the client's connection started $unit (pid $pid1)" \
	[ "$(prop $unit ActiveState)" = active -a "$pid1" != 0 ]
n=$(stored)
expect "the session is in the fd store ($n descriptors)" [ "${n:-0}" -gt 0 ]
restarts=$(prop $unit NRestarts)
systemctl kill -s KILL $unit
client_finish
pid2=$(mainpid)
expect "systemctl kill -s KILL at 128 of 256 MiB: systemd restarted faultd (NRestarts $restarts -> $(prop $unit NRestarts), pid $pid1 -> $pid2)" \
	[ "$(prop $unit NRestarts)" = $((restarts + 1)) -a "$pid2" != 0 \
	  -a "$pid2" != "$pid1" -a "$(prop $unit ActiveState)" = active ]
journalctl --sync
line=$(journalctl --no-pager -o cat _PID=$pid2 | grep ': adopted,')
expect "the new daemon adopted the session from the fd store (journal: ${line:-nothing})" \
	[ -n "$line" ]
restored served "kill -9"
n=$(stored)
expect "the session ended: its descriptors left the fd store ($n left)" \
	[ "${n:-1}" = 0 ]

# ---------------------------------------------------------------------
# systemctl stop, restart
# ---------------------------------------------------------------------

client_start 64 32
pid1=$(mainpid)
systemctl stop $unit 2>/dev/null
expect "systemctl stop: $unit $(prop $unit ActiveState), its daemon exited with $(prop $unit ExecMainStatus) (faultd(8): 0 when stopped by SIGTERM)" \
	[ "$(prop $unit ActiveState)" = inactive -a \
	  "$(prop $unit ExecMainCode)" = 1 -a \
	  "$(prop $unit ExecMainStatus)" = 0 ]
expect "systemctl stop: faultd.socket still listens, $sock still there (an activated socket is left alone)" \
	[ "$(prop faultd.socket ActiveState)" = active -a -S $sock ]
n=$(stored)
expect "systemctl stop: nothing left in the fd store ($n)" [ "${n:-1}" = 0 ]
client_finish
restored "taken over" "systemctl stop (its sessions end, their clients serve themselves)"

client_start 64 32
pid1=$(mainpid)
expect "socket activation after the stop: a connection started $unit again (pid $pid1)" \
	[ "$(prop $unit ActiveState)" = active -a "$pid1" != 0 ]
systemctl restart $unit
pid2=$(mainpid)
expect "systemctl restart: $unit active again, pid $pid1 -> $pid2" \
	[ "$(prop $unit ActiveState)" = active -a "$pid2" != 0 \
	  -a "$pid2" != "$pid1" ]
client_finish
restored "taken over" "systemctl restart (a stop, then a start)"
client_start 64 64
client_finish
restored served "after the restart, a whole restore"
expect "after the restart: served by the restarted daemon (pid $(mainpid))" \
	[ "$(mainpid)" = "$pid2" ]

# ---------------------------------------------------------------------
# The start limit
# ---------------------------------------------------------------------

burst=3
cat >$dropins/limit.conf <<EOF
[Unit]
StartLimitIntervalSec=1h
StartLimitBurst=$burst
EOF
systemctl daemon-reload
systemctl reset-failed $unit
client_start 64 32
kills=0 adopted=0
while [ $kills -lt 10 ]; do
	systemctl kill -s KILL $unit
	kills=$((kills + 1))
	adopted_again || break
	adopted=$((adopted + 1))
done
# systemd 252 keeps the result of the failure before (signal) and says
# the limit in the journal; later versions set result start-limit-hit.
journalctl --sync
hit=$(journalctl --no-pager -o cat -u $unit |
	grep -c 'Start request repeated too quickly')
expect "start limit: $kills kills; after each of the first $adopted a new daemon had the session; then $unit $(prop $unit ActiveState), result $(prop $unit Result), \"Start request repeated too quickly\" $hit time(s) (StartLimitBurst=$burst)" \
	[ $kills = $((burst + 1)) -a $adopted = $burst -a \
	  "$(prop $unit ActiveState)" = failed -a $hit = 1 ]
expect "start limit: faultd.socket $(prop faultd.socket ActiveState), result $(prop faultd.socket Result), $sock $([ -e $sock ] && echo still there || echo removed)" \
	[ "$(prop faultd.socket ActiveState)" = failed -a ! -e $sock ]
n=$(stored)
expect "start limit: systemd closed the fd store ($n left)" [ "${n:-1}" = 0 ]
client_finish
restored "taken over" "start limit (the store closed, the client serves itself)"
rm $dropins/limit.conf
systemctl daemon-reload
systemctl reset-failed $unit faultd.socket
systemctl start faultd.socket
client_start 64 64
client_finish
restored served "after reset-failed, socket activation again"

# ---------------------------------------------------------------------
# The journal: each line at its priority
# ---------------------------------------------------------------------

# One user's 17th waiting connection: refused (--max-user-connections,
# 16 by default), which the daemon logs at debug.
out=$(setpriv --reuid=nobody --regid=nogroup --clear-groups \
	$client crowd $sock 17 2>&1)
info "$out"
# A daemon of this build whose --fd-store has no store: it warns, exits 1.
cat >/run/systemd/system/faultd-nostore.service <<EOF
[Service]
Type=oneshot
ExecStart=$sbindir/faultd --fd-store --socket $run/nostore.sock
EOF
systemctl daemon-reload
systemctl start faultd-nostore.service 2>/dev/null
journalctl --sync
warn=$(journal_at faultd-nostore.service warning)
expect "journal: the daemon's warning at priority warning: $warn" \
	[ -n "$warn" -a -z "$(echo "$warn" | grep -v '^faultd: warning: ')" ]
n=$(journal_at $unit warning | wc -l)
bad=$(journal_at $unit warning | grep -v '^faultd: warning: ')
expect "journal: $unit: $n lines at priority warning, all its warnings" \
	[ -z "$bad" ]
n=$(journal_at $unit info | grep -c '^faultd: info: ')
bad=$(journal_at $unit info | grep '^faultd: \(warning\|debug\): ')
expect "journal: $unit: $n info lines at priority info, no other" \
	[ "$n" -gt 0 -a -z "$bad" ]
n=$(journal_at $unit debug | grep -c '^faultd: debug: ')
bad=$(journal_at $unit debug | grep '^faultd: \(warning\|info\): ')
line=$(journal_at $unit debug | grep -m1 refused)
expect "journal: $unit: $n debug lines at priority debug, no other (${line:-no refusal})" \
	[ "$n" -gt 0 -a -n "$line" -a -z "$bad" ]
n=$(journalctl --no-pager -o cat -u $unit -p warning | grep -c 'info: \|debug: ')
expect "journalctl -u $unit -p warning: no info or debug line ($n)" [ "$n" = 0 ]

# ---------------------------------------------------------------------
# The journal for the host, and the end
# ---------------------------------------------------------------------

mkdir -p /check/out
journalctl --no-pager -o short-precise -b >/check/out/journal.txt
journalctl --no-pager -o verbose -u $unit -u faultd.socket \
	-u faultd-nostore >/check/out/faultd-verbose.txt
systemctl status --no-pager $unit faultd.socket >/check/out/status.txt 2>&1
echo "@@ DONE $nfail failed"
sync
umount /check
systemctl poweroff --no-block
