// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * numa.c - suite "uffd": NUMA placement of regions.
 *
 * The region's memory policy is the one asked for (get_mempolicy with
 * MPOL_F_ADDR), the pages its faults filled are on that node (move_pages
 * as a query), and its handler threads may only run on that node's CPUs.
 * The tests use the highest node: node 0 on a one-node machine, where
 * they check that the policy is set and harmless; node 1 in the two-node
 * guest of `make numa-check`, where they check the hardware too.
 */
#include <criterion/criterion.h>
#include <dirent.h>
#include <numa.h>
#include <numaif.h>
#include <sys/mman.h>

#include "helpers.h"

static void need_numa(void)
{
	if (numa_available() < 0)
		cr_skip_test("no NUMA support in this kernel");
}

static struct faultd_region *numa_region(struct faultd_ctx *ctx,
					 unsigned int policy, unsigned int node,
					 uint64_t nodes)
{
	struct faultd_region_opts o = { .size = sizeof(o),
					.length = 64 * PAGE,
					.numa_policy = policy,
					.numa_node = node,
					.numa_nodes = nodes };
	struct faultd_region *r;

	cr_assert_eq(faultd_region_create(ctx, &o, &r), 0);
	return r;
}

Test(numa, bind_policy_pages_and_handlers, .timeout = 30)
{
	int node, mode = -1, status[64];
	unsigned long mask = 0;
	struct faultd_ctx *ctx;
	struct faultd_region *r;
	void *pages[64];
	char *b;

	need_numa();
	node = numa_max_node();
	cr_assert_eq(faultd_ctx_create(NULL, &ctx), 0);
	r = numa_region(ctx, FAULTD_NUMA_BIND, (unsigned int)node, 0);
	b = faultd_region_base(r);
	cr_assert_eq(get_mempolicy(&mode, &mask, sizeof(mask) * 8, b,
				   MPOL_F_ADDR),
		     0);
	cr_expect_eq(mode, MPOL_BIND);
	cr_expect_eq(mask, 1ul << node);
	/* Every page the handler filled is on the node. */
	for (int i = 0; i < 64; i++) {
		b[i * PAGE] = 1;
		pages[i] = b + i * PAGE;
	}
	cr_assert_eq(move_pages(0, 64, pages, NULL, status, 0), 0);
	for (int i = 0; i < 64; i++)
		cr_expect_eq(status[i], node, "page %d on node %d", i,
			     status[i]);
	faultd_ctx_destroy(ctx);
}

/* The CPUs a handler thread of this process may run on, as a mask. */
static bool handler_cpus(cpu_set_t *set)
{
	DIR *d = opendir("/proc/self/task");
	struct dirent *e;
	bool found = false;

	while (d && (e = readdir(d))) {
		char path[320], name[32] = "";
		FILE *f;

		snprintf(path, sizeof(path), "/proc/self/task/%s/comm",
			 e->d_name);
		f = fopen(path, "r");
		if (!f)
			continue;
		if (fgets(name, sizeof(name), f) &&
		    !strncmp(name, "faultd-h", 8)) {
			cr_assert_eq(sched_getaffinity(atoi(e->d_name),
						       sizeof(*set), set),
				     0);
			found = true;
		}
		fclose(f);
	}
	if (d)
		closedir(d);
	return found;
}

Test(numa, bind_keeps_handlers_on_the_node, .timeout = 30)
{
	struct bitmask *node_cpus;
	struct faultd_ctx *ctx;
	cpu_set_t set;
	int node;

	need_numa();
	node = numa_max_node();
	cr_assert_eq(faultd_ctx_create(NULL, &ctx), 0);
	numa_region(ctx, FAULTD_NUMA_BIND, (unsigned int)node, 0);
	cr_assert(handler_cpus(&set), "no handler thread found");
	node_cpus = numa_allocate_cpumask();
	cr_assert_eq(numa_node_to_cpus(node, node_cpus), 0);
	for (int c = 0; c < CPU_SETSIZE; c++)
		if (CPU_ISSET(c, &set))
			cr_expect(numa_bitmask_isbitset(node_cpus, (unsigned)c),
				  "handler allowed on CPU %d, not on node %d", c,
				  node);
	numa_free_cpumask(node_cpus);
	faultd_ctx_destroy(ctx);
}

Test(numa, interleave_policy_and_bad_nodes, .timeout = 30)
{
	int mode = -1, max;
	unsigned long mask = 0, all;
	struct faultd_ctx *ctx;
	struct faultd_region *r;
	struct faultd_region_opts o = { .size = sizeof(o), .length = 16 * PAGE };

	need_numa();
	max = numa_max_node();
	all = max >= 63 ? ~0ul : (1ul << (max + 1)) - 1;
	cr_assert_eq(faultd_ctx_create(NULL, &ctx), 0);
	r = numa_region(ctx, FAULTD_NUMA_INTERLEAVE, 0, all);
	cr_assert_eq(get_mempolicy(&mode, &mask, sizeof(mask) * 8,
				   faultd_region_base(r), MPOL_F_ADDR),
		     0);
	cr_expect_eq(mode, MPOL_INTERLEAVE);
	cr_expect_eq(mask, all);
	/* Nodes this machine does not have, and unknown policies. */
	o.numa_policy = FAULTD_NUMA_BIND;
	o.numa_node = (unsigned int)max + 1;
	cr_expect_eq(faultd_region_create(ctx, &o, &r), -EINVAL);
	o.numa_policy = FAULTD_NUMA_INTERLEAVE;
	o.numa_nodes = 0;
	cr_expect_eq(faultd_region_create(ctx, &o, &r), -EINVAL);
	o.numa_policy = 9;
	cr_expect_eq(faultd_region_create(ctx, &o, &r), -EINVAL);
	faultd_ctx_destroy(ctx);
}
