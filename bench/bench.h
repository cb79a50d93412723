/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * bench.h - what faultd-bench's scenarios share: options, the sample a
 * variant returns for one round, the scenario table, and small helpers
 * (threads started together, per-touch latency, counters).
 *
 * A scenario runs all its variants in one process, interleaved: round 0 is
 * a warm-up, then A B A B ... for the given number of rounds. The driver
 * (faultd-bench.c) reports median/min/max per variant and metric, and the
 * median of per-round ratios for the scenario's headline pairs.
 */
#ifndef FAULTD_BENCH_H
#define FAULTD_BENCH_H

#include <pthread.h>
#include <sched.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <faultd.h>

#include "internal.h" /* stat_block and its histogram, shared with the library */

#define BENCH_MAX_METRICS 10
#define BENCH_MAX_VARIANTS 16
#define BENCH_MAX_RATIOS 12
#define BENCH_MAX_THREADS 256
#define BENCH_MAX_ROUNDS 64	/* --rounds is less */

/* --place: where application threads run and their regions' memory is. */
enum bench_place {
	BENCH_PLACE_NONE = 0,	/* the scheduler's and the kernel's choice */
	BENCH_PLACE_LOCAL,	/* thread on a node, memory bound to it */
	BENCH_PLACE_INTERLEAVE,	/* thread on a node, memory over all nodes */
	BENCH_PLACE_REMOTE,	/* thread on a node, memory bound to another */
};

/* --handlers: where a region's handler threads run. */
enum bench_handlers {
	BENCH_HANDLERS_WITH_REGION = 0, /* on the region's node (BIND) */
	BENCH_HANDLERS_ELSEWHERE,	/* on a CPU of another node */
};

struct bench_opts {
	double seconds;		/* per variant per round */
	unsigned int threads;	/* application threads; 0: scenario default */
	size_t size_mib;	/* per-thread or total size; 0: default */
	unsigned int rounds;	/* measured rounds, after one warm-up */
	bool json;
	unsigned int place;	/* enum bench_place */
	unsigned int handlers;	/* enum bench_handlers */
};

/*
 * The options of faultd-bench run and sweep that mean the same to both,
 * as entries of their getopt_long() tables (<getopt.h>): each table adds
 * its own options and the terminator.
 */
#define BENCH_LONGOPTS_COMMON                                                 \
	{ "seconds", required_argument, NULL, 's' },                           \
	{ "size", required_argument, NULL, 'm' },                              \
	{ "rounds", required_argument, NULL, 'r' },                            \
	{ "json", no_argument, NULL, 'j' },                                    \
	{ "place", required_argument, NULL, 'p' },                             \
	{ "handlers", required_argument, NULL, 'H' }

/*
 * bench_opts_parse() - set @o from option @c of BENCH_LONGOPTS_COMMON and
 * its @arg. Returns 0, -EINVAL (a bad value) or -ENOENT (@c is not one of
 * them: the caller's own).
 */
int bench_opts_parse(int c, const char *arg, struct bench_opts *o);

/* A thread's time, from the kernel's schedstat (account.c). */
struct sched_time {
	double cpu_ns;		/* on a CPU */
	double runq_ns;		/* runnable, waiting on a run queue */
	double slices;		/* times it was put on a CPU */
};

/* The roles of the threads of a scenario that accounts for its time. */
enum bench_role {
	ROLE_APP,		/* application threads that fault */
	ROLE_HANDLER,		/* the handler threads of their regions */
	ROLE_CHURN,		/* a thread that changes the map (lock) */
	ROLE_NR,
};

/* The machine and the process over a round (account.c). */
struct machine_time {
	double busy_ns, idle_ns, steal_ns; /* all CPUs, from /proc/stat */
	double proc_ns;		/* this process's CPU time */
	double wall_ns;
	double switches;	/* context switches, all CPUs */
};

/* What one variant produced in one round. */
struct sample {
	double value[BENCH_MAX_METRICS];
	bool has_stats;		/* a faultd variant: counters below */
	struct faultd_stats stats;
	bool has_locks;		/* and its lock times */
	struct lock_stats locks;
	/* A scenario that accounts for time: per role, over a window in
	 * which the application threads made @window_ops faults. */
	bool has_roles;
	struct sched_time role[ROLE_NR];
	unsigned int role_threads[ROLE_NR];
	double window_ops;
	struct machine_time machine;
	const char *skipped;	/* non-NULL: could not run, and why */
};

struct ratio {
	unsigned int num, den; /* indices into the scenario's variants */
};

/* As a ratio's den: the best other variant of the same round. */
#define RATIO_BEST 255u

struct scenario {
	const char *name;
	const char *desc;
	const char *metrics[BENCH_MAX_METRICS]; /* metrics[0] is the headline */
	unsigned int nmetrics;
	const char *variants[BENCH_MAX_VARIANTS];
	unsigned int nvariants;
	struct ratio ratios[BENCH_MAX_RATIOS];
	unsigned int nratios;
	unsigned int default_threads;
	size_t default_size_mib;
	/* Run variant @v once with options @o (defaults applied). */
	int (*run)(const struct bench_opts *o, unsigned int v,
		   struct sample *out);
};

extern const struct scenario scenario_pf1;
extern const struct scenario scenario_lock;
extern const struct scenario scenario_convoy;
extern const struct scenario scenario_pager;
extern const struct scenario scenario_clear;
extern const struct scenario scenario_brk;
extern const struct scenario scenario_pf2;
extern const struct scenario scenario_pf3;
extern const struct scenario scenario_dirty;
extern const struct scenario scenario_file;
extern const struct scenario scenario_restore;
extern const struct scenario scenario_mac;
extern const struct scenario scenario_criu;
extern const struct scenario scenario_workingset;
extern const struct scenario scenario_firecracker;
extern const struct scenario scenario_remote;

/* ------------------------------------------------------------------------
 * Helpers (bench-util.c)
 */

/* Start @n threads running fn(arg + i * stride) together; join them all. */
int run_threads(unsigned int n, void *(*fn)(void *), void *args,
		size_t stride);

/* The number of CPUs this process may run on. */
unsigned int bench_cpus(void);

/* Seconds since an arbitrary start, monotonic. */
/* A faultd daemon for the daemon variants (bench-util.c). */
struct bench_daemon {
	pid_t pid;
	char sock[108];
};

int bench_daemon_start(struct bench_daemon *d, const char *tag);
void bench_daemon_stop(struct bench_daemon *d);
int bench_tmp_file(char *path, const char *what);
double bench_now(void);

/* A thread's latency record: a histogram, summed into a sample later. */
struct lat_hist {
	struct stat_block b;
};

static inline void lat_record(struct lat_hist *h, uint64_t ns)
{
	stat_latency(&h->b, ns);
}

/* p50 and p99 of the merged histograms of @n threads, in ns. */
void lat_percentiles(const struct lat_hist *h, unsigned int n,
		     size_t stride, double *p50, double *p99);

/* Counters of @ctx accumulated into @out (faultd variants). */
void sample_ctx_stats(struct faultd_ctx *ctx, struct sample *out);

/* ------------------------------------------------------------------------
 * Time accounting (account.c)
 */

/* Thread @tid's schedstat (0: the calling thread). Returns 0 or -1. */
int sched_read(pid_t tid, struct sched_time *t);
/* Add b - a to @acc. */
void sched_since(struct sched_time *acc, const struct sched_time *a,
		 const struct sched_time *b);
void machine_read(struct machine_time *m);
void machine_since(struct machine_time *acc, const struct machine_time *a,
		   const struct machine_time *b);
/* The lock times of @ctx into @out (faultd variants). */
void sample_ctx_locks(struct faultd_ctx *ctx, struct sample *out);

/* A variant's accounts summed over rounds, then per fault. */
struct time_acc {
	bool valid;		/* every round had them */
	unsigned int rounds;
	struct sched_time role[ROLE_NR];
	unsigned int threads[ROLE_NR];
	double ops;
	struct machine_time m;
};

struct time_summary {
	double faults;		/* in the measured windows */
	double wall_us;		/* per fault of one application thread */
	double cpu_us[ROLE_NR], runq_us[ROLE_NR], slices[ROLE_NR];
	unsigned int threads[ROLE_NR];
	double process_cpu_us;
	double cpus, others_cpus, steal_cpus; /* over the rounds' wall time */
	double others_burst_us;	/* others' CPU per context switch of theirs */
};

extern const char *const bench_role_names[ROLE_NR];

void time_add(struct time_acc *acc, const struct sample *s);
void time_summarize(const struct time_acc *acc, struct time_summary *t);

/*
 * Make @n 2 MiB huge pages free for the rest of the run (given back at
 * exit). Returns 0 or -errno.
 */
int bench_hugepages(unsigned long n);

/* A context for a variant: lock mode and handler threads per region. */
struct faultd_ctx *bench_ctx(unsigned int lock_mode, unsigned int handlers);

/* ------------------------------------------------------------------------
 * Placement (place.c): --place and --handlers for the scenarios that use
 * regions, and a record of where threads and pages really were.
 */

/* Where application thread @i goes, and where its regions and handlers. */
struct placement {
	int node;		/* the thread's node; -1: not placed */
	cpu_set_t cpus;		/* the thread's CPUs, with node >= 0 */
	unsigned int policy;	/* FAULTD_NUMA_* for its regions */
	unsigned int mem_node;	/* with FAULTD_NUMA_BIND */
	uint64_t mem_nodes;	/* with FAULTD_NUMA_INTERLEAVE */
	int handler_cpu;	/* --handlers elsewhere: their CPU; -1: none */
};

/* Parse a --place or --handlers argument into @o. Returns 0 or -EINVAL. */
int place_parse(const char *arg, struct bench_opts *o);
int place_parse_handlers(const char *arg, struct bench_opts *o);

/*
 * The placement of application thread @i under @o. @cpu >= 0: a variant
 * that pins the thread to that CPU itself; the thread's node is then that
 * CPU's node.
 */
void place_thread(const struct bench_opts *o, unsigned int i, int cpu,
		  struct placement *p);

/* The CPU for thread @i of a variant that pins each thread to one CPU. */
int place_cpu(const struct bench_opts *o, unsigned int i);

/* Pin the calling thread to @p's CPUs (nothing when not placed). */
void place_self(const struct placement *p);

/*
 * Apply @p to region options: the memory policy, and for --handlers
 * elsewhere FAULTD_PLACE_CPU, unless the variant placed its handlers.
 */
void place_region(const struct placement *p, struct faultd_region_opts *ro);

/* The same for memory the bench maps itself (kernel, uffd-minimal). */
int place_mbind(const struct placement *p, void *addr, size_t len);

/* The same for a handler thread the bench starts itself (uffd-minimal). */
void place_handler(const struct placement *p, pthread_t thread);

/* NUMA nodes that have CPUs we may use (at least 1). */
unsigned int place_nodes(void);

/* What --place/--handlers could not do on this machine, or NULL. */
const char *place_note(const struct bench_opts *o);

const char *place_name(unsigned int place);
const char *place_handlers_name(unsigned int handlers);

/*
 * Where things ran, as observed (not as asked): the CPUs the application
 * threads and the handler threads were seen on, the memory policies of
 * the regions and the nodes their pages were on. Collected while a
 * variant runs, read and reset by the driver.
 */
struct where {
	cpu_set_t app_cpus;
	cpu_set_t handler_cpus;
	unsigned int policy_modes;	/* 1 << MPOL_* seen */
	uint64_t policy_nodes;		/* their node masks, or-ed */
	uint64_t page_nodes;		/* nodes pages were found on */
};

void where_reset(void);
void where_get(struct where *w);

/* The calling application thread's CPU, now. */
void where_app(void);

/*
 * The CPUs the handler threads (library's "faultd-h*", the bench's
 * "uffd-min") last ran on. Rate-limited: cheap to call after every pass.
 */
void where_handlers(void);

/* The policy of [addr, addr + len) and the nodes of a few touched pages. */
void where_memory(void *addr, size_t len);

/* A record as text: CPU lists ("0-3,8"), node lists, "bind:1"... */
struct where_text {
	char app_cpus[256], app_nodes[128];
	char handler_cpus[256], handler_nodes[128];
	char policy[256], page_nodes[128];
};

void where_text(const struct where *w, struct where_text *t);

/*
 * For `run` with --place or --handlers: one line (JSON with o->json) on
 * where the scenario's variants ran, from the record since where_reset().
 */
void place_report(const char *scenario, const struct bench_opts *o);

/* ------------------------------------------------------------------------
 * The driver (faultd-bench.c) and its sweep subcommand (sweep.c)
 */

/* The scenario called @name, or NULL. */
const struct scenario *bench_scenario(const char *name);

/* faultd-bench sweep SCENARIO ...: returns the exit status. */
int sweep_main(int argc, char **argv);

#endif /* FAULTD_BENCH_H */
