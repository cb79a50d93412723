// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * clear.c - range clears: zero memory the way the kernel now clears huge
 * folios ("folio_zero_user: clear page ranges"), as whole ranges rather
 * than one 4 KiB page at a time, with the instruction that is fastest on
 * this CPU for the range's cache state.
 *
 * Strategies: memset (the portable floor), rep stosb (fast with ERMS/FSRM),
 * non-temporal stores (SSE2, AVX2 or AVX-512, the widest the CPU has) and
 * CLZERO (AMD). Which is best depends on whether the range is in the cache:
 * temporal stores win on hot data, non-temporal ones on cold data. So the
 * choice is measured, once per process (calibrate()): the best temporal
 * strategy on a hot buffer, the best of all on a flushed (cold) buffer, and
 * the load latency that tells a cached line from one in memory. Each large
 * clear then probes a few lines of its range and uses the cold strategy only
 * when they are not cached. FAULTD_CLEAR=<name> or faultd_clear_set() forces
 * one strategy; faultd_clear_info() says what was chosen and why.
 */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "internal.h"

#if defined(__x86_64__)
#include <cpuid.h>
#include <immintrin.h>
#include <x86intrin.h>
#define HAVE_X86 1
#endif

#define LINE 64
#define CAL_BUF (2ul << 20)	/* one huge page: in cache, then flushed */
#define PROBE_MIN (256ul << 10)	/* smaller ranges are cleared hot */
#define PROBES 4

static const char *const names[] = {
	[FAULTD_CLEAR_AUTO] = "auto",
	[FAULTD_CLEAR_MEMSET] = "memset",
	[FAULTD_CLEAR_REP_STOSB] = "rep-stosb",
	[FAULTD_CLEAR_NT] = "nt-store",
	[FAULTD_CLEAR_CLZERO] = "clzero",
};

typedef void (*clear_fn)(void *dst, size_t len);

static struct {
	pthread_once_t once;
	int forced;		/* FAULTD_CLEAR_* or AUTO */
	int hot, cold;		/* measured choices */
	size_t probe_min;	/* ranges below this are cleared hot */
	uint64_t cold_cycles;	/* probe: a load slower than this missed */
	bool have[FAULTD_CLEAR_CLZERO + 1];
	const char *nt_isa;
	double gbps_hot[FAULTD_CLEAR_CLZERO + 1];
	double gbps_cold[FAULTD_CLEAR_CLZERO + 1];
} cl = { .once = PTHREAD_ONCE_INIT };

/* ------------------------------------------------------------------------
 * The strategies. Each clears exactly [dst, dst + len).
 */

static void clear_memset(void *dst, size_t len)
{
	memset(dst, 0, len);
}

/* The reference: one 4 KiB page at a time, as the kernel did before. */
void clear_per_4k(void *dst, size_t len)
{
	char *p = dst;

	for (size_t off = 0; off < len; off += 4096)
		memset(p + off, 0, len - off < 4096 ? len - off : 4096);
}

#ifdef HAVE_X86
static void clear_rep_stosb(void *dst, size_t len)
{
	__asm__ volatile("rep stosb"
			 : "+D"(dst), "+c"(len)
			 : "a"(0)
			 : "memory");
}

/* Unaligned head and tail with rep stosb, whole lines in between by @body. */
static void clear_lines(void *dst, size_t len, void (*body)(char *, size_t))
{
	char *p = dst;
	size_t head = (size_t)(-(uintptr_t)p & (LINE - 1));

	if (len < head + LINE) {
		clear_rep_stosb(p, len);
		return;
	}
	clear_rep_stosb(p, head);
	p += head;
	len -= head;
	body(p, len & ~(size_t)(LINE - 1));
	clear_rep_stosb(p + (len & ~(size_t)(LINE - 1)), len & (LINE - 1));
	_mm_sfence(); /* non-temporal stores are weakly ordered */
}

__attribute__((target("sse2"))) static void nt_sse2(char *p, size_t len)
{
	const __m128i z = _mm_setzero_si128();

	for (size_t i = 0; i < len; i += LINE) {
		_mm_stream_si128((__m128i *)(p + i), z);
		_mm_stream_si128((__m128i *)(p + i + 16), z);
		_mm_stream_si128((__m128i *)(p + i + 32), z);
		_mm_stream_si128((__m128i *)(p + i + 48), z);
	}
}

__attribute__((target("avx2"))) static void nt_avx2(char *p, size_t len)
{
	const __m256i z = _mm256_setzero_si256();

	for (size_t i = 0; i < len; i += LINE) {
		_mm256_stream_si256((__m256i *)(p + i), z);
		_mm256_stream_si256((__m256i *)(p + i + 32), z);
	}
}

__attribute__((target("avx512f"))) static void nt_avx512(char *p, size_t len)
{
	const __m512i z = _mm512_setzero_si512();

	for (size_t i = 0; i < len; i += LINE)
		_mm512_stream_si512((__m512i *)(p + i), z);
}

static void (*nt_body)(char *, size_t) = nt_sse2;

static void clear_nt(void *dst, size_t len)
{
	clear_lines(dst, len, nt_body);
}

/* CLZERO zeroes the cache line holding the address in rAX. */
static void clzero_body(char *p, size_t len)
{
	for (size_t i = 0; i < len; i += LINE)
		__asm__ volatile(".byte 0x0f, 0x01, 0xfc" /* clzero */
				 : : "a"(p + i) : "memory");
}

static void clear_clzero(void *dst, size_t len)
{
	clear_lines(dst, len, clzero_body);
}

static uint64_t load_cycles(const volatile char *p)
{
	uint64_t t0, t1;

	_mm_lfence();
	t0 = __rdtsc();
	_mm_lfence();
	(void)*p;
	_mm_lfence();
	t1 = __rdtsc();
	return t1 - t0;
}

static void flush_range(const char *p, size_t len)
{
	for (size_t i = 0; i < len; i += LINE)
		_mm_clflush(p + i);
	_mm_mfence();
}
#else
#define clear_rep_stosb clear_memset
#define clear_nt clear_memset
#define clear_clzero clear_memset
#endif

static const clear_fn fns[] = {
	[FAULTD_CLEAR_AUTO] = clear_memset,
	[FAULTD_CLEAR_MEMSET] = clear_memset,
	[FAULTD_CLEAR_REP_STOSB] = clear_rep_stosb,
	[FAULTD_CLEAR_NT] = clear_nt,
	[FAULTD_CLEAR_CLZERO] = clear_clzero,
};

/* ------------------------------------------------------------------------
 * Calibration: measured once per process.
 */

static void detect_cpu(void)
{
	cl.have[FAULTD_CLEAR_MEMSET] = true;
#ifdef HAVE_X86
	unsigned int a, b, c, d;

	cl.have[FAULTD_CLEAR_REP_STOSB] = true;
	cl.have[FAULTD_CLEAR_NT] = true;
	cl.nt_isa = "sse2";
	if (__builtin_cpu_supports("avx2")) {
		nt_body = nt_avx2;
		cl.nt_isa = "avx2";
	}
	if (__builtin_cpu_supports("avx512f")) {
		nt_body = nt_avx512;
		cl.nt_isa = "avx512f";
	}
	if (__get_cpuid(0x80000008, &a, &b, &c, &d) && (b & 1))
		cl.have[FAULTD_CLEAR_CLZERO] = true;
#endif
}

static double best_gbps(int s, char *buf, size_t len, bool cold)
{
	double best = 0;

	for (int i = 0; i < 3; i++) {
		uint64_t t0, ns;

#ifdef HAVE_X86
		if (cold)
			flush_range(buf, len);
#endif
		t0 = now_ns();
		fns[s](buf, len);
		ns = now_ns() - t0;
		if (ns && (double)len / (double)ns > best)
			best = (double)len / (double)ns;
	}
	return best;
}

#ifdef HAVE_X86
/* The load latency between a cached line and one in memory, in cycles. */
static void calibrate_probe(char *buf)
{
	uint64_t hot = UINT64_MAX, cold = UINT64_MAX;

	for (int i = 0; i < 16; i++) {
		uint64_t h, c;

		buf[i * LINE] = 1;
		h = load_cycles(buf + i * LINE);
		_mm_clflush(buf + i * LINE);
		_mm_mfence();
		c = load_cycles(buf + i * LINE);
		hot = h < hot ? h : hot;
		cold = c < cold ? c : cold;
	}
	/* No clear difference (an odd VM): fall back to the size rule. */
	cl.cold_cycles = cold > 2 * hot ? (hot + cold) / 2 : 0;
}
#endif

static void calibrate(void)
{
	char *buf;

	detect_cpu();
	cl.hot = cl.cold = FAULTD_CLEAR_MEMSET;
	cl.probe_min = PROBE_MIN;
	buf = mmap(NULL, CAL_BUF, PROT_READ | PROT_WRITE,
		   MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
	if (buf == MAP_FAILED)
		return;
	for (int s = FAULTD_CLEAR_MEMSET; s <= FAULTD_CLEAR_CLZERO; s++) {
		if (!cl.have[s])
			continue;
		cl.gbps_hot[s] = best_gbps(s, buf, CAL_BUF, false);
		cl.gbps_cold[s] = best_gbps(s, buf, CAL_BUF, true);
		/* Only temporal stores can win on hot data. */
		if (s <= FAULTD_CLEAR_REP_STOSB &&
		    cl.gbps_hot[s] > cl.gbps_hot[cl.hot])
			cl.hot = s;
		if (cl.gbps_cold[s] > cl.gbps_cold[cl.cold])
			cl.cold = s;
	}
#ifdef HAVE_X86
	calibrate_probe(buf);
#endif
	munmap(buf, CAL_BUF);
}

static int strategy_from_env(void)
{
	const char *e = getenv("FAULTD_CLEAR");

	for (int s = FAULTD_CLEAR_MEMSET; e && s <= FAULTD_CLEAR_CLZERO; s++)
		if (!strcmp(e, names[s]) && cl.have[s])
			return s;
	return FAULTD_CLEAR_AUTO;
}

static void clear_init(void)
{
	calibrate();
	cl.forced = strategy_from_env();
}

/*
 * clear_setup() - do the one-time set-up of faultd_clear() (calibration,
 * FAULTD_CLEAR) now, in an ordinary context: it maps memory and reads
 * the environment, which a SIGBUS handler must not. After it, a
 * faultd_clear() call is async-signal-safe.
 */
void clear_setup(void)
{
	pthread_once(&cl.once, clear_init);
}

/* ------------------------------------------------------------------------
 * The clear.
 */

/* Are most of a few lines spread over the range out of the cache? */
static bool range_is_cold(const char *p, size_t len)
{
#ifdef HAVE_X86
	unsigned int slow = 0;

	if (!cl.cold_cycles)
		return true;
	for (unsigned int i = 0; i < PROBES; i++)
		slow += load_cycles(p + (len / PROBES) * i + LINE * i) >
			cl.cold_cycles;
	return slow > PROBES / 2;
#else
	return true;
#endif
}

void clear_with(int strategy, void *dst, size_t len)
{
	pthread_once(&cl.once, clear_init);
	if (strategy < FAULTD_CLEAR_MEMSET || strategy > FAULTD_CLEAR_CLZERO ||
	    !cl.have[strategy])
		strategy = FAULTD_CLEAR_MEMSET;
	fns[strategy](dst, len);
}

FAULTD_EXPORT void faultd_clear(void *dst, size_t len)
{
	int s;

	pthread_once(&cl.once, clear_init);
	s = __atomic_load_n(&cl.forced, __ATOMIC_RELAXED);
	if (s == FAULTD_CLEAR_AUTO) {
		s = cl.hot;
		if (len >= cl.probe_min && range_is_cold(dst, len))
			s = cl.cold;
	}
	fns[s](dst, len);
}

FAULTD_EXPORT int faultd_clear_set(int strategy)
{
	pthread_once(&cl.once, clear_init);
	if (strategy < FAULTD_CLEAR_AUTO || strategy > FAULTD_CLEAR_CLZERO)
		return -EINVAL;
	if (strategy != FAULTD_CLEAR_AUTO && !cl.have[strategy])
		return -ENOTSUP;
	__atomic_store_n(&cl.forced, strategy, __ATOMIC_RELAXED);
	return 0;
}

FAULTD_EXPORT const char *faultd_clear_name(int strategy)
{
	if (strategy < FAULTD_CLEAR_AUTO || strategy > FAULTD_CLEAR_CLZERO)
		return NULL;
	return names[strategy];
}

FAULTD_EXPORT int faultd_clear_info(struct faultd_clear_info *info)
{
	struct faultd_clear_info full = { .size = sizeof(full) };
	size_t n;

	if (!info || info->size < offsetof(struct faultd_clear_info, cold) +
					  sizeof(int))
		return -EINVAL;
	pthread_once(&cl.once, clear_init);
	full.forced = cl.forced;
	full.hot = cl.hot;
	full.cold = cl.cold;
	full.probe_min = cl.probe_min;
	full.probe_cycles = cl.cold_cycles;
	full.nt_isa = cl.nt_isa;
	for (int s = 0; s <= FAULTD_CLEAR_CLZERO; s++) {
		full.available |= cl.have[s] ? 1u << s : 0;
		full.hot_gbps[s] = cl.gbps_hot[s];
		full.cold_gbps[s] = cl.gbps_cold[s];
	}
	n = info->size < sizeof(full) ? info->size : sizeof(full);
	memcpy(info, &full, n);
	info->size = n;
	return 0;
}
