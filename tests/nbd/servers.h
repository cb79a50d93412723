/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * servers.h - real servers for the NBD source's tests and bench: nbdkit
 * (Debian's, with its plugins and filters) and nginx, started as children
 * in the foreground, in the server's namespace of netns.h or in the
 * test's own, each dying with the test process (PR_SET_PDEATHSIG); and
 * what they tell: nbdkit's log filter (every request, in the order it
 * came), its stats filter (written when it exits), its pause filter's
 * control socket.
 *
 * A server is ready when its pid file exists: nbdkit and nginx write it
 * once they listen. Waiting for it is waiting for a condition (with a
 * deadline and the child's death checked), not a sleep.
 */
#ifndef FAULTD_TEST_NBD_SERVERS_H
#define FAULTD_TEST_NBD_SERVERS_H

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "netns.h"

#define NBDKIT "/usr/bin/nbdkit"
#define NGINX "/usr/sbin/nginx"
#define SERVER_ARGS 48

struct server {
	pid_t pid;			/* 0: not running */
	const struct netns *ns;		/* NULL: the test's namespace */
	char *argv[SERVER_ARGS];	/* as started; kept for a restart */
	char pidfile[256], errfile[256];
};

/* The child: its namespace, its output, no proxy, exec. */
static inline void server_child(struct server *s, pid_t parent)
{
	int fd = open(s->errfile, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC,
		      0600);

	netns_die_with_parent(parent);
	if (netns_enter(s->ns) || fd < 0)
		_exit(126);
	dup2(fd, 1);
	dup2(fd, 2);
	/* A proxy is no place to go: only the servers here are. */
	unsetenv("http_proxy");
	unsetenv("https_proxy");
	unsetenv("HTTP_PROXY");
	unsetenv("HTTPS_PROXY");
	unsetenv("ALL_PROXY");
	unsetenv("all_proxy");
	execv(s->argv[0], s->argv);
	_exit(127);
}

/* Wait for the pid file (up to 30 s), or the child's death. */
static inline int server_wait_ready(struct server *s, char *err, size_t len)
{
	struct timespec ts = { 0, 5 * 1000 * 1000 };
	int st;

	for (int i = 0; i < 6000; i++) {
		if (!access(s->pidfile, F_OK))
			return 0;
		if (waitpid(s->pid, &st, WNOHANG) == s->pid) {
			s->pid = 0;
			return netns_fail(err, len, "%s exited (status %#x); "
					  "see %s", s->argv[0], st, s->errfile);
		}
		nanosleep(&ts, NULL);
	}
	return netns_fail(err, len, "%s not ready after 30 s", s->argv[0]);
}

/* (Re)start the server with its argv; 0 or -1 with @err. */
static inline int server_run(struct server *s, char *err, size_t len)
{
	pid_t parent = getpid();

	unlink(s->pidfile);
	s->pid = fork();
	if (s->pid < 0)
		return netns_fail(err, len, "fork: %s", strerror(errno));
	if (s->pid == 0)
		server_child(s, parent);
	return server_wait_ready(s, err, len);
}

/*
 * nbdkit_start() - nbdkit in the foreground with @args (NULL-ended:
 * listening options, filters, plugin, parameters), its files under @dir
 * with @name. Returns 0, or -1 with the reason in @err.
 */
static inline int nbdkit_start(struct server *s, const struct netns *ns,
			       const char *dir, const char *name,
			       const char *const *args, char *err, size_t len)
{
	size_t n = 0;

	memset(s, 0, sizeof(*s));
	s->ns = ns;
	snprintf(s->pidfile, sizeof(s->pidfile), "%s/%s.pid", dir, name);
	snprintf(s->errfile, sizeof(s->errfile), "%s/%s.err", dir, name);
	s->argv[n++] = strdup(NBDKIT);
	s->argv[n++] = strdup("-f");
	s->argv[n++] = strdup("-P");
	s->argv[n++] = strdup(s->pidfile);
	for (size_t i = 0; args[i] && n < SERVER_ARGS - 1; i++)
		s->argv[n++] = strdup(args[i]);
	return server_run(s, err, len);
}

/*
 * Stop it with @sig and reap it (SIGTERM: nbdkit writes its stats). A
 * server that outlives SIGTERM by 10 s (nbdkit waits for the requests
 * its pause filter holds) gets SIGKILL.
 */
static inline void server_stop(struct server *s, int sig)
{
	struct timespec ts = { 0, 5 * 1000 * 1000 };

	if (s->pid <= 0)
		return;
	kill(s->pid, sig);
	for (int i = 0; i < 2000; i++) {
		if (waitpid(s->pid, NULL, WNOHANG) == s->pid) {
			s->pid = 0;
			return;
		}
		nanosleep(&ts, NULL);
	}
	kill(s->pid, SIGKILL);
	waitpid(s->pid, NULL, 0);
	s->pid = 0;
}

static inline void server_free(struct server *s)
{
	server_stop(s, SIGTERM);
	for (size_t i = 0; i < SERVER_ARGS && s->argv[i]; i++)
		free(s->argv[i]);
	memset(s, 0, sizeof(*s));
}

/*
 * nginx_start() - nginx serving the files of @root on 127.0.0.1:@port,
 * one process, its configuration and logs under @dir.
 */
static inline int nginx_start(struct server *s, const struct netns *ns,
			      const char *dir, const char *root, int port,
			      char *err, size_t len)
{
	char conf[300];
	FILE *f;

	snprintf(conf, sizeof(conf), "%s/nginx.conf", dir);
	f = fopen(conf, "w");
	if (!f)
		return netns_fail(err, len, "%s: %s", conf, strerror(errno));
	fprintf(f, "daemon off;\nmaster_process off;\npid %s/nginx.pid;\n"
		"error_log %s/nginx-error.log;\nevents {}\nhttp {\n"
		"  access_log %s/access.log;\n"
		"  client_body_temp_path %s/body;\n"
		"  proxy_temp_path %s/proxy;\n  fastcgi_temp_path %s/fcgi;\n"
		"  uwsgi_temp_path %s/uwsgi;\n  scgi_temp_path %s/scgi;\n"
		"  server { listen 127.0.0.1:%d; root %s; }\n}\n",
		dir, dir, dir, dir, dir, dir, dir, dir, port, root);
	fclose(f);
	memset(s, 0, sizeof(*s));
	s->ns = ns;
	snprintf(s->pidfile, sizeof(s->pidfile), "%s/nginx.pid", dir);
	snprintf(s->errfile, sizeof(s->errfile), "%s/nginx.err", dir);
	s->argv[0] = strdup(NGINX);
	s->argv[1] = strdup("-c");
	s->argv[2] = strdup(conf);
	s->argv[3] = strdup("-p");
	s->argv[4] = strdup(dir);
	return server_run(s, err, len);
}

/* One request of nbdkit's log filter. */
struct nbd_req {
	unsigned int conn;
	uint64_t off, count;
};

/*
 * The reads the log filter at @path recorded, in the order they came, in
 * *out (to free()). Returns their number, or -1 when the file cannot be
 * read.
 */
static inline long log_reads(const char *path, struct nbd_req **out)
{
	FILE *f = fopen(path, "r");
	struct nbd_req *r = NULL;
	size_t n = 0, cap = 0;
	char line[1024];

	*out = NULL;
	if (!f)
		return -1;
	while (fgets(line, sizeof(line), f)) {
		const char *c = strstr(line, "connection="), *rd =
			strstr(line, " Read id=");
		unsigned long long off, cnt;
		unsigned int conn;

		if (!c || !rd || !strstr(rd, "offset=") ||
		    sscanf(c, "connection=%u", &conn) != 1 ||
		    sscanf(strstr(rd, "offset="), "offset=%llx count=%llx",
			   &off, &cnt) != 2)
			continue;
		if (n == cap) {
			cap = cap ? 2 * cap : 256;
			r = realloc(r, cap * sizeof(*r));
			if (!r)
				break;
		}
		r[n++] = (struct nbd_req){ conn, off, cnt };
	}
	fclose(f);
	*out = r;
	return r ? (long)n : 0;
}

/* The reads that the log at @path shows begun and not yet returned. */
static inline long log_reads_open(const char *path)
{
	FILE *f = fopen(path, "r");
	char line[1024];
	long open = 0;

	if (!f)
		return -1;
	while (fgets(line, sizeof(line), f)) {
		if (strstr(line, " ...Read id="))
			open--;
		else if (strstr(line, " Read id="))
			open++;
	}
	fclose(f);
	return open;
}

/* The "read: N ops" of the stats filter's file; -1 when there is none. */
static inline long stats_read_ops(const char *path)
{
	FILE *f = fopen(path, "r");
	char line[512];
	long ops = -1;

	if (!f)
		return -1;
	while (fgets(line, sizeof(line), f))
		if (sscanf(line, "read: %ld ops", &ops) == 1)
			break;
	fclose(f);
	return ops;
}

/*
 * The bytes of the "read:" line of the stats filter's file (it writes
 * them in MiB, GiB... with two decimals: within 0.5 % from 1 MiB up); -1
 * when there is none.
 */
static inline double stats_read_bytes(const char *path)
{
	static const char units[] = "BKMGTP";
	FILE *f = fopen(path, "r");
	double v = -1, x;
	char line[512], unit[8];
	long ops;

	if (!f)
		return -1;
	while (fgets(line, sizeof(line), f))
		if (sscanf(line, "read: %ld ops, %*f s, %lf %7s", &ops, &x,
			   unit) == 3) {
			const char *u = strchr(units, unit[0]);

			v = u ? x * (double)(1ull << (10 * (u - units))) : -1;
			break;
		}
	fclose(f);
	return v;
}

/*
 * Send @cmd ('p' pause, 'r' resume) to the pause filter's control socket
 * and wait for its answer (the command in upper case: after a pause, the
 * requests under way have finished). 0 or -1.
 */
static inline int pause_ctl(const char *sock, char cmd)
{
	struct sockaddr_un a = { .sun_family = AF_UNIX };
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	char ans = 0;
	int ret = -1;

	snprintf(a.sun_path, sizeof(a.sun_path), "%s", sock);
	if (fd >= 0 && !connect(fd, (struct sockaddr *)&a, sizeof(a)) &&
	    write(fd, &cmd, 1) == 1 && read(fd, &ans, 1) == 1 &&
	    ans == cmd - 'a' + 'A')
		ret = 0;
	if (fd >= 0)
		close(fd);
	return ret;
}

#endif /* FAULTD_TEST_NBD_SERVERS_H */
