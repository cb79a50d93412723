// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * fc-vmm.c - examples/vmm.c restores a real KVM guest the way Firecracker
 * does (--uffd-socket), served by `faultd firecracker`: the guest's
 * checksum and every page of its memory must match the memory file, and
 * the daemon must have served every page and exited with the VM.
 * Skipped without /dev/kvm (vmm exits 77).
 */
#include <criterion/criterion.h>

#include "fc/fc-helpers.h"

TestSuite(examples, .timeout = 120);

/* Run vmm with @args; skip the test when it says KVM is not here. */
static void vmm(const char *const *args)
{
	char *argv[FC_MAX_ARGS];
	int n = 0, rc;

	argv[n++] = (char *)fc_env("FC_VMM");
	for (int i = 0; args[i]; i++)
		argv[n++] = (char *)args[i];
	argv[n] = NULL;
	rc = fc_run(argv);
	if (rc == 77)
		cr_skip_test("vmm: no usable KVM or userfaultfd here");
	cr_assert_eq(rc, 0, "vmm %s failed: %d", args[0], rc);
}

Test(examples, vmm_faultd_firecracker)
{
	char line[4096];
	struct fcd d;

	if (access("/dev/kvm", R_OK | W_OK))
		cr_skip_test("no /dev/kvm: %s", strerror(errno));
	fcd_dir(&d);
	{
		const char *const w[] = { "--write-mem-file", d.mem, "--size",
					  "32", NULL };

		vmm(w);
	}
	fcd_start(&d, NULL);
	{
		const char *const r[] = { "--uffd-socket", d.sock, "--mem-file",
					  d.mem, NULL };

		vmm(r);
	}
	cr_assert_eq(fcd_wait(&d, line, sizeof(line)), 0, "see %s", d.log);
	cr_expect_eq(fc_json_u64(line, "vms"), 1, "%s", line);
	cr_expect_eq(fc_json_u64(line, "pages"), 32 * 256, "%s", line);
	cr_expect_eq(fc_json_u64(line, "poisoned"), 0, "%s", line);
	cr_expect_eq(fc_json_u64(line, "pages_urgent") +
			     fc_json_u64(line, "pages_zero"),
		     32 * 256, "every page came from the daemon: %s", line);
	fcd_fini(&d);
}
