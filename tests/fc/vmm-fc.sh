#!/bin/sh
# vmm-fc.sh BENCH VMM MIB - the example VMM restores its KVM guest from a
# memory file of MIB MiB the way Firecracker does (vmm --uffd-socket),
# served by Firecracker's example handler (BENCH fc-example): the guest's
# checksum and every page must match the memory file, and the handler
# must have served every page once. Exit status: vmm's (77: no KVM or no
# userfaultfd for kernel faults here, skipped), 1 when a check fails.
set -u
if [ $# -ne 3 ]; then
	echo "usage: $0 BENCH VMM MIB" >&2
	exit 2
fi
bench=$1 vmm=$2 mib=$3
. "$(dirname "$0")/handler.sh"
dir=$(mktemp -d /tmp/faultd-vmm-fc-XXXXXX) || exit 2
handler=
trap '[ -n "$handler" ] && kill "$handler" 2>/dev/null && wait "$handler";
	rm -rf "$dir"' EXIT

[ -c /dev/kvm ] || { echo "vmm-fc: no /dev/kvm; skipped" >&2; exit 77; }
"$vmm" --write-mem-file "$dir/mem" --size "$mib" || exit 1
fc_example_start "$bench" "$dir" "$dir/mem" || exit 1
"$vmm" --uffd-socket "$dir/sock" --mem-file "$dir/mem"
rc=$?
[ $rc -eq 0 ] || exit $rc
fc_example_wait || exit 1
copies=$(echo "$handler_stats" | sed -n 's/.*"copies":\([0-9]*\).*/\1/p')
if [ "$copies" != $((mib * 256)) ]; then
	echo "vmm-fc: the handler installed $copies pages of $((mib * 256))" >&2
	exit 1
fi
