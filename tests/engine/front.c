// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * front.c - the engine suite's scripted front end (harness.h): hooks that
 * note what the engine told them, a peer the test writes to, a control
 * thread that runs session_run().
 */
#include <errno.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "harness.h"

/* Hooks run while the session runs, which it does with its front set. */
static struct front *front_of(struct session *s)
{
	return session_front(s);
}

/* The peer sent a byte, or hung up: 'q' or the end ends the session. */
static bool front_peer_input(struct session *s)
{
	struct front *f = front_of(s);
	char c;
	ssize_t n = read(s->peer_fd, &c, 1);

	atomic_fetch_add(&f->inputs, 1);
	if (n <= 0)
		return false;
	atomic_fetch_add(&f->bytes, 1);
	return c != 'q';
}

static void front_tick(struct session *s, bool all_in)
{
	struct front *f = front_of(s);

	atomic_fetch_add(&f->ticks, 1);
	if (all_in)
		atomic_fetch_add(&f->ticks_all_in, 1);
}

static bool front_space_gone(struct session *s, struct space *sp)
{
	atomic_fetch_add(&front_of(s)->gone, 1);
	return true;
}

static void front_ended(struct session *s)
{
	atomic_store(&front_of(s)->ended, true);
}

static size_t front_save(struct session *s, void *blob, size_t max)
{
	size_t n = sizeof(FRONT_BLOB);

	if (n > max)
		return 0;
	memcpy(blob, FRONT_BLOB, n);
	return n;
}

/* What adopt() last saw: 1 the blob save() wrote, -1 another. */
static atomic_int adopt_seen;

static int front_adopt(struct session *s, const void *blob, size_t len,
		       int peer)
{
	bool ok = len == sizeof(FRONT_BLOB) && !memcmp(blob, FRONT_BLOB, len);

	atomic_store(&adopt_seen, ok ? 1 : -1);
	session_set_name(s, "adopted %llu", (unsigned long long)session_id(s));
	if (peer >= 0)
		session_set_peer(s, peer, true);
	return ok ? 0 : -EBADMSG;
}

const struct session_ops front_ops = {
	.front_id = FRONT_ID,
	.peer_input = front_peer_input,
	.tick = front_tick,
	.space_gone = front_space_gone,
	.ended = front_ended,
	.save = front_save,
	.adopt = front_adopt,
};

int front_create_on(struct front *f, const struct session_opts *o,
		    int session_end, int test_end)
{
	int ret;

	memset(f, 0, sizeof(*f));
	f->peer = test_end;
	ret = session_create(o, &front_ops, f, &f->s);
	if (!ret)
		session_set_peer(f->s, session_end, true);
	return ret;
}

int front_create(struct front *f, const struct session_opts *o)
{
	int sv[2], ret;

	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0)
		return -errno;
	ret = front_create_on(f, o, sv[0], sv[1]);
	if (ret) {
		close(sv[0]);
		close(sv[1]);
	}
	return ret;
}

void front_adopted(struct front *f, struct session *s, int peer)
{
	memset(f, 0, sizeof(*f));
	f->s = s;
	f->peer = peer;
	atomic_store(&f->adopted, atomic_load(&adopt_seen) == 1);
	session_set_front(s, f, NULL);
}

static void *control_main(void *arg)
{
	struct front *f = arg;

	f->run_ret = session_run(f->s);
	return NULL;
}

int front_peer_send(struct front *f, char c)
{
	return write(f->peer, &c, 1) == 1 ? 0 : -errno;
}

bool front_wait_bytes(struct front *f, int n, unsigned int ms)
{
	uint64_t end = mono_ns() + ms * 1000000ull;

	while (atomic_load(&f->bytes) < n) {
		if (mono_ns() > end)
			return false;
		pause_ms();
	}
	return true;
}

/*
 * The control loop reads the peer once every thread of the session is
 * started: a byte it read says so. A test that holds one handler relies
 * on the next to read its event.
 */
int front_run(struct front *f)
{
	int n = atomic_load(&f->bytes) + 1;
	int ret = pthread_create(&f->control, NULL, control_main, f);

	if (ret)
		return -ret;
	f->running = true;
	ret = front_peer_send(f, 'r');
	if (!ret && !front_wait_bytes(f, n, DEADLINE_MS))
		ret = -ETIMEDOUT;
	return ret;
}

void front_stop(struct front *f)
{
	if (!f->running)
		return;
	session_stop(f->s);
	pthread_join(f->control, NULL);
	f->running = false;
}

void front_free(struct front *f)
{
	front_stop(f);
	session_free(f->s);
	f->s = NULL;
	if (f->peer > 0)
		close(f->peer);
	f->peer = -1;
}

bool front_wait_all_in(struct front *f, unsigned int ms)
{
	uint64_t end = mono_ns() + ms * 1000000ull;

	while (!atomic_load(&f->ticks_all_in)) {
		if (mono_ns() > end)
			return false;
		pause_ms();
	}
	return true;
}

