// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * place.c - NUMA placement for the scenarios that use regions, and a record
 * of where everything really ran.
 *
 * --place local|interleave|remote puts application thread i on node
 * i mod (nodes with usable CPUs) and its regions' memory on that node, over
 * all nodes, or on the next node that has memory. --handlers elsewhere pins
 * a region's handler threads (FAULTD_PLACE_CPU) to a CPU of a node other
 * than the region's. What cannot be done on this machine (remote memory or
 * remote handlers on one node) is not faked: it stays local, and
 * place_note() says so for the output.
 *
 * The record (struct where) is what was observed, not what was asked: the
 * CPUs threads were seen on (sched_getcpu(), /proc/self/task/N/stat), the
 * policy of each region (get_mempolicy) and the node of some of its pages
 * (move_pages as a query).
 */
#include <dirent.h>
#include <errno.h>
#include <numa.h>
#include <numaif.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"

#define MAX_NODES 64

/* The machine as placement sees it, found once. */
static struct topo {
	unsigned int ncpu_nodes;	/* nodes with CPUs we may use */
	int cpu_node[MAX_NODES];	/* their numbers */
	cpu_set_t node_cpus[MAX_NODES];	/* their usable CPUs */
	unsigned int nmem_nodes;	/* nodes we may allocate on */
	int mem_node[MAX_NODES];
	uint64_t mem_mask;
} topo;
static pthread_once_t topo_once = PTHREAD_ONCE_INIT;

static int node_of_cpu(int cpu)
{
	int node = numa_available() < 0 ? 0 : numa_node_of_cpu(cpu);

	return node < 0 || node >= MAX_NODES ? 0 : node;
}

static void topo_mem_nodes(void)
{
	struct bitmask *mems;

	if (numa_available() < 0)
		goto only_node0;
	mems = numa_get_mems_allowed();
	for (int n = 0; mems && n <= numa_max_node() && n < MAX_NODES; n++)
		if (numa_bitmask_isbitset(mems, (unsigned int)n)) {
			topo.mem_node[topo.nmem_nodes++] = n;
			topo.mem_mask |= 1ull << n;
		}
	if (mems)
		numa_bitmask_free(mems);
	if (topo.nmem_nodes)
		return;
only_node0:
	topo.mem_node[0] = 0;
	topo.nmem_nodes = 1;
	topo.mem_mask = 1;
}

static void topo_find(void)
{
	cpu_set_t allowed;
	int seen[MAX_NODES];

	memset(seen, -1, sizeof(seen));
	if (sched_getaffinity(0, sizeof(allowed), &allowed) < 0) {
		CPU_ZERO(&allowed);
		CPU_SET(0, &allowed);
	}
	for (int cpu = 0; cpu < CPU_SETSIZE; cpu++) {
		int node;

		if (!CPU_ISSET(cpu, &allowed))
			continue;
		node = node_of_cpu(cpu);
		if (seen[node] < 0) {
			seen[node] = (int)topo.ncpu_nodes;
			topo.cpu_node[topo.ncpu_nodes++] = node;
			CPU_ZERO(&topo.node_cpus[seen[node]]);
		}
		CPU_SET(cpu, &topo.node_cpus[seen[node]]);
	}
	topo_mem_nodes();
}

static const struct topo *topo_get(void)
{
	pthread_once(&topo_once, topo_find);
	return &topo;
}

unsigned int place_nodes(void)
{
	return topo_get()->ncpu_nodes;
}

/* The @k-th CPU of @set, counting round. */
static int nth_cpu(const cpu_set_t *set, unsigned int k)
{
	unsigned int n = (unsigned int)CPU_COUNT(set), seen = 0;

	if (!n)
		return -1;
	k %= n;
	for (int cpu = 0; cpu < CPU_SETSIZE; cpu++)
		if (CPU_ISSET(cpu, set) && seen++ == k)
			return cpu;
	return -1;
}

/* Index in topo.cpu_node of @node, or -1. */
static int cpu_node_index(const struct topo *t, int node)
{
	for (unsigned int i = 0; i < t->ncpu_nodes; i++)
		if (t->cpu_node[i] == node)
			return (int)i;
	return -1;
}

/* The next node after @node that has memory; @node itself on one node. */
static int other_mem_node(const struct topo *t, int node)
{
	for (unsigned int i = 0; i < t->nmem_nodes; i++)
		if (t->mem_node[i] == node)
			return t->mem_node[(i + 1) % t->nmem_nodes];
	return t->mem_node[0] == node && t->nmem_nodes > 1 ? t->mem_node[1]
							   : t->mem_node[0];
}

int place_cpu(const struct bench_opts *o, unsigned int i)
{
	const struct topo *t = topo_get();

	if (o->place == BENCH_PLACE_NONE)
		return (int)(i % bench_cpus());
	/* Threads go round the nodes, then round each node's CPUs. */
	return nth_cpu(&t->node_cpus[i % t->ncpu_nodes], i / t->ncpu_nodes);
}

/* A CPU for handlers on a node other than @node, or -1 when none. */
static int elsewhere_cpu(const struct topo *t, int node, unsigned int i)
{
	int k = cpu_node_index(t, node);

	if (t->ncpu_nodes < 2)
		return -1;
	k = (k + 1) % (int)t->ncpu_nodes;
	return nth_cpu(&t->node_cpus[k], i / t->ncpu_nodes);
}

void place_thread(const struct bench_opts *o, unsigned int i, int cpu,
		  struct placement *p)
{
	const struct topo *t = topo_get();
	int k = (int)(i % t->ncpu_nodes);

	memset(p, 0, sizeof(*p));
	p->node = -1;
	p->handler_cpu = -1;
	if (o->place == BENCH_PLACE_NONE)
		return;
	if (cpu >= 0) {
		p->node = node_of_cpu(cpu);
		CPU_SET(cpu, &p->cpus);
	} else {
		p->node = t->cpu_node[k];
		p->cpus = t->node_cpus[k];
	}
	switch (o->place) {
	case BENCH_PLACE_LOCAL:
		p->policy = FAULTD_NUMA_BIND;
		p->mem_node = (unsigned int)p->node;
		break;
	case BENCH_PLACE_REMOTE:
		p->policy = FAULTD_NUMA_BIND;
		p->mem_node = (unsigned int)other_mem_node(t, p->node);
		break;
	case BENCH_PLACE_INTERLEAVE:
		p->policy = FAULTD_NUMA_INTERLEAVE;
		p->mem_nodes = t->mem_mask;
		break;
	}
	if (o->handlers == BENCH_HANDLERS_ELSEWHERE)
		p->handler_cpu = elsewhere_cpu(t, p->policy == FAULTD_NUMA_BIND
							  ? (int)p->mem_node
							  : p->node,
					       i);
}

void place_self(const struct placement *p)
{
	if (p->node >= 0)
		sched_setaffinity(0, sizeof(p->cpus), &p->cpus);
}

void place_region(const struct placement *p, struct faultd_region_opts *ro)
{
	ro->numa_policy = p->policy;
	ro->numa_node = p->mem_node;
	ro->numa_nodes = p->mem_nodes;
	if (p->handler_cpu >= 0 && ro->placement == FAULTD_PLACE_ANY) {
		ro->placement = FAULTD_PLACE_CPU;
		ro->cpu = (unsigned int)p->handler_cpu;
	}
}

int place_mbind(const struct placement *p, void *addr, size_t len)
{
	unsigned long mask;
	int mode;

	if (p->policy == FAULTD_NUMA_DEFAULT || numa_available() < 0)
		return 0;
	if (p->policy == FAULTD_NUMA_BIND) {
		mode = MPOL_BIND;
		mask = 1ul << p->mem_node;
	} else {
		mode = MPOL_INTERLEAVE;
		mask = (unsigned long)p->mem_nodes;
	}
	return mbind(addr, len, mode, &mask, sizeof(mask) * 8, 0) < 0 ? -errno
								    : 0;
}

void place_handler(const struct placement *p, pthread_t thread)
{
	const struct topo *t = topo_get();
	cpu_set_t set;
	int k;

	CPU_ZERO(&set);
	if (p->handler_cpu >= 0) {
		CPU_SET(p->handler_cpu, &set);
	} else if (p->policy == FAULTD_NUMA_BIND &&
		   (k = cpu_node_index(t, (int)p->mem_node)) >= 0) {
		set = t->node_cpus[k]; /* as the library does for BIND */
	} else {
		return;
	}
	pthread_setaffinity_np(thread, sizeof(set), &set);
}

static const char *const place_names[] = { "none", "local", "interleave",
					   "remote" };
static const char *const handlers_names[] = { "with-region", "elsewhere" };

const char *place_name(unsigned int place)
{
	return place < 4 ? place_names[place] : "?";
}

const char *place_handlers_name(unsigned int handlers)
{
	return handlers < 2 ? handlers_names[handlers] : "?";
}

int place_parse(const char *arg, struct bench_opts *o)
{
	for (unsigned int i = 0; i < 4; i++)
		if (!strcmp(arg, place_names[i])) {
			o->place = i;
			return 0;
		}
	return -EINVAL;
}

int place_parse_handlers(const char *arg, struct bench_opts *o)
{
	for (unsigned int i = 0; i < 2; i++)
		if (!strcmp(arg, handlers_names[i])) {
			o->handlers = i;
			return 0;
		}
	return -EINVAL;
}

const char *place_note(const struct bench_opts *o)
{
	const struct topo *t = topo_get();
	static char note[256];

	if (numa_available() < 0)
		return "no NUMA support in this kernel: placement by CPU only";
	if (t->ncpu_nodes >= 2 && t->nmem_nodes >= 2)
		return NULL;
	snprintf(note, sizeof(note), "%s%s%s",
		 t->ncpu_nodes < 2 && t->nmem_nodes < 2 ? "one NUMA node"
		 : t->ncpu_nodes < 2 ? "one NUMA node with usable CPUs"
				     : "one NUMA node with usable memory",
		 o->place == BENCH_PLACE_REMOTE && t->nmem_nodes < 2
			 ? "; no remote memory here: regions are local" : "",
		 o->handlers == BENCH_HANDLERS_ELSEWHERE && t->ncpu_nodes < 2
			 ? "; no other node for handlers: they run with the "
			   "region"
			 : "");
	return note;
}

/* ------------------------------------------------------------------------
 * The record
 */

static pthread_mutex_t where_lock = PTHREAD_MUTEX_INITIALIZER;
static struct where where_now;
static _Atomic uint64_t where_next_scan; /* ns: handlers sampled after */

void where_reset(void)
{
	pthread_mutex_lock(&where_lock);
	memset(&where_now, 0, sizeof(where_now));
	pthread_mutex_unlock(&where_lock);
	atomic_store(&where_next_scan, 0);
}

void where_get(struct where *w)
{
	pthread_mutex_lock(&where_lock);
	*w = where_now;
	pthread_mutex_unlock(&where_lock);
}

void where_app(void)
{
	int cpu = sched_getcpu();

	if (cpu < 0 || cpu >= CPU_SETSIZE)
		return;
	pthread_mutex_lock(&where_lock);
	CPU_SET(cpu, &where_now.app_cpus);
	pthread_mutex_unlock(&where_lock);
}

/* The CPU task @tid last ran on (field 39 of its stat), or -1. */
static int task_cpu(int tid)
{
	char path[64], buf[1024], *p;
	int cpu = -1, field = 2;
	size_t n;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/self/task/%d/stat", tid);
	f = fopen(path, "r");
	if (!f)
		return -1;
	n = fread(buf, 1, sizeof(buf) - 1, f);
	fclose(f);
	buf[n] = 0;
	p = strrchr(buf, ')'); /* the name may hold spaces */
	while (p && field < 39 && (p = strchr(p + 1, ' ')))
		field++;
	if (p && sscanf(p + 1, "%d", &cpu) != 1)
		cpu = -1;
	return cpu;
}

static bool is_handler(int tid)
{
	char path[64], name[32] = "";
	FILE *f;

	snprintf(path, sizeof(path), "/proc/self/task/%d/comm", tid);
	f = fopen(path, "r");
	if (!f)
		return false;
	if (!fgets(name, sizeof(name), f))
		name[0] = 0;
	fclose(f);
	return !strncmp(name, "faultd-h", 8) || !strncmp(name, "uffd-min", 8);
}

void where_handlers(void)
{
	uint64_t now = now_ns(), next = atomic_load(&where_next_scan);
	struct dirent *e;
	DIR *d;

	/* One thread scans at a time, at most every 20 ms. */
	if (now < next || !atomic_compare_exchange_strong(&where_next_scan,
							  &next,
							  now + 20000000))
		return;
	d = opendir("/proc/self/task");
	while (d && (e = readdir(d))) {
		int tid = atoi(e->d_name), cpu;

		if (tid <= 0 || !is_handler(tid))
			continue;
		cpu = task_cpu(tid);
		if (cpu < 0 || cpu >= CPU_SETSIZE)
			continue;
		pthread_mutex_lock(&where_lock);
		CPU_SET(cpu, &where_now.handler_cpus);
		pthread_mutex_unlock(&where_lock);
	}
	if (d)
		closedir(d);
}

#define WHERE_PAGES 4

void where_memory(void *addr, size_t len)
{
	unsigned long mask = 0;
	void *pages[WHERE_PAGES];
	int mode = 0, status[WHERE_PAGES];
	uint64_t found = 0;

	if (numa_available() < 0 ||
	    get_mempolicy(&mode, &mask, sizeof(mask) * 8, addr, MPOL_F_ADDR))
		return;
	/* First, middle and last pages, and one more: touched by now. */
	for (unsigned int i = 0; i < WHERE_PAGES; i++)
		pages[i] = (char *)addr +
			   ((len / 4096 - 1) * i / (WHERE_PAGES - 1)) * 4096;
	if (move_pages(0, WHERE_PAGES, pages, NULL, status, 0) == 0)
		for (unsigned int i = 0; i < WHERE_PAGES; i++)
			if (status[i] >= 0 && status[i] < MAX_NODES)
				found |= 1ull << status[i];
	pthread_mutex_lock(&where_lock);
	where_now.policy_modes |= 1u << (mode & 15);
	where_now.policy_nodes |= mode == MPOL_DEFAULT ? 0 : mask;
	where_now.page_nodes |= found;
	pthread_mutex_unlock(&where_lock);
}

/* Append "a-b" or "a" for the run [a, b] to @buf, comma-separated. */
static void list_add(char *buf, size_t len, int a, int b)
{
	size_t used = strlen(buf);

	if (used >= len)
		return;
	snprintf(buf + used, len - used, a == b ? "%s%d" : "%s%d-%d",
		 used ? "," : "", a, b);
}

static void bits_to_list(bool (*has)(const void *, int), const void *bits,
			 int nbits, char *buf, size_t len)
{
	buf[0] = 0;
	for (int i = 0; i < nbits; i++) {
		int j = i;

		if (!has(bits, i))
			continue;
		while (j + 1 < nbits && has(bits, j + 1))
			j++;
		list_add(buf, len, i, j);
		i = j;
	}
	if (!buf[0])
		snprintf(buf, len, "-");
}

static bool cpu_has(const void *set, int cpu)
{
	return CPU_ISSET(cpu, (const cpu_set_t *)set);
}

static bool node_has(const void *mask, int node)
{
	return *(const uint64_t *)mask >> node & 1;
}

static void where_cpulist(const cpu_set_t *set, char *buf, size_t len)
{
	bits_to_list(cpu_has, set, CPU_SETSIZE, buf, len);
}

static void where_nodelist(uint64_t nodes, char *buf, size_t len)
{
	bits_to_list(node_has, &nodes, MAX_NODES, buf, len);
}

static void where_nodes_of(const cpu_set_t *set, char *buf, size_t len)
{
	uint64_t nodes = 0;

	for (int cpu = 0; cpu < CPU_SETSIZE; cpu++)
		if (CPU_ISSET(cpu, set))
			nodes |= 1ull << node_of_cpu(cpu);
	where_nodelist(nodes, buf, len);
}

static void where_policy(const struct where *w, char *buf, size_t len)
{
	static const char *const modes[] = { "default", "preferred", "bind",
					     "interleave", "local" };
	char nodes[128];
	size_t used = 0;

	buf[0] = 0;
	where_nodelist(w->policy_nodes, nodes, sizeof(nodes));
	for (unsigned int m = 0; m < 16 && used < len; m++) {
		if (!(w->policy_modes >> m & 1))
			continue;
		used += (size_t)snprintf(buf + used, len - used, "%s%s%s%s",
					 used ? "+" : "",
					 m < 5 ? modes[m] : "other",
					 m ? ":" : "", m ? nodes : "");
	}
	if (!buf[0])
		snprintf(buf, len, "-");
}

void where_text(const struct where *w, struct where_text *t)
{
	where_cpulist(&w->app_cpus, t->app_cpus, sizeof(t->app_cpus));
	where_nodes_of(&w->app_cpus, t->app_nodes, sizeof(t->app_nodes));
	where_cpulist(&w->handler_cpus, t->handler_cpus,
		      sizeof(t->handler_cpus));
	where_nodes_of(&w->handler_cpus, t->handler_nodes,
		       sizeof(t->handler_nodes));
	where_policy(w, t->policy, sizeof(t->policy));
	where_nodelist(w->page_nodes, t->page_nodes, sizeof(t->page_nodes));
}

void place_report(const char *scenario, const struct bench_opts *o)
{
	const char *note = place_note(o);
	struct where_text t;
	struct where w;

	where_get(&w);
	where_text(&w, &t);
	if (o->json)
		printf("{\"scenario\":\"%s\",\"place\":\"%s\","
		       "\"handlers\":\"%s\",\"numa_nodes\":%u,"
		       "\"app_cpus\":\"%s\",\"app_nodes\":\"%s\","
		       "\"handler_cpus\":\"%s\",\"handler_nodes\":\"%s\","
		       "\"mem_policy\":\"%s\",\"page_nodes\":\"%s\","
		       "\"note\":\"%s\"}\n",
		       scenario, place_name(o->place),
		       place_handlers_name(o->handlers), place_nodes(),
		       t.app_cpus, t.app_nodes, t.handler_cpus,
		       t.handler_nodes, t.policy, t.page_nodes,
		       note ? note : "");
	else
		printf("  placement: place %s, handlers %s, %u NUMA node(s)"
		       "%s%s\n  seen: app cpus %s (nodes %s), handler cpus %s "
		       "(nodes %s), memory %s, pages on nodes %s\n",
		       place_name(o->place), place_handlers_name(o->handlers),
		       place_nodes(), note ? ": " : "", note ? note : "",
		       t.app_cpus, t.app_nodes, t.handler_cpus,
		       t.handler_nodes, t.policy, t.page_nodes);
	fflush(stdout);
}
