// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * remote.c - scenario remote: a Firecracker restore whose memory file is
 * on another host. The file (--size MiB, default 512, pseudo-random, no
 * holes) is served by nbdkit (its file plugin, 64 threads) in a network
 * namespace of the bench's own, across a veth pair (fdb28r0/1,
 * 10.250.30.1 to .2; nothing else is in either namespace), with nothing
 * or 1 ms added to every read (nbdkit's delay filter). A guest is
 * restored as Firecracker restores it (fc-guest.c) and 2 threads (or
 * --threads) touch a fixed random 10 % of its pages, one word each, in
 * one random order they share; faultd firecracker serves it.
 *
 * Variants (those ending in -1ms: with the 1 ms):
 *   local-file      --mem-file of the same file on this host, page cache
 *                   warm: the baseline of on demand
 *   nbd-on-demand   --mem nbd://...: what the guest touches, faulted in
 *   nbd-prefetch    the same with --prefetch: the rest pushed
 *   nbd-replay      the same with --working-set: the set recorded once,
 *                   over the export, by a run of the same guest
 *                   (--record-working-set), replayed before the push
 *   nbd-4-clones    four guests of the same memory at once, each
 *                   touching the same 10 %: one daemon, one connection
 *                   set, one chunk cache
 *   nbdcopy         nbdcopy of the export to null: (the limit of reading
 *                   it; libnbd's own copier, 4 connections)
 * Metrics (t0: the handshake's sendmsg() returned; for the clones, of
 * each guest, the slowest counted):
 *   first_fault_ms  t0 to the end of the first touch
 *   ws_ms           t0 to the end of the last touch: the working set in
 *   all_in_ms       the daemon's all_in_ms of the session (--prefetch),
 *                   nbdcopy's time
 *   gb_per_s        the memory's bytes / all_in_ms where every page comes
 *                   in; else the set's bytes / ws_ms
 *   faults          the daemon's count (all the guests')
 *   bytes_fetched   what nbdkit read (its stats filter)
 */
#define NETNS_DEV "fdb28r"
#define NETNS_CLIENT "10.250.30.1"
#define NETNS_SERVER "10.250.30.2"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <math.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bench.h"
#include "fc-guest.h"
#include "nbd/servers.h"
#include "proto.h"

enum { V_LOCAL, V_OD, V_PF, V_REP, V_CLONES, V_COPY,
       V_OD1, V_PF1, V_REP1, V_CLONES1, V_COPY1, V_NR };
enum { M_FIRST, M_WS, M_ALL_IN, M_GBPS, M_FAULTS, M_FETCHED };

#define EVERY 10		/* 1 page in EVERY is touched */
#define CLONES 4
#define MAX_GUEST_THREADS 64
#define PORT "10809"
#define DONE_MS 600000		/* a push that is not done by then: failed */

static struct {
	char dir[64];
	char mem[96], sock[96], ctl[100], notify[96], wset[96];
	char stats[96], dlog[96];
	char uri[64];
	uint64_t size;
	uint64_t *set;		/* the touched pages, in their order */
	uint64_t set_n;
	struct netns ns;
	int home_ns, client_ns;	/* the bench's namespace, the client's */
	bool ready;
	const char *skipped;
} rm = { .home_ns = -1, .client_ns = -1 };

static void cleanup(void)
{
	char cmd[96];

	netns_end(&rm.ns);
	if (!rm.dir[0])
		return;
	snprintf(cmd, sizeof(cmd), "rm -rf %s", rm.dir);
	if (system(cmd))
		fprintf(stderr, "remote: cannot remove %s\n", rm.dir);
}

/* ------------------------------------------------------------------------
 * Made once for the run: the file, the set, the namespaces, the record.
 */

/* A fixed random 1 page in EVERY, in a random order. */
static int set_make(uint64_t pages)
{
	uint64_t n = 0;

	rm.set = malloc((pages / EVERY + 1) * sizeof(*rm.set));
	if (!rm.set)
		return -ENOMEM;
	for (uint64_t p = 0; p < pages; p++)
		if (fc_mix(p ^ 0x28) % EVERY == 0 && n < pages / EVERY + 1)
			rm.set[n++] = p;
	for (uint64_t i = 0; i + 1 < n; i++) {
		uint64_t j = i + fc_mix(~i) % (n - i), x = rm.set[i];

		rm.set[i] = rm.set[j];
		rm.set[j] = x;
	}
	rm.set_n = n;
	return 0;
}

/* Into the client's namespace, made the first time; back with ns_home. */
static int ns_client(void)
{
	char why[256];

	if (rm.client_ns >= 0)
		return setns(rm.client_ns, CLONE_NEWNET) ? -errno : 0;
	rm.home_ns = open("/proc/self/ns/net", O_RDONLY | O_CLOEXEC);
	if (rm.home_ns < 0)
		return -errno;
	if (netns_make(&rm.ns, why, sizeof(why))) {
		fprintf(stderr, "remote: %s\n", why);
		rm.skipped = "no network namespaces and veth pair here (root, "
			     "ip(8))";
		return -EPERM;
	}
	rm.client_ns = open("/proc/self/ns/net", O_RDONLY | O_CLOEXEC);
	return rm.client_ns < 0 ? -errno : 0;
}

static void ns_home(void)
{
	if (rm.home_ns >= 0 && setns(rm.home_ns, CLONE_NEWNET))
		fprintf(stderr, "remote: back to the bench's namespace: %s\n",
			strerror(errno));
}

/* nbdkit serving the file, with @delay_ms added to each read, its
 * stats into rm.stats. */
static int nbdkit_serve(struct server *s, unsigned int delay_ms)
{
	char stats[128], why[256];
	const char *a[16] = { "-i", NETNS_SERVER, "-p", PORT, "--threads",
			      "64", "--filter=stats" };
	unsigned int n = 7;

	snprintf(stats, sizeof(stats), "statsfile=%s", rm.stats);
	if (delay_ms)
		a[n++] = "--filter=delay";
	a[n++] = "file";
	a[n++] = rm.mem;
	a[n++] = stats;
	if (delay_ms)
		a[n++] = "delay-read=1ms";
	a[n] = NULL;
	unlink(rm.stats);
	if (nbdkit_start(s, &rm.ns, rm.dir, "nbdkit", a, why, sizeof(why))) {
		fprintf(stderr, "remote: %s\n", why);
		return -EIO;
	}
	return 0;
}

/* ------------------------------------------------------------------------
 * Guests.
 */

struct guest {
	struct fc_guest fc;
	atomic_uint_fast64_t next, first_done, last_done;
};

static void note_done(atomic_uint_fast64_t *v, uint64_t t, bool first)
{
	uint64_t cur = atomic_load(v);

	while ((first ? t < cur : t > cur) &&
	       !atomic_compare_exchange_weak(v, &cur, t))
		;
}

struct toucher {
	struct guest *g;
};

/* Touch the set's pages in its order, one word each. */
static void *toucher_main(void *arg)
{
	struct guest *g = ((struct toucher *)arg)->g;
	uint64_t k;

	while ((k = atomic_fetch_add(&g->next, 1)) < rm.set_n) {
		volatile uint64_t *w = (volatile uint64_t *)(g->fc.base +
							      rm.set[k] * 4096);
		uint64_t t;

		(void)*w;
		t = now_ns();
		note_done(&g->first_done, t, true);
		note_done(&g->last_done, t, false);
	}
	return NULL;
}

/* @nr guests restored at once, each touched by @threads threads. */
static int guests_run(struct guest *g, unsigned int nr, unsigned int threads)
{
	struct toucher t[CLONES * MAX_GUEST_THREADS];
	int ret = 0;

	for (unsigned int i = 0; i < nr; i++) {
		g[i] = (struct guest){ .fc = { .uffd = -1, .sock = -1 },
				       .first_done = UINT64_MAX };
		for (unsigned int k = 0; k < threads; k++)
			t[i * threads + k].g = &g[i];
	}
	for (unsigned int i = 0; !ret && i < nr; i++)
		ret = fc_guest_restore(&g[i].fc, rm.sock, rm.size);
	if (!ret)
		ret = run_threads(nr * threads, toucher_main, t, sizeof(*t));
	return ret;
}

/* The slowest guest's figures. */
static void guests_times(const struct guest *g, unsigned int nr,
			 struct sample *out)
{
	out->value[M_FIRST] = out->value[M_WS] = 0;
	for (unsigned int i = 0; i < nr; i++) {
		double first = (double)(atomic_load(&g[i].first_done) -
					g[i].fc.sent_ns) / 1e6;
		double ws = (double)(atomic_load(&g[i].last_done) -
				     g[i].fc.sent_ns) / 1e6;

		out->value[M_FIRST] = fmax(out->value[M_FIRST], first);
		out->value[M_WS] = fmax(out->value[M_WS], ws);
	}
}

/* ------------------------------------------------------------------------
 * The daemon's figures.
 */

/* Poll STATUS on PATH.ctl until every session is in: its all_in_ms. */
static int wait_all_in(double *all_in_ms)
{
	struct proto_status *st = calloc(1, PROTO_MAX_MSG);
	uint64_t end = now_ns() + DONE_MS * 1000000ull;
	int ret = -ETIMEDOUT;

	while (st && now_ns() < end) {
		struct proto_hello h;
		struct proto_hdr req;
		int s = proto_connect(rm.ctl);
		bool done;

		proto_init(&req, MSG_STATUS, sizeof(req));
		done = s >= 0 && !proto_hello(s, 0, &h) &&
		       proto_call(s, &req, NULL, 0, st, PROTO_MAX_MSG) > 0 &&
		       st->nr_sessions && st->s[0].done;
		if (s >= 0)
			close(s);
		if (done) {
			*all_in_ms = (double)st->s[0].all_in_ms;
			ret = 0;
			break;
		}
		usleep(1000);
	}
	free(st);
	return ret;
}

/* The daemon's exit line (after its last VM): its "faults". */
static int daemon_faults(int out, double *faults)
{
	char line[1024];
	ssize_t n, len = 0;
	const char *p;

	while (len < (ssize_t)sizeof(line) - 1 &&
	       (n = read(out, line + len, sizeof(line) - 1 - (size_t)len)) > 0)
		len += n;
	line[len] = 0;
	p = strstr(line, "\"faults\":");
	if (!p)
		return -EIO;
	*faults = strtod(p + 9, NULL);
	return 0;
}

/* ------------------------------------------------------------------------
 * A round of one variant.
 */

/* faultd firecracker for variant @v; its pid, its stdout in *out. */
static pid_t daemon_for(unsigned int v, int *out)
{
	unsigned int k = v >= V_OD1 ? v - V_OD1 + V_OD : v;
	const char *args[8] = { "--no-keeper" };
	unsigned int n = 1;
	const char *why;
	pid_t pid;

	args[n++] = k == V_LOCAL ? "--mem-file" : "--mem";
	args[n++] = k == V_LOCAL ? rm.mem : rm.uri;
	if (k == V_PF)
		args[n++] = "--prefetch";
	if (k == V_REP) {
		args[n++] = "--working-set";
		args[n++] = rm.wset;
	}
	args[n] = NULL;
	pid = fc_faultd_start(rm.sock, rm.notify, args, out, rm.dlog, &why);
	if (pid < 0)
		fprintf(stderr, "remote: %s (see %s)\n", why, rm.dlog);
	return pid;
}

/* The guests of variant @v, and the daemon's figures. */
static int guests_variant(const struct bench_opts *o, unsigned int v,
			  struct sample *out)
{
	unsigned int k = v >= V_OD1 ? v - V_OD1 + V_OD : v;
	unsigned int nr = k == V_CLONES ? CLONES : 1;
	unsigned int threads = o->threads < MAX_GUEST_THREADS
				       ? o->threads : MAX_GUEST_THREADS;
	struct guest g[CLONES];
	int dout = -1, ret;
	pid_t d = daemon_for(v, &dout);

	if (d < 0)
		return -EIO;
	ret = guests_run(g, nr, threads);
	if (!ret)
		guests_times(g, nr, out);
	if (!ret && k == V_PF)
		ret = wait_all_in(&out->value[M_ALL_IN]);
	for (unsigned int i = 0; i < nr; i++)
		fc_guest_end(&g[i].fc);
	if (ret)
		kill(d, SIGKILL);
	if (!ret)
		ret = daemon_faults(dout, &out->value[M_FAULTS]);
	close(dout);
	if (fc_handler_wait(d) && !ret)
		ret = -EIO;
	out->value[M_GBPS] = k == V_PF
		? (double)rm.size / (out->value[M_ALL_IN] * 1e6)
		: (double)(rm.set_n * 4096) / (out->value[M_WS] * 1e6);
	return ret;
}

/* nbdcopy of the export to null:, timed. */
static int nbdcopy_variant(struct sample *out)
{
	uint64_t t0 = now_ns();
	pid_t pid = fork();
	int status;

	if (pid == 0) {
		int null = open("/dev/null", O_WRONLY);

		dup2(null, 1);
		execlp("nbdcopy", "nbdcopy", rm.uri, "null:", (char *)NULL);
		_exit(127);
	}
	if (pid < 0 || waitpid(pid, &status, 0) != pid)
		return -errno;
	if (!WIFEXITED(status) || WEXITSTATUS(status))
		return WIFEXITED(status) && WEXITSTATUS(status) == 127 ? -ENOENT
								       : -EIO;
	out->value[M_ALL_IN] = (double)(now_ns() - t0) / 1e6;
	out->value[M_GBPS] = (double)rm.size / (out->value[M_ALL_IN] * 1e6);
	return 0;
}

static void sample_clear(struct sample *out)
{
	for (unsigned int m = 0; m < BENCH_MAX_METRICS; m++)
		out->value[m] = NAN;
}

static int variant(const struct bench_opts *o, unsigned int v,
		   struct sample *out)
{
	unsigned int k = v >= V_OD1 ? v - V_OD1 + V_OD : v;
	struct server s = { 0 };
	int ret = 0;

	sample_clear(out);
	if (k != V_LOCAL)
		ret = nbdkit_serve(&s, v >= V_OD1);
	if (!ret)
		ret = k == V_COPY ? nbdcopy_variant(out)
				  : guests_variant(o, v, out);
	server_stop(&s, SIGTERM); /* then its stats are written */
	server_free(&s);
	if (!ret && k != V_LOCAL) {
		out->value[M_FETCHED] = stats_read_bytes(rm.stats);
		if (out->value[M_FETCHED] < 0)
			ret = -EIO;
	}
	return ret;
}

/* The set, recorded once by a guest over the export (no delay). */
static int record_set(const struct bench_opts *o)
{
	const char *args[] = { "--no-keeper", "--mem", rm.uri,
			       "--record-working-set", rm.wset, NULL };
	struct server s = { 0 };
	struct guest g[1];
	const char *why;
	int ret = nbdkit_serve(&s, 0);
	pid_t d = ret ? -1 : fc_faultd_start(rm.sock, rm.notify, args, NULL,
					     rm.dlog, &why);

	if (d < 0) {
		server_free(&s);
		return -EIO;
	}
	ret = guests_run(g, 1, o->threads < MAX_GUEST_THREADS
				      ? o->threads : MAX_GUEST_THREADS);
	fc_guest_end(&g[0].fc); /* the record is written as the VM ends */
	if (fc_handler_wait(d) && !ret)
		ret = -EIO;
	server_free(&s);
	return ret || access(rm.wset, R_OK) ? -EIO : 0;
}

static int setup(const struct bench_opts *o)
{
	uint64_t size = (uint64_t)o->size_mib << 20;
	int ret;

	if (rm.ready)
		return rm.size == size ? 0 : -EINVAL;
	if (access(NBDKIT, X_OK)) {
		rm.skipped = "no nbdkit";
		return -ENOENT;
	}
	strcpy(rm.dir, "/tmp/faultd-bench-remote-XXXXXX");
	if (!mkdtemp(rm.dir))
		return -errno;
	atexit(cleanup);
	snprintf(rm.mem, sizeof(rm.mem), "%s/mem", rm.dir);
	snprintf(rm.sock, sizeof(rm.sock), "%s/sock", rm.dir);
	snprintf(rm.ctl, sizeof(rm.ctl), "%s/sock.ctl", rm.dir);
	snprintf(rm.notify, sizeof(rm.notify), "%s/notify", rm.dir);
	snprintf(rm.wset, sizeof(rm.wset), "%s/wset", rm.dir);
	snprintf(rm.stats, sizeof(rm.stats), "%s/stats", rm.dir);
	snprintf(rm.dlog, sizeof(rm.dlog), "%s/faultd.log", rm.dir);
	snprintf(rm.uri, sizeof(rm.uri), "nbd://%s:%s/", NETNS_SERVER, PORT);
	rm.size = size;
	ret = fc_mem_file_write(rm.mem, size);
	if (!ret)
		ret = set_make(size / 4096);
	if (!ret)
		ret = record_set(o);
	rm.ready = !ret;
	return ret;
}

static int remote_run(const struct bench_opts *o, unsigned int v,
		      struct sample *out)
{
	int ret = ns_client();

	if (!ret)
		ret = setup(o);
	if (!ret)
		ret = variant(o, v, out);
	ns_home();
	if (ret && rm.skipped) {
		out->skipped = rm.skipped;
		return 0;
	}
	return ret;
}

const struct scenario scenario_remote = {
	.name = "remote",
	.desc = "a Firecracker restore from a memory file on another host "
		"(nbdkit across a veth pair, 0 and 1 ms added per read): on "
		"demand, prefetch, replay, 4 clones, against the local file "
		"and nbdcopy",
	.metrics = { "first_fault_ms", "ws_ms", "all_in_ms", "gb_per_s",
		     "faults", "bytes_fetched" },
	.nmetrics = 6,
	.variants = { "local-file", "nbd-on-demand", "nbd-prefetch",
		      "nbd-replay", "nbd-4-clones", "nbdcopy",
		      "nbd-on-demand-1ms", "nbd-prefetch-1ms",
		      "nbd-replay-1ms", "nbd-4-clones-1ms", "nbdcopy-1ms" },
	.nvariants = V_NR,
	.ratios = { { V_PF, V_COPY }, { V_PF1, V_COPY1 },
		    { V_OD1, V_REP1 }, { V_REP1, V_OD1 },
		    { V_CLONES, V_OD }, { V_CLONES1, V_OD1 },
		    { V_OD, V_LOCAL } },
	.nratios = 7,
	.default_threads = 2,
	.default_size_mib = 512,
	.run = remote_run,
};
