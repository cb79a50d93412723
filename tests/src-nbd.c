// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * src-nbd.c - suite "nbd": the network block device source's parts that
 * need no server: the URI parser, the allow list, the retry policy.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <string.h>

#include "nbd_allow.h"
#include "nbd_uri.h"
#include "retry.h"

static char why[256];

Test(nbd_uri, accepted_and_canonical)
{
	static const char *const ok[][2] = {
		{ "nbd://example.com", "nbd://example.com:10809/" },
		{ "nbd://Example.com:1234/exp", "nbd://Example.com:1234/exp" },
		{ "nbds://10.0.0.1/a%20b/c", "nbds://10.0.0.1:10809/a%20b/c" },
		{ "nbd://[fd00::1]:99/", "nbd://[fd00::1]:99/" },
		{ "nbd+unix:///?socket=/run/x.sock",
		  "nbd+unix:///?socket=/run/x.sock" },
		{ "nbds+unix://alice@/e?socket=/s&tls-psk-file=/k",
		  "nbds+unix://alice@/e?socket=/s" },
		{ "nbd+vsock://2:7000/", "nbd+vsock://2:7000/" },
		{ "nbd+vsock://2", "nbd+vsock://2:10809/" },
	};

	for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++) {
		struct nbd_uri u;
		int ret = nbd_uri_parse(ok[i][0], &u, why, sizeof(why));

		cr_expect_eq(ret, 0, "%s: %s", ok[i][0], why);
		if (!ret)
			cr_expect_str_eq(u.canon, ok[i][1]);
		nbd_uri_free(&u);
	}
}

Test(nbd_uri, refused_with_the_reason)
{
	static const char *const bad[][2] = {
		{ "http://x/", "not an NBD URI" },
		{ "nbd:/x", "not an NBD URI" },
		{ "nbd://", "a server must be" },
		{ "nbd://a b/", "a server must be" },
		{ "nbd://x:70000/", "a port" },
		{ "nbd://x:/", "a port" },
		{ "nbd://[::1/", "without ']'" },
		{ "nbd://h/%zz", "%-escape" },
		{ "nbd://h/a%00b", "%-escape" },
		{ "nbd://h/#frag", "fragment" },
		{ "nbd://h/?socket=/x", "nbd+unix URIs only" },
		{ "nbd+unix:///", "needs ?socket=" },
		{ "nbd+unix://host/?socket=/x", "not a host" },
		{ "nbd://h/?user=x", "unknown in the query" },
		{ "nbd+unix:///?socket=/a&socket=/b", "given twice" },
		{ "nbd+vsock://host/", "numeric CID" },
	};

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		struct nbd_uri u;
		int ret = nbd_uri_parse(bad[i][0], &u, why, sizeof(why));

		cr_expect_eq(ret, -EINVAL, "%s accepted", bad[i][0]);
		cr_expect(strstr(why, bad[i][1]), "%s: \"%s\" lacks \"%s\"",
			  bad[i][0], why, bad[i][1]);
		nbd_uri_free(&u);
	}
}

static const char allow_text[] =
	"# who may make faultd connect where\n"
	"\n"
	"1001   10.0.0.5:10809      # one server, one port\n"
	"1001   store.example       # any port\n"
	"*      [fd00::5]:10809\n"
	"1002   unix:/run/nbd/\n"
	"1003   unix:/run/one.sock\n"
	"1003   vsock:2\n";

Test(nbd_allow, decisions_with_their_reasons)
{
	static const struct {
		uid_t uid;
		const char *uri;
		int want;
		const char *words;
	} c[] = {
		{ 0, "nbd://anywhere:1/", 0, "root" },
		{ 0, "nbd+unix:///?socket=/x&tls-psk-file=/k", 0, "root" },
		{ 1001, "nbd://10.0.0.5/", 0, "test:3" },
		{ 1001, "nbd://10.0.0.5:10810/", -EPERM,
		  "user 1001 may not make faultd connect to 10.0.0.5:10810" },
		{ 1001, "nbds://STORE.example:77/x", 0, "test:4" },
		{ 1001, "nbd://10.0.0.6/", -EPERM, "no line" },
		{ 4242, "nbd://[fd00::5]/", 0, "test:5" },
		{ 4242, "nbd://[fd00::5]:1/", -EPERM, "[fd00::5]:1" },
		{ 1002, "nbd+unix:///?socket=/run/nbd/a.sock", 0, "test:6" },
		{ 1002, "nbd+unix:///?socket=/run/nbd/sub/a.sock", -EPERM,
		  "unix:/run/nbd/sub/a.sock" },
		{ 1002, "nbd+unix:///?socket=/run/nbd/../x", -EPERM,
		  "\"..\" parts" },
		{ 1002, "nbd+unix:///?socket=/run/nbd/", -EPERM,
		  "is not absolute" },
		{ 1003, "nbd+unix:///?socket=/run/one.sock", 0, "test:7" },
		{ 1003, "nbd+vsock://2:555/", 0, "test:8" },
		{ 1003, "nbd+unix:///?socket=/run/one.sock&tls-psk-file=/k",
		  -EPERM, "names a file of the daemon's host" },
		{ 1003, "nbd:/x", -EINVAL, "not an NBD URI" },
	};
	struct nbd_allow *a;

	cr_assert_eq(nbd_allow_parse(allow_text, "test", &a, why,
				     sizeof(why)), 0, "%s", why);
	for (size_t i = 0; i < sizeof(c) / sizeof(c[0]); i++) {
		int ret = nbd_allow_check(a, c[i].uid, c[i].uri, why,
					  sizeof(why));

		cr_expect_eq(ret, c[i].want, "%u %s: %d (%s)", c[i].uid,
			     c[i].uri, ret, why);
		cr_expect(strstr(why, c[i].words), "%u %s: \"%s\" lacks \"%s\"",
			  c[i].uid, c[i].uri, why, c[i].words);
	}
	nbd_allow_free(a);
	/* No list: root alone. */
	cr_expect_eq(nbd_allow_check(NULL, 1001, "nbd://10.0.0.5/", why,
				     sizeof(why)), -EPERM);
	cr_expect(strstr(why, "there is no allow list"));
	cr_expect_eq(nbd_allow_check(NULL, 0, "nbd://10.0.0.5/", why,
				     sizeof(why)), 0);
}

Test(nbd_allow, bad_lines_are_refused_with_their_number)
{
	static const char *const bad[][2] = {
		{ "alice\n", "x:1: not USER SERVER" },
		{ "\n1 a b c\n", "x:2: not USER SERVER" },
		{ "no-such-user-here 10.0.0.1\n", "x:1: no user" },
		{ "1 unix:relative\n", "x:1: not a server" },
		{ "1 unix:/a/../b\n", "not a server" },
		{ "1 10.0.0.1:99999\n", "not a server" },
		{ "1 h@st\n", "not a server" },
	};
	struct nbd_allow *a;

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		cr_expect_eq(nbd_allow_parse(bad[i][0], "x", &a, why,
					     sizeof(why)), -EINVAL, "%s",
			     bad[i][0]);
		cr_expect(strstr(why, bad[i][1]), "\"%s\" lacks \"%s\"", why,
			  bad[i][1]);
	}
	/* A list that is not there: empty, root alone. */
	cr_assert_eq(nbd_allow_load("/nonexistent/nbd.allow", &a, why,
				    sizeof(why)), 0);
	cr_expect_eq(nbd_allow_check(a, 1, "nbd://h/", why, sizeof(why)),
		     -EPERM);
	nbd_allow_free(a);
	cr_assert_eq(nbd_allow_parse("root *\n", "x", &a, why, sizeof(why)),
		     0);
	cr_expect_eq(nbd_allow_check(a, 0, "nbd://h/", why, sizeof(why)), 0);
	nbd_allow_free(a);
}

static void count_line(void *arg, const char *line)
{
	(*(int *)arg)++;
	cr_log_info("%s", line);
}

Test(nbd_retry, backoff_deadline_and_what_is_counted)
{
	struct retry_policy p = retry_policy_resolve(&(struct retry_policy){
		.backoff_min_ms = 10, .backoff_max_ms = 70, .deadline_ms = 500,
		.read_retries = 2 });
	struct retry_stats st = { 0 };
	struct retry_link l = { 0 };
	int lines = 0;
	struct retry_log log = { count_line, &lines, "test" };
	const uint64_t ms = 1000000;
	uint64_t until, when;
	uint32_t tries = 0;

	cr_expect_eq(retry_backoff_ns(&p, 0), 10 * ms);
	cr_expect_eq(retry_backoff_ns(&p, 1), 20 * ms);
	cr_expect_eq(retry_backoff_ns(&p, 2), 40 * ms);
	cr_expect_eq(retry_backoff_ns(&p, 3), 70 * ms);
	cr_expect_eq(retry_backoff_ns(&p, 30), 70 * ms);
	retry_link_down(&l, &st, &log, 1000 * ms, "refused");
	retry_link_down(&l, &st, &log, 1100 * ms, "again");
	cr_expect_eq(st.outages, 1);
	cr_expect_eq(retry_link_failed(&l, &p, 1000 * ms, &tries), 1010 * ms);
	cr_expect_eq(retry_link_failed(&l, &p, 1010 * ms, &tries), 1030 * ms);
	cr_expect(!retry_link_check(&l, &p, &st, &log, 1499 * ms, &until));
	cr_expect_eq(until, 1500 * ms);
	cr_expect(retry_link_check(&l, &p, &st, &log, 1500 * ms, &until));
	cr_expect(retry_link_check(&l, &p, &st, &log, 1600 * ms, &until));
	cr_expect_eq(st.expired, 1);
	retry_link_up(&l, &st, &log, 2000 * ms);
	cr_expect_eq(st.recovered, 1);
	cr_expect(!retry_link_check(&l, &p, &st, &log, 9000 * ms, &until));
	cr_expect_eq(until, UINT64_MAX);
	cr_expect(retry_read_failed(&p, &st, &log, 1, EIO, "x", 0, &when));
	cr_expect_eq(when, 10 * ms);
	cr_expect(retry_read_failed(&p, &st, &log, 2, EIO, "x", 0, &when));
	cr_expect_eq(when, 20 * ms);
	cr_expect(!retry_read_failed(&p, &st, &log, 3, EIO, "x", 0, &when));
	cr_expect_eq(st.retries, 2);
	cr_expect_eq(st.gave_up, 1);
	/* Down, expired, up, given up: four lines; retries are not logged. */
	cr_expect_eq(lines, 4);
	p = retry_policy_resolve(NULL);
	cr_expect(p.backoff_min_ms == RETRY_BACKOFF_MIN_MS &&
		  p.backoff_max_ms == RETRY_BACKOFF_MAX_MS &&
		  p.deadline_ms == RETRY_DEADLINE_MS &&
		  p.read_retries == RETRY_READ_RETRIES);
}
