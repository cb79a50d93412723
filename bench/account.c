// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * account.c - where a round's time went: per thread, the CPU time and the
 * time spent runnable but waiting for a CPU (the kernel's schedstat of the
 * task, /proc/.../schedstat); for the process, its CPU time; for the
 * machine, what every CPU did over the round (/proc/stat), so that the
 * load of other processes and the hypervisor's steal are known for each
 * figure (over the CPUs the process may use: taskset is honoured); and
 * the library's lock times (struct lock_stats). Context switches are
 * counted machine-wide only (/proc/stat ctxt), so others' bursts are
 * estimated with those of every CPU.
 *
 * Per-thread figures come from the kernel's sched_info, which counts the
 * wait from the moment a woken task is queued on a CPU's run queue: the
 * transit of a wake-up to an idle CPU (the IPI, the exit from idle) is in
 * neither the waker's nor the wakee's figures.
 */
#include <sched.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "bench.h"

int sched_read(pid_t tid, struct sched_time *t)
{
	char path[64];
	unsigned long long cpu, runq, slices;
	FILE *f;
	int n;

	if (tid)
		snprintf(path, sizeof(path), "/proc/self/task/%d/schedstat",
			 (int)tid);
	else
		snprintf(path, sizeof(path), "/proc/thread-self/schedstat");
	f = fopen(path, "r");
	if (!f)
		return -1;
	n = fscanf(f, "%llu %llu %llu", &cpu, &runq, &slices);
	fclose(f);
	if (n != 3)
		return -1;
	*t = (struct sched_time){ .cpu_ns = (double)cpu,
				  .runq_ns = (double)runq,
				  .slices = (double)slices };
	return 0;
}

void sched_since(struct sched_time *acc, const struct sched_time *a,
		 const struct sched_time *b)
{
	acc->cpu_ns += b->cpu_ns - a->cpu_ns;
	acc->runq_ns += b->runq_ns - a->runq_ns;
	acc->slices += b->slices - a->slices;
}

/* Context switches on the machine since boot (/proc/stat ctxt). */
static double stat_switches(void)
{
	unsigned long long n = 0;
	char line[256];
	FILE *f = fopen("/proc/stat", "r");

	while (f && fgets(line, sizeof(line), f))
		if (sscanf(line, "ctxt %llu", &n) == 1)
			break;
	if (f)
		fclose(f);
	return (double)n;
}

/*
 * The time of the CPUs this process may run on (/proc/stat cpuN lines),
 * by kind: user nice system idle iowait irq softirq steal, in ticks.
 */
static void stat_cpus(unsigned long long v[8])
{
	unsigned long long x[8];
	cpu_set_t allowed;
	char line[512];
	FILE *f = fopen("/proc/stat", "r");
	int cpu;

	memset(v, 0, 8 * sizeof(v[0]));
	if (sched_getaffinity(0, sizeof(allowed), &allowed) < 0)
		CPU_ZERO(&allowed);
	while (f && fgets(line, sizeof(line), f)) {
		if (sscanf(line, "cpu%d %llu %llu %llu %llu %llu %llu %llu %llu",
			   &cpu, &x[0], &x[1], &x[2], &x[3], &x[4], &x[5],
			   &x[6], &x[7]) != 9 ||
		    cpu < 0 || cpu >= CPU_SETSIZE || !CPU_ISSET(cpu, &allowed))
			continue;
		for (int i = 0; i < 8; i++)
			v[i] += x[i];
	}
	if (f)
		fclose(f);
}

/* The CPU time of the CPUs we may use by kind, and this process's, now. */
void machine_read(struct machine_time *m)
{
	unsigned long long v[8];
	double tick = (double)sysconf(_SC_CLK_TCK);
	struct timespec ts;

	stat_cpus(v);
	/* user nice system idle iowait irq softirq steal */
	m->busy_ns = (double)(v[0] + v[1] + v[2] + v[5] + v[6]) / tick * 1e9;
	m->idle_ns = (double)(v[3] + v[4]) / tick * 1e9;
	m->steal_ns = (double)v[7] / tick * 1e9;
	m->switches = stat_switches();
	clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
	m->proc_ns = (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
	m->wall_ns = (double)now_ns();
}

void machine_since(struct machine_time *acc, const struct machine_time *a,
		   const struct machine_time *b)
{
	acc->busy_ns += b->busy_ns - a->busy_ns;
	acc->idle_ns += b->idle_ns - a->idle_ns;
	acc->steal_ns += b->steal_ns - a->steal_ns;
	acc->proc_ns += b->proc_ns - a->proc_ns;
	acc->wall_ns += b->wall_ns - a->wall_ns;
	acc->switches += b->switches - a->switches;
}

void sample_ctx_locks(struct faultd_ctx *ctx, struct sample *out)
{
	memset(&out->locks, 0, sizeof(out->locks));
	ctx_lock_stats(ctx, &out->locks);
	out->has_locks = true;
}

const char *const bench_role_names[ROLE_NR] = {
	[ROLE_APP] = "app",
	[ROLE_HANDLER] = "handler",
	[ROLE_CHURN] = "churn",
};

/* Add one round's accounts; a round without them makes @acc invalid. */
void time_add(struct time_acc *acc, const struct sample *s)
{
	struct sched_time zero = { 0 };
	struct machine_time mzero = { 0 };

	if (!acc->rounds++)
		acc->valid = true;
	acc->valid &= s->has_roles;
	for (unsigned int i = 0; i < ROLE_NR; i++) {
		sched_since(&acc->role[i], &zero, &s->role[i]);
		acc->threads[i] = s->role_threads[i];
	}
	acc->ops += s->window_ops;
	machine_since(&acc->m, &mzero, &s->machine);
}

void time_summarize(const struct time_acc *acc, struct time_summary *t)
{
	double ops = acc->ops > 0 ? acc->ops : 1, wall = acc->m.wall_ns;
	double ours = 0, others;

	memset(t, 0, sizeof(*t));
	t->faults = acc->ops;
	t->wall_us = wall * acc->threads[ROLE_APP] / ops / 1e3;
	for (unsigned int i = 0; i < ROLE_NR; i++) {
		t->threads[i] = acc->threads[i];
		t->cpu_us[i] = acc->role[i].cpu_ns / ops / 1e3;
		t->runq_us[i] = acc->role[i].runq_ns / ops / 1e3;
		t->slices[i] = acc->role[i].slices / ops;
		ours += acc->role[i].slices;
	}
	t->process_cpu_us = acc->m.proc_ns / ops / 1e3;
	if (wall <= 0)
		return;
	t->cpus = (acc->m.busy_ns + acc->m.idle_ns + acc->m.steal_ns) / wall;
	others = acc->m.busy_ns - acc->m.proc_ns;
	t->others_cpus = others / wall;
	t->steal_cpus = acc->m.steal_ns / wall;
	/* Ours are the roles' threads; the few others of the process (a
	 * churner's short-lived handlers) count as others' here. */
	if (acc->m.switches > ours && others > 0)
		t->others_burst_us = others / (acc->m.switches - ours) / 1e3;
}
