// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * faultd-bench - the one program that produces libfaultd's figures.
 *
 *   faultd-bench list
 *   faultd-bench run SCENARIO|all [--seconds S] [--threads N] [--size MIB]
 *                [--rounds R] [--json] [--place P] [--handlers H]
 *   faultd-bench sweep SCENARIO ...      (thread-count sweeps: sweep.c)
 *   faultd-bench fc-example SOCKET MEMFILE   (Firecracker's example
 *                                        handler: fc-example.c)
 *
 * Each scenario runs its variants side by side in one process, interleaved
 * (a warm-up round, then A B A B ... for R rounds), because ratios measured
 * that way hold on a shared, noisy machine and absolute times do not. The
 * output is a table, or with --json one object per line: per variant and
 * metric the median/min/max over rounds, per headline pair the median of
 * the per-round ratios, and the library's counters for faultd variants.
 * Exit status: 0 when every variant ran, 1 when one was skipped, 2 on
 * usage errors.
 */
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "fc-example.h"

static const struct scenario *const scenarios[] = {
	&scenario_pf1,
	&scenario_pf2,
	&scenario_pf3,
	&scenario_lock,
	&scenario_convoy,
	&scenario_pager,
	&scenario_clear,
	&scenario_brk,
	&scenario_dirty,
	&scenario_file,
	&scenario_restore,
	&scenario_mac,
	&scenario_criu,
	&scenario_workingset,
	&scenario_firecracker,
	&scenario_remote,
};


const struct scenario *bench_scenario(const char *name)
{
	for (size_t i = 0; i < sizeof(scenarios) / sizeof(*scenarios); i++)
		if (!strcmp(name, scenarios[i]->name))
			return scenarios[i];
	return NULL;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

static double median(double *v, unsigned int n)
{
	qsort(v, n, sizeof(*v), cmp_double);
	return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

struct results {
	struct sample s[BENCH_MAX_ROUNDS][BENCH_MAX_VARIANTS];
	unsigned int rounds;
};

/*
 * A metric a variant does not measure is NaN in its samples (in every
 * round alike): it gets no line, and no ratio.
 */
static bool measured(const struct results *res, unsigned int v,
		     unsigned int m)
{
	return !isnan(res->s[1][v].value[m]);
}

static void print_metric(const struct scenario *sc, const struct bench_opts *o,
			 const struct results *res, unsigned int v,
			 unsigned int m)
{
	double vals[BENCH_MAX_ROUNDS], lo = INFINITY, hi = -INFINITY, med;
	unsigned int n = res->rounds;

	if (!measured(res, v, m))
		return;
	for (unsigned int r = 0; r < n; r++) {
		vals[r] = res->s[r + 1][v].value[m];
		lo = fmin(lo, vals[r]);
		hi = fmax(hi, vals[r]);
	}
	med = median(vals, n);
	if (o->json)
		printf("{\"scenario\":\"%s\",\"variant\":\"%s\",\"metric\":"
		       "\"%s\",\"median\":%.6g,\"min\":%.6g,\"max\":%.6g,"
		       "\"rounds\":%u}\n",
		       sc->name, sc->variants[v], sc->metrics[m], med, lo, hi,
		       n);
	else
		printf("  %-20s %-26s %12.6g  (min %.6g, max %.6g)\n",
		       sc->variants[v], sc->metrics[m], med, lo, hi);
}

/* A round's denominator: a variant, or the best of the others. */
static double ratio_den(const struct scenario *sc, const struct sample *round,
			const struct ratio *q, unsigned int m)
{
	double best = 0;

	if (q->den != RATIO_BEST)
		return round[q->den].value[m];
	for (unsigned int v = 0; v < sc->nvariants; v++)
		if (v != q->num && !round[v].skipped && round[v].value[m] > best)
			best = round[v].value[m];
	return best;
}

static void print_ratio(const struct scenario *sc, const struct bench_opts *o,
			const struct results *res, const struct ratio *q,
			unsigned int m)
{
	double vals[BENCH_MAX_ROUNDS], med;
	unsigned int n = res->rounds;

	const char *den_name = q->den == RATIO_BEST ? "best"
						    : sc->variants[q->den];

	if (!measured(res, q->num, m) ||
	    (q->den != RATIO_BEST && !measured(res, q->den, m)))
		return;
	for (unsigned int r = 0; r < n; r++) {
		double den = ratio_den(sc, res->s[r + 1], q, m);

		vals[r] = den ? res->s[r + 1][q->num].value[m] / den : 0;
	}
	med = median(vals, n); /* sorts vals */
	if (o->json)
		printf("{\"scenario\":\"%s\",\"ratio\":\"%s/%s\",\"metric\":"
		       "\"%s\",\"median\":%.4g,\"min\":%.4g,\"max\":%.4g}\n",
		       sc->name, sc->variants[q->num], den_name,
		       sc->metrics[m], med, vals[0], vals[n - 1]);
	else
		printf("  ratio %s/%s %s: %.3f (rounds: min %.3f, max %.3f)\n",
		       sc->variants[q->num], den_name, sc->metrics[m], med,
		       vals[0], vals[n - 1]);
}

/* The library's counters for a faultd variant, summed over the rounds. */
static void print_counters(const struct scenario *sc,
			   const struct bench_opts *o,
			   const struct results *res, unsigned int v)
{
	struct faultd_stats t = { 0 };
	struct stat_block lat;

	memset(&lat, 0, sizeof(lat));
	for (unsigned int r = 1; r <= res->rounds; r++) {
		const struct faultd_stats *s = &res->s[r][v].stats;

		t.faults += s->faults;
		t.fast += s->fast;
		t.retry += s->retry;
		t.locked += s->locked;
		t.abort += s->abort;
		t.miss += s->miss;
		t.eexist += s->eexist;
		t.eagain += s->eagain;
		t.poisoned += s->poisoned;
		for (unsigned int i = 0; i < FAULTD_HIST_BUCKETS; i++)
			t.latency[i] += s->latency[i];
	}
	t.size = sizeof(t);
	printf(o->json ? "{\"scenario\":\"%s\",\"variant\":\"%s\",\"counters\":"
			 "{\"faults\":%llu,\"fast\":%llu,\"retry\":%llu,"
			 "\"locked\":%llu,\"abort\":%llu,\"miss\":%llu,"
			 "\"eexist\":%llu,\"eagain\":%llu,\"poisoned\":%llu,"
			 "\"handler_p50_ns\":%llu,\"handler_p99_ns\":%llu}}\n"
		       : "  %s/%s counters: faults %llu fast %llu retry %llu "
			 "locked %llu abort %llu miss %llu eexist %llu "
			 "eagain %llu poisoned %llu; handler time p50 %llu ns "
			 "p99 %llu ns\n",
	       sc->name, sc->variants[v], (unsigned long long)t.faults,
	       (unsigned long long)t.fast, (unsigned long long)t.retry,
	       (unsigned long long)t.locked, (unsigned long long)t.abort,
	       (unsigned long long)t.miss, (unsigned long long)t.eexist,
	       (unsigned long long)t.eagain, (unsigned long long)t.poisoned,
	       (unsigned long long)faultd_stats_latency(&t, 50),
	       (unsigned long long)faultd_stats_latency(&t, 99));
}

/* Sums over the measured rounds of variant @v's accounts. */
struct account {
	struct time_acc t;
	struct lock_stats locks;
	bool locked;
};

static void account_sum(const struct results *res, unsigned int v,
			struct account *a)
{
	memset(a, 0, sizeof(*a));
	for (unsigned int r = 1; r <= res->rounds; r++) {
		const struct sample *s = &res->s[r][v];

		time_add(&a->t, s);
		a->locked = s->has_locks;
		lock_stats_sum(&a->locks, &s->locks);
	}
}

static const char *const lock_names[LK_NR] = {
	[LK_CTX_READ_WAIT] = "ctx_read_wait",
	[LK_CTX_READ_HOLD] = "ctx_read_hold",
	[LK_REGION_READ_HOLD] = "region_read_hold",
	[LK_CTX_WRITE_WAIT] = "ctx_write_wait",
	[LK_CTX_WRITE_HOLD] = "ctx_write_hold",
	[LK_REGION_WRITE_WAIT] = "region_write_wait",
	[LK_REGION_WRITE_HOLD] = "region_write_hold",
};

/*
 * Where the time of variant @v went, per fault (µs): the wall time per
 * fault of one application thread, and per role its threads' CPU and
 * run-queue time; the machine's load beside this process.
 */
static void print_time(const struct scenario *sc, const struct bench_opts *o,
		       const struct account *a, unsigned int v)
{
	struct time_summary t;

	time_summarize(&a->t, &t);
	printf(o->json ? "{\"scenario\":\"%s\",\"variant\":\"%s\",\"time\":"
			 "{\"faults\":%.0f,\"wall_us\":%.4g"
		       : "  %s/%s time per fault, us: faults %.0f, wall %.4g"
			 " per thread",
	       sc->name, sc->variants[v], t.faults, t.wall_us);
	for (unsigned int i = 0; i < ROLE_NR; i++) {
		const char *r = bench_role_names[i];

		if (!t.threads[i])
			continue;
		if (o->json)
			printf(",\"%s_threads\":%u,\"%s_cpu_us\":%.4g,"
			       "\"%s_runq_us\":%.4g,\"%s_slices\":%.4g",
			       r, t.threads[i], r, t.cpu_us[i], r,
			       t.runq_us[i], r, t.slices[i]);
		else
			printf("; %s (%u) cpu %.4g runq %.4g slices %.3g", r,
			       t.threads[i], t.cpu_us[i], t.runq_us[i],
			       t.slices[i]);
	}
	printf(o->json ? ",\"process_cpu_us\":%.4g,\"cpus\":%.3g,"
			 "\"others_cpus\":%.3g,\"steal_cpus\":%.3g,"
			 "\"others_burst_us\":%.4g}}\n"
		       : "; process cpu %.4g; machine: %.3g CPUs, others "
			 "busy %.3g, steal %.3g, others' bursts %.3g us\n",
	       t.process_cpu_us, t.cpus, t.others_cpus, t.steal_cpus,
	       t.others_burst_us);
}

/* The lock times of variant @v: per kind, count, mean, percentiles (ns). */
static void print_locks(const struct scenario *sc, const struct bench_opts *o,
			const struct account *a, unsigned int v)
{
	bool first = true;

	printf(o->json ? "{\"scenario\":\"%s\",\"variant\":\"%s\",\"locks\":{"
		       : "  %s/%s locks, ns (n mean p10 p50 p90 p99):",
	       sc->name, sc->variants[v]);
	for (unsigned int i = 0; i < LK_NR; i++) {
		const struct lock_hist *h = &a->locks.h[i];
		double mean = h->n ? (double)h->ns / (double)h->n : 0;

		if (!h->n)
			continue;
		printf(o->json ? "%s\"%s\":{\"n\":%llu,\"mean\":%.4g,"
				 "\"p10\":%llu,\"p50\":%llu,\"p90\":%llu,"
				 "\"p99\":%llu}"
			       : "%s %s %llu %.4g %llu %llu %llu %llu",
		       first ? "" : (o->json ? "," : ";"), lock_names[i],
		       (unsigned long long)h->n, mean,
		       (unsigned long long)hist_percentile(h->b, 10),
		       (unsigned long long)hist_percentile(h->b, 50),
		       (unsigned long long)hist_percentile(h->b, 90),
		       (unsigned long long)hist_percentile(h->b, 99));
		first = false;
	}
	printf(o->json ? "},\"sample\":%u}\n" : " (fault path: 1 in %u)\n",
	       LOCK_SAMPLE);
}

static int report(const struct scenario *sc, const struct bench_opts *o,
		  const struct results *res)
{
	struct account acc;
	int skipped = 0;

	if (!o->json)
		printf("%s: %s (%u threads, %zu MiB, %u rounds of %.2g s)\n",
		       sc->name, sc->desc, o->threads, o->size_mib, res->rounds,
		       o->seconds);
	for (unsigned int v = 0; v < sc->nvariants; v++) {
		const char *why = res->s[1][v].skipped;

		if (why) {
			skipped = 1;
			printf(o->json ? "{\"scenario\":\"%s\",\"variant\":\"%s\","
					 "\"skipped\":\"%s\"}\n"
				       : "  %s/%s skipped: %s\n",
			       sc->name, sc->variants[v], why);
			continue;
		}
		for (unsigned int m = 0; m < sc->nmetrics; m++)
			print_metric(sc, o, res, v, m);
		if (res->s[1][v].has_stats)
			print_counters(sc, o, res, v);
		account_sum(res, v, &acc);
		if (acc.t.valid)
			print_time(sc, o, &acc, v);
		if (acc.locked)
			print_locks(sc, o, &acc, v);
	}
	for (unsigned int q = 0; q < sc->nratios; q++) {
		const struct ratio *r = &sc->ratios[q];

		if (res->s[1][r->num].skipped ||
		    (r->den != RATIO_BEST && res->s[1][r->den].skipped))
			continue;
		for (unsigned int m = 0; m < sc->nmetrics; m++)
			print_ratio(sc, o, res, r, m);
	}
	fflush(stdout);
	return skipped;
}

static int run_scenario(const struct scenario *sc, struct bench_opts o)
{
	struct results *res = calloc(1, sizeof(*res));
	int ret;

	if (!res)
		return -ENOMEM;
	if (!o.threads)
		o.threads = sc->default_threads;
	if (!o.size_mib)
		o.size_mib = sc->default_size_mib;
	res->rounds = o.rounds;
	where_reset();
	for (unsigned int r = 0; r <= o.rounds; r++) {
		for (unsigned int v = 0; v < sc->nvariants; v++) {
			struct sample *s = &res->s[r][v];

			ret = sc->run(&o, v, s);
			if (ret < 0 && !s->skipped)
				s->skipped = strerror(-ret);
		}
	}
	ret = report(sc, &o, res);
	if (o.place || o.handlers)
		place_report(sc->name, &o);
	free(res);
	return ret;
}

static void usage(FILE *f)
{
	fprintf(f, "usage: faultd-bench list\n"
		   "       faultd-bench run SCENARIO|all [--seconds S] "
		   "[--threads N] [--size MIB] [--rounds R] [--json]\n"
		   "                [--place none|local|interleave|remote] "
		   "[--handlers with-region|elsewhere]\n"
		   "       faultd-bench sweep SCENARIO [--threads N,N,...] "
		   "[...]   (options: faultd-bench sweep)\n"
		   "       faultd-bench fc-example SOCKET MEMFILE "
		   "[--ignore-remove] [--skew]\n");
}

static int parse_opts(int argc, char **argv, struct bench_opts *o)
{
	static const struct option longopts[] = {
		BENCH_LONGOPTS_COMMON,
		{ "threads", required_argument, NULL, 't' },
		{ NULL, 0, NULL, 0 },
	};
	int c, ret;

	while ((c = getopt_long(argc, argv, "", longopts, NULL)) != -1) {
		ret = bench_opts_parse(c, optarg, o);
		if (ret == -ENOENT && c == 't') {
			o->threads = (unsigned int)atoi(optarg);
			ret = 0;
		}
		if (ret < 0)
			return -1;
	}
	if (o->seconds <= 0 || o->rounds < 1 || o->rounds >= BENCH_MAX_ROUNDS ||
	    o->threads > BENCH_MAX_THREADS ||
	    (o->handlers && !o->place)) /* elsewhere: from the region's node */
		return -1;
	return 0;
}

int main(int argc, char **argv)
{
	struct bench_opts o = { .seconds = 1.0, .rounds = 3 };
	const char *which;
	int ret = 0, found = 0;

	if (argc >= 2 && !strcmp(argv[1], "list")) {
		for (size_t i = 0; i < sizeof(scenarios) / sizeof(*scenarios);
		     i++)
			printf("%-8s %s\n", scenarios[i]->name,
			       scenarios[i]->desc);
		return 0;
	}
	if (argc >= 2 && !strcmp(argv[1], "sweep"))
		return sweep_main(argc, argv);
	if (argc >= 2 && !strcmp(argv[1], "fc-example"))
		return fc_example_main(argc - 1, argv + 1);
	if (argc < 3 || strcmp(argv[1], "run")) {
		usage(stderr);
		return 2;
	}
	which = argv[2];
	if (!strcmp(which, "all"))
		o.seconds = 0.5; /* short settings for the whole set */
	optind = 3;
	if (parse_opts(argc, argv, &o) < 0) {
		usage(stderr);
		return 2;
	}
	for (size_t i = 0; i < sizeof(scenarios) / sizeof(*scenarios); i++) {
		if (strcmp(which, "all") && strcmp(which, scenarios[i]->name))
			continue;
		found = 1;
		if (run_scenario(scenarios[i], o))
			ret = 1;
	}
	if (!found) {
		fprintf(stderr, "faultd-bench: no scenario '%s'\n", which);
		return 2;
	}
	return ret;
}
