// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * numa.c - NUMA placement of a region: its memory policy and the CPUs of
 * its handler threads (libnuma).
 *
 * The policy is set with mbind() on the mapping before it is registered,
 * so the pages the kernel allocates for UFFDIO_COPY (or a fault-around,
 * or a pager fill in place) land on the region's node(s). A region bound
 * to one node also keeps its handler threads on that node's CPUs, unless
 * an explicit placement says otherwise. On one node this is a no-op that
 * still works; without NUMA support in the kernel a request is ignored
 * with a warning, never an error that breaks the program.
 */
#include <errno.h>
#include <numa.h>
#include <numaif.h>
#include <pthread.h>
#include <sched.h>

#include "internal.h"

static bool numa_ok(void)
{
	static int available = -2;

	if (available == -2)
		available = numa_available();
	return available >= 0;
}

/*
 * numa_check() - validate a region's NUMA options.
 * Returns 0 or -EINVAL (unknown policy, a node this system does not have,
 * an empty interleave set).
 */
int numa_check(unsigned int policy, unsigned int node, uint64_t nodes)
{
	int max;

	if (policy == FAULTD_NUMA_DEFAULT)
		return 0;
	if (policy > FAULTD_NUMA_INTERLEAVE)
		return -EINVAL;
	if (!numa_ok())
		return 0; /* ignored, see numa_apply() */
	max = numa_max_node();
	if (policy == FAULTD_NUMA_BIND)
		return (int)node <= max && node < 64 ? 0 : -EINVAL;
	if (!nodes || (max < 63 && (nodes >> (max + 1))))
		return -EINVAL;
	return 0;
}

/*
 * numa_apply() - set @r's memory policy on [addr, addr + len).
 * Context: the range is mapped and not yet registered.
 */
int numa_apply(struct faultd_region *r, void *addr, size_t len)
{
	unsigned long mask;
	int mode;

	if (r->numa_policy == FAULTD_NUMA_DEFAULT)
		return 0;
	if (!numa_ok()) {
		fd_warn(r->ctx, "%s: no NUMA support: memory policy ignored",
			r->name);
		return 0;
	}
	if (r->numa_policy == FAULTD_NUMA_BIND) {
		mode = MPOL_BIND;
		mask = 1ul << r->numa_node;
	} else {
		mode = MPOL_INTERLEAVE;
		mask = (unsigned long)r->numa_nodes;
	}
	if (mbind(addr, len, mode, &mask, sizeof(mask) * 8, 0) < 0)
		return -errno;
	return 0;
}

/*
 * numa_node_cpus() - the CPUs of @node into @set. Returns 0, or -ENODEV
 * (no NUMA support, or no CPUs there).
 */
int numa_node_cpus(unsigned int node, cpu_set_t *set)
{
	struct bitmask *cpus;
	int ret = -ENODEV;

	if (!numa_ok())
		return ret;
	cpus = numa_allocate_cpumask();
	if (!cpus)
		return -ENOMEM;
	CPU_ZERO(set);
	if (numa_node_to_cpus((int)node, cpus) == 0) {
		for (unsigned int c = 0; c < cpus->size && c < CPU_SETSIZE; c++)
			if (numa_bitmask_isbitset(cpus, c)) {
				CPU_SET(c, set);
				ret = 0;
			}
	}
	numa_free_cpumask(cpus);
	return ret;
}
