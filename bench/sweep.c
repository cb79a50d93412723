// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * sweep.c - faultd-bench sweep: how a scenario scales with threads.
 *
 *   faultd-bench sweep SCENARIO [--threads LIST] [--variants LIST]
 *                [--seconds S] [--rounds R] [--size MIB] [--json | --csv]
 *                [--place local|interleave|remote]
 *                [--handlers with-region|elsewhere]
 *
 * Runs the scenario at each thread count of LIST (default 1, 2, 4, ... up
 * to the usable CPUs, and that number itself), each point with the
 * scenario's variants interleaved over the rounds as `run` does. Per point
 * and variant it reports the headline metric (median, min, max over the
 * rounds), per-thread ops (the median divided by the threads, the kernel
 * test robot's per_thread_ops) and scalability (per-thread ops at N over
 * per-thread ops at the first point, 1 thread by default), with where the
 * threads and the pages were seen (place.c). Per-thread figures and
 * scalability are given for rate metrics (".._per_s") only.
 *
 * Meaningful for the scenarios that honour --threads (pf1, lock, pager).
 * Exit status as `run`: 0, 1 when a variant was skipped, 2 usage errors.
 */
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/utsname.h>
#include <time.h>

#include "bench.h"

#define MAX_POINTS 32

struct sweep {
	const struct scenario *sc;
	struct bench_opts o;
	unsigned int threads[MAX_POINTS], npoints;
	bool selected[BENCH_MAX_VARIANTS];
	bool csv;
	double base[BENCH_MAX_VARIANTS]; /* per-thread ops at the first point */
	int status;
};

/* What one point measured for one variant. */
struct point {
	double vals[BENCH_MAX_ROUNDS];
	double median, lo, hi, per_thread, scal;
	double others[BENCH_MAX_METRICS][BENCH_MAX_ROUNDS]; /* metrics 1.. */
	struct time_acc time;	/* where the time went (lock) */
	const char *skipped;
	struct where where;
};

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

static int cmp_uint(const void *a, const void *b)
{
	unsigned int x = *(const unsigned int *)a, y = *(const unsigned int *)b;

	return (x > y) - (x < y);
}

static bool is_rate(const char *metric)
{
	return strstr(metric, "per_s") != NULL;
}

/* ------------------------------------------------------------------------
 * Options
 */

static void sweep_usage(void)
{
	fprintf(stderr,
		"usage: faultd-bench sweep SCENARIO [--threads N,N,...] "
		"[--variants V,V,...]\n"
		"         [--seconds S] [--rounds R] [--size MIB] "
		"[--json | --csv]\n"
		"         [--place none|local|interleave|remote] "
		"[--handlers with-region|elsewhere]\n");
}

/* Default points: 1, 2, 4, ... below the usable CPUs, and that number. */
static void default_threads(struct sweep *s)
{
	unsigned int cpus = bench_cpus();

	for (unsigned int n = 1; n < cpus && s->npoints < MAX_POINTS - 1;
	     n *= 2)
		s->threads[s->npoints++] = n;
	s->threads[s->npoints++] = cpus;
}

static int parse_threads(struct sweep *s, char *list)
{
	unsigned int n = 0;

	for (char *tok = strtok(list, ","); tok; tok = strtok(NULL, ",")) {
		long v = strtol(tok, NULL, 10);

		if (v < 1 || v > BENCH_MAX_THREADS || n == MAX_POINTS)
			return -EINVAL;
		s->threads[n++] = (unsigned int)v;
	}
	if (!n)
		return -EINVAL;
	qsort(s->threads, n, sizeof(*s->threads), cmp_uint);
	s->npoints = 0;
	for (unsigned int i = 0; i < n; i++)
		if (!i || s->threads[i] != s->threads[i - 1])
			s->threads[s->npoints++] = s->threads[i];
	return 0;
}

static int parse_variants(struct sweep *s, char *list)
{
	memset(s->selected, 0, sizeof(s->selected));
	for (char *tok = strtok(list, ","); tok; tok = strtok(NULL, ",")) {
		unsigned int v;

		for (v = 0; v < s->sc->nvariants; v++)
			if (!strcmp(tok, s->sc->variants[v]))
				break;
		if (v == s->sc->nvariants) {
			fprintf(stderr, "faultd-bench: %s has no variant '%s'\n",
				s->sc->name, tok);
			return -EINVAL;
		}
		s->selected[v] = true;
	}
	return 0;
}

static int parse_one(struct sweep *s, int c, char *arg)
{
	int ret = bench_opts_parse(c, arg, &s->o);

	if (ret != -ENOENT)
		return ret;
	switch (c) {
	case 'c': s->csv = true; return 0;
	case 't': return parse_threads(s, arg);
	case 'v': return parse_variants(s, arg);
	}
	return -EINVAL;
}

static int parse_sweep(struct sweep *s, int argc, char **argv)
{
	static const struct option longopts[] = {
		BENCH_LONGOPTS_COMMON,
		{ "threads", required_argument, NULL, 't' },
		{ "variants", required_argument, NULL, 'v' },
		{ "csv", no_argument, NULL, 'c' },
		{ NULL, 0, NULL, 0 },
	};
	int c;

	for (unsigned int v = 0; v < s->sc->nvariants; v++)
		s->selected[v] = true;
	default_threads(s);
	optind = 3;
	while ((c = getopt_long(argc, argv, "", longopts, NULL)) != -1)
		if (parse_one(s, c, optarg) < 0)
			return -EINVAL;
	if (optind != argc || s->o.seconds <= 0 || s->o.rounds < 1 ||
	    s->o.rounds >= BENCH_MAX_ROUNDS || (s->o.json && s->csv))
		return -EINVAL;
	if (s->o.handlers == BENCH_HANDLERS_ELSEWHERE &&
	    s->o.place == BENCH_PLACE_NONE) {
		fprintf(stderr, "faultd-bench: --handlers elsewhere needs "
				"--place\n");
		return -EINVAL;
	}
	if (!s->o.size_mib)
		s->o.size_mib = s->sc->default_size_mib;
	return 0;
}

/* ------------------------------------------------------------------------
 * Running a point
 */

static void where_merge(struct where *acc, const struct where *w)
{
	CPU_OR(&acc->app_cpus, &acc->app_cpus, &w->app_cpus);
	CPU_OR(&acc->handler_cpus, &acc->handler_cpus, &w->handler_cpus);
	acc->policy_modes |= w->policy_modes;
	acc->policy_nodes |= w->policy_nodes;
	acc->page_nodes |= w->page_nodes;
}

static void run_variant(const struct sweep *s, const struct bench_opts *o,
			unsigned int v, unsigned int r, struct point *pt)
{
	struct sample smp;
	struct where w;
	int ret;

	memset(&smp, 0, sizeof(smp));
	where_reset();
	ret = s->sc->run(o, v, &smp);
	if (ret < 0 && !smp.skipped)
		smp.skipped = strerror(-ret);
	if (smp.skipped) {
		pt->skipped = smp.skipped;
		return;
	}
	where_get(&w);
	where_merge(&pt->where, &w);
	if (r == 0)
		return;
	pt->vals[r - 1] = smp.value[0];
	for (unsigned int m = 1; m < s->sc->nmetrics; m++)
		pt->others[m][r - 1] = smp.value[m];
	time_add(&pt->time, &smp);
}

static double median_of(double *v, unsigned int n)
{
	qsort(v, n, sizeof(*v), cmp_double);
	return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

static void summarize(const struct sweep *s, unsigned int n, bool first,
		      struct point *pt, double *base)
{
	unsigned int rounds = s->o.rounds;

	pt->lo = INFINITY;
	pt->hi = -INFINITY;
	for (unsigned int r = 0; r < rounds; r++) {
		pt->lo = fmin(pt->lo, pt->vals[r]);
		pt->hi = fmax(pt->hi, pt->vals[r]);
	}
	pt->median = median_of(pt->vals, rounds);
	pt->per_thread = pt->median / n;
	if (first)
		*base = pt->per_thread;
	pt->scal = *base > 0 ? pt->per_thread / *base : NAN;
}

/* ------------------------------------------------------------------------
 * Output: a table, JSON lines or CSV, one row per point and variant
 */

static const char *note_or(const struct sweep *s, const char *dflt)
{
	const char *note = place_note(&s->o);

	return note ? note : dflt;
}

static void print_json(const struct sweep *s, unsigned int n, unsigned int v,
		       const struct point *pt, bool rate)
{
	const char *sc = s->sc->name, *var = s->sc->variants[v];
	struct where_text t;

	if (pt->skipped) {
		printf("{\"scenario\":\"%s\",\"variant\":\"%s\",\"threads\":%u,"
		       "\"skipped\":\"%s\"}\n", sc, var, n, pt->skipped);
		return;
	}
	where_text(&pt->where, &t);
	printf("{\"scenario\":\"%s\",\"variant\":\"%s\",\"metric\":\"%s\","
	       "\"threads\":%u,\"median\":%.6g,\"min\":%.6g,\"max\":%.6g,"
	       "\"rounds\":%u,",
	       sc, var, s->sc->metrics[0], n, pt->median, pt->lo, pt->hi,
	       s->o.rounds);
	if (rate)
		printf("\"per_thread\":%.6g,", pt->per_thread);
	else
		printf("\"per_thread\":null,");
	if (rate && isfinite(pt->scal))
		printf("\"scalability\":%.4g,", pt->scal);
	else
		printf("\"scalability\":null,");
	printf("\"place\":\"%s\",\"handlers\":\"%s\",\"numa_nodes\":%u,"
	       "\"app_cpus\":\"%s\",\"app_nodes\":\"%s\",\"handler_cpus\":"
	       "\"%s\",\"handler_nodes\":\"%s\",\"mem_policy\":\"%s\","
	       "\"page_nodes\":\"%s\",\"note\":\"%s\"}\n",
	       place_name(s->o.place), place_handlers_name(s->o.handlers),
	       place_nodes(), t.app_cpus, t.app_nodes, t.handler_cpus,
	       t.handler_nodes, t.policy, t.page_nodes, note_or(s, ""));
}

#define CSV_HEADER                                                           \
	"scenario,variant,metric,threads,median,min,max,rounds,per_thread,"  \
	"scalability,place,handlers,numa_nodes,app_cpus,app_nodes,"          \
	"handler_cpus,handler_nodes,mem_policy,page_nodes,note,skipped,"     \
	"metrics,others_cpus,steal_cpus,others_burst_us,app_cpu_us,"         \
	"app_runq_us,handler_cpu_us,handler_runq_us,churn_cpu_us,"           \
	"churn_runq_us\n"

/*
 * The scenario's other metrics ("name=median;..."), and where the time
 * went for the scenarios that account for it (empty columns otherwise).
 */
static void print_csv_tail(const struct sweep *s, struct point *pt)
{
	struct time_summary t;

	printf("\"");
	for (unsigned int m = 1; m < s->sc->nmetrics; m++)
		printf("%s%s=%.6g", m > 1 ? ";" : "", s->sc->metrics[m],
		       median_of(pt->others[m], s->o.rounds));
	printf("\"");
	if (!pt->time.valid) {
		printf(",,,,,,,,,\n");
		return;
	}
	time_summarize(&pt->time, &t);
	printf(",%.3g,%.3g,%.4g,%.4g,%.4g,%.4g,%.4g,%.4g,%.4g\n",
	       t.others_cpus, t.steal_cpus, t.others_burst_us,
	       t.cpu_us[ROLE_APP], t.runq_us[ROLE_APP],
	       t.cpu_us[ROLE_HANDLER], t.runq_us[ROLE_HANDLER],
	       t.cpu_us[ROLE_CHURN], t.runq_us[ROLE_CHURN]);
}

static void print_csv(const struct sweep *s, unsigned int n, unsigned int v,
		      struct point *pt, bool rate)
{
	struct where_text t;

	printf("%s,%s,%s,%u,", s->sc->name, s->sc->variants[v],
	       s->sc->metrics[0], n);
	if (pt->skipped) {
		printf(",,,%u,,,%s,%s,%u,,,,,,,\"%s\",\"%s\",,,,,,,,,,\n",
		       s->o.rounds, place_name(s->o.place),
		       place_handlers_name(s->o.handlers), place_nodes(),
		       note_or(s, ""), pt->skipped);
		return;
	}
	where_text(&pt->where, &t);
	printf("%.6g,%.6g,%.6g,%u,", pt->median, pt->lo, pt->hi, s->o.rounds);
	if (rate)
		printf("%.6g,", pt->per_thread);
	else
		printf(",");
	if (rate && isfinite(pt->scal))
		printf("%.4g,", pt->scal);
	else
		printf(",");
	printf("%s,%s,%u,\"%s\",\"%s\",\"%s\",\"%s\",\"%s\",\"%s\",\"%s\",,",
	       place_name(s->o.place), place_handlers_name(s->o.handlers),
	       place_nodes(), t.app_cpus, t.app_nodes, t.handler_cpus,
	       t.handler_nodes, t.policy, t.page_nodes, note_or(s, ""));
	print_csv_tail(s, pt);
}

static void print_row(const struct sweep *s, unsigned int n, unsigned int v,
		      const struct point *pt, bool rate)
{
	struct where_text t;
	char app[400], hnd[400];

	if (pt->skipped) {
		printf("%7u  %-22s skipped: %s\n", n, s->sc->variants[v],
		       pt->skipped);
		return;
	}
	where_text(&pt->where, &t);
	snprintf(app, sizeof(app), "%s (%s)", t.app_cpus, t.app_nodes);
	snprintf(hnd, sizeof(hnd), "%s (%s)", t.handler_cpus,
		 t.handler_nodes);
	if (rate)
		printf("%7u  %-22s %12.6g %12.6g %6.2f", n, s->sc->variants[v],
		       pt->median, pt->per_thread, pt->scal);
	else
		printf("%7u  %-22s %12.6g %12s %6s", n, s->sc->variants[v],
		       pt->median, "-", "-");
	printf("  %-12s %-12s %-14s %s\n", app, hnd, t.policy, t.page_nodes);
}

static void print_head(const struct sweep *s)
{
	const struct scenario *sc = s->sc;
	struct utsname u;
	char date[32];
	time_t now = time(NULL);

	strftime(date, sizeof(date), "%Y-%m-%d %H:%M", localtime(&now));
	if (uname(&u) < 0)
		strcpy(u.release, "?");
	if (s->csv) {
		printf("# faultd-bench sweep %s: %s; %s; kernel %s; %u CPUs, "
		       "%u NUMA node(s); %zu MiB, %u rounds of %g s; place %s, "
		       "handlers %s; %s\n" CSV_HEADER,
		       sc->name, sc->desc, date, u.release, bench_cpus(),
		       place_nodes(), s->o.size_mib, s->o.rounds,
		       s->o.seconds, place_name(s->o.place),
		       place_handlers_name(s->o.handlers), note_or(s, ""));
	} else if (s->o.json) {
		printf("{\"sweep\":\"%s\",\"date\":\"%s\",\"kernel\":\"%s\","
		       "\"cpus\":%u,\"numa_nodes\":%u,\"size_mib\":%zu,"
		       "\"seconds\":%g,\"rounds\":%u,\"place\":\"%s\","
		       "\"handlers\":\"%s\",\"note\":\"%s\"}\n",
		       sc->name, date, u.release, bench_cpus(), place_nodes(),
		       s->o.size_mib, s->o.seconds, s->o.rounds,
		       place_name(s->o.place),
		       place_handlers_name(s->o.handlers), note_or(s, ""));
	} else {
		printf("%s sweep: %s\n  %s, kernel %s, %u CPUs, %u NUMA "
		       "node(s)%s%s\n  %zu MiB, %u rounds of %g s; place %s, "
		       "handlers %s\n%7s  %-22s %12s %12s %6s  %-12s %-12s "
		       "%-14s %s\n",
		       sc->name, sc->desc, date, u.release, bench_cpus(),
		       place_nodes(), place_note(&s->o) ? ": " : "",
		       note_or(s, ""), s->o.size_mib, s->o.rounds,
		       s->o.seconds, place_name(s->o.place),
		       place_handlers_name(s->o.handlers), "threads",
		       "variant", sc->metrics[0], "per_thread", "scal",
		       "app cpus", "handler cpus", "mem policy", "page nodes");
	}
}

static void print_point(struct sweep *s, unsigned int n, bool first,
			struct point *pts)
{
	bool rate = is_rate(s->sc->metrics[0]);

	for (unsigned int v = 0; v < s->sc->nvariants; v++) {
		if (!s->selected[v])
			continue;
		if (pts[v].skipped)
			s->status = 1;
		else
			summarize(s, n, first, &pts[v], &s->base[v]);
		if (s->csv)
			print_csv(s, n, v, &pts[v], rate);
		else if (s->o.json)
			print_json(s, n, v, &pts[v], rate);
		else
			print_row(s, n, v, &pts[v], rate);
	}
	fflush(stdout);
}

static int sweep_point(struct sweep *s, unsigned int n, bool first)
{
	struct point *pts = calloc(BENCH_MAX_VARIANTS, sizeof(*pts));
	struct bench_opts o = s->o;

	if (!pts)
		return -ENOMEM;
	o.threads = n;
	/* A warm-up round, then the variants interleaved, as `run` does. */
	for (unsigned int r = 0; r <= o.rounds; r++)
		for (unsigned int v = 0; v < s->sc->nvariants; v++)
			if (s->selected[v] && !pts[v].skipped)
				run_variant(s, &o, v, r, &pts[v]);
	print_point(s, n, first, pts);
	free(pts);
	return 0;
}

int sweep_main(int argc, char **argv)
{
	struct sweep s = { .o = { .seconds = 1.0, .rounds = 3 } };
	unsigned int nvar = 0;

	if (argc < 3 || !(s.sc = bench_scenario(argv[2]))) {
		if (argc >= 3)
			fprintf(stderr, "faultd-bench: no scenario '%s'\n",
				argv[2]);
		sweep_usage();
		return 2;
	}
	if (parse_sweep(&s, argc, argv) < 0) {
		sweep_usage();
		return 2;
	}
	for (unsigned int v = 0; v < s.sc->nvariants; v++)
		nvar += s.selected[v];
	fprintf(stderr, "sweep %s: %u points x %u variants x %u rounds "
			"(+1 warm-up) x %g s: about %.0f s\n",
		s.sc->name, s.npoints, nvar, s.o.rounds, s.o.seconds,
		s.npoints * nvar * (s.o.rounds + 1) * s.o.seconds);
	print_head(&s);
	for (unsigned int i = 0; i < s.npoints; i++)
		if (sweep_point(&s, s.threads[i], i == 0) < 0)
			return 1;
	return s.status;
}
