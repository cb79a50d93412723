// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * pure-evict.c - suite "pure": the evictor's CLOCK (clock_scan() in
 * evict.c) on a region made by hand, without userfaultfd or an evictor
 * thread: which pages it takes as victims and in what order, which get a
 * second chance, where the hand stops and when it may start a new round.
 *
 * The region's pages are plain anonymous memory, each with a mark: a page
 * given a second chance has its mapping zapped, so its mark reads 0; a
 * victim is only taken (BUSY), never touched.
 *
 * clock_scan() and struct evict are static, so evict.c is part of this
 * program: its other functions are the ones the library links with, here
 * compiled once more (the archive's copy is not linked: every symbol of it
 * is defined already).
 */
#include <criterion/criterion.h>
#include <sys/mman.h>

#include "helpers.h"
#include "../libfaultd/evict.c"

#define NR 8 /* pages */
_Static_assert(PAGE_NONE == 0 && PAGE_BUSY == 1 && PAGE_READY == 2 &&
		       PAGE_STALE == 3,
	       "clock_init() spells the states NBRS");
#define MARK ((char)0x5a)

struct clock {
	struct faultd_region r;
	struct page_cache b;
	struct page_state states[NR];
	char *mem;
};

/*
 * A region of NR pages with a budget of NR pages, budget_low NR - 2 (so a
 * new round needs two pages mapped since the last), the states in @states
 * (R ready, S stale, N none, B busy) and the used bits in @used ('1').
 */
static void clock_init(struct clock *k, const char *states, const char *used)
{
	struct faultd_region_opts o = { .size = sizeof(o),
					.budget = NR * PAGE,
					.budget_low = (NR - 2) * PAGE };

	memset(k, 0, sizeof(*k));
	k->mem = mmap(NULL, NR * PAGE, PROT_READ | PROT_WRITE,
		      MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	cr_assert_neq(k->mem, MAP_FAILED);
	k->r.base = (uintptr_t)k->mem;
	k->r.page_size = PAGE;
	k->r.max_len = NR * PAGE;
	atomic_store(&k->r.len, NR * PAGE);
	k->b.page_size = PAGE;
	k->b.states = k->states;
	k->b.nr_states = NR;
	k->r.cache = &k->b;
	cr_assert_eq(evict_setup(&k->r, &o), 0);
	cr_assert_eq(k->r.ev->high - k->r.ev->low, 2);
	for (size_t i = 0; i < NR; i++) {
		static const char code[] = "NBRS"; /* PAGE_NONE.. PAGE_STALE */

		k->states[i].state = (int32_t)(strchr(code, states[i]) - code);
		if (used[i] == '1')
			evict_mapped(&k->r, i * PAGE, PAGE);
		k->mem[i * PAGE] = MARK;
	}
}

static void clock_fini(struct clock *k)
{
	evict_free(&k->r);
	munmap(k->mem, NR * PAGE);
}

/* The states as clock_init() spells them. */
static void expect_states(struct clock *k, const char *want)
{
	char got[NR + 1] = { 0 };

	for (size_t i = 0; i < NR; i++)
		got[i] = "NBRS"[k->states[i].state];
	cr_expect_str_eq(got, want, "states");
}

static bool ev_used(struct clock *k, size_t pg)
{
	return atomic_load(&k->r.ev->ref[pg / 64]) >> (pg % 64) & 1;
}

/* The used bits ('1'). */
static void expect_used(struct clock *k, const char *want)
{
	char got[NR + 1] = { 0 };

	for (size_t i = 0; i < NR; i++)
		got[i] = ev_used(k, i) ? '1' : '0';
	cr_expect_str_eq(got, want, "used bits");
}

/* The zapped pages ('z': their mark is gone). */
static void expect_zapped(struct clock *k, const char *want)
{
	char got[NR + 1] = { 0 };

	for (size_t i = 0; i < NR; i++)
		got[i] = k->mem[i * PAGE] == MARK ? '.' : 'z';
	cr_expect_str_eq(got, want, "zapped pages");
}

static size_t scan(struct clock *k, struct clock_pass *c, const size_t *want,
		   size_t nwant)
{
	size_t n = clock_scan(&k->r, k->r.ev, NR, c);

	cr_expect_eq(n, nwant, "%zu victims, want %zu", n, nwant);
	for (size_t i = 0; i < n && i < nwant; i++)
		cr_expect_eq(k->r.ev->victims[i], want[i] * PAGE,
			     "victim %zu: offset %#llx, want page %zu", i,
			     (unsigned long long)k->r.ev->victims[i], want[i]);
	return n;
}

Test(clock, no_new_round_before_the_application_maps_again)
{
	struct clock k;
	struct clock_pass c = { .steps = NR, .max = NR };

	/* The last round started at the last map: none since. */
	clock_init(&k, "RRRRRRRR", "00000000");
	k.r.ev->wrap_maps = atomic_load(&k.r.ev->maps);
	scan(&k, &c, NULL, 0);
	cr_expect_eq(c.steps, 0, "the pass ends at the wrap");
	cr_expect_eq(k.r.ev->hand, 0);
	expect_states(&k, "RRRRRRRR");
	/* One page mapped is not enough (budget - budget_low = 2)... */
	evict_mapped(&k.r, 0, PAGE);
	c.steps = NR;
	scan(&k, &c, NULL, 0);
	/* ... two are: the round starts and is counted from here. */
	evict_mapped(&k.r, PAGE, PAGE);
	c.steps = NR;
	c.max = 1;
	scan(&k, &c, (size_t[]){ 2 }, 1);
	cr_expect_eq(k.r.ev->wrap_maps, atomic_load(&k.r.ev->maps));
	expect_used(&k, "00000000");
	expect_zapped(&k, "zz......");
	clock_fini(&k);
}

Test(clock, force_starts_a_round_at_once)
{
	struct clock k;
	struct clock_pass c = { .steps = NR, .max = 2, .force = true };

	clock_init(&k, "RRRRRRRR", "00000000");
	k.r.ev->wrap_maps = atomic_load(&k.r.ev->maps);
	scan(&k, &c, (size_t[]){ 0, 1 }, 2);
	cr_expect_eq(k.r.ev->hand, 2);
	cr_expect_eq(c.steps, NR - 2);
	expect_states(&k, "BBRRRRRR");
	clock_fini(&k);
}

Test(clock, victims_are_the_unused_pages_in_the_page_cache_in_order)
{
	struct clock k;
	struct clock_pass c = { .steps = NR, .max = 3, .force = true };

	/* Pages not in the page cache, or held, are passed over. */
	clock_init(&k, "RNRBSRRR", "00000000");
	scan(&k, &c, (size_t[]){ 0, 2, 4 }, 3);
	cr_expect_eq(k.r.ev->hand, 5);
	cr_expect_eq(c.steps, NR - 5);
	expect_states(&k, "BNBBBRRR");
	expect_zapped(&k, "........");
	/* The next scan goes on from the hand, and ends with the steps. */
	c.max = NR;
	scan(&k, &c, (size_t[]){ 5, 6, 7 }, 3);
	cr_expect_eq(c.steps, 0);
	cr_expect_eq(k.r.ev->hand, 0);
	expect_states(&k, "BNBBBBBB");
	clock_fini(&k);
}

Test(clock, used_pages_get_a_second_chance)
{
	struct clock k;
	struct clock_pass c = { .steps = NR, .max = 3, .force = true };

	clock_init(&k, "RRRRRRRR", "01100100");
	scan(&k, &c, (size_t[]){ 0, 3, 4 }, 3);
	cr_expect_eq(k.r.ev->hand, 5);
	/* Their bits are cleared and their mappings zapped, so that the
	 * next access faults and marks them used again; page 5 is ahead of
	 * the hand and keeps its bit. */
	expect_used(&k, "00000100");
	expect_zapped(&k, ".zz.....");
	expect_states(&k, "BRRBBRRR");
	/* Round two: page 5 has its chance, and 1 and 2 are taken. */
	c.steps = NR;
	c.max = NR;
	scan(&k, &c, (size_t[]){ 6, 7, 1, 2 }, 4);
	expect_used(&k, "00000000");
	expect_zapped(&k, ".zz..z..");
	expect_states(&k, "BBBBBRBB");
	clock_fini(&k);
}

Test(clock, a_page_used_again_keeps_its_place)
{
	struct clock k;
	struct clock_pass c = { .steps = NR, .max = NR, .force = true };

	/* Every page used: a round gives each its chance and takes none. */
	clock_init(&k, "RRRRRRRR", "11111111");
	scan(&k, &c, NULL, 0);
	cr_expect_eq(k.r.ev->hand, 0);
	expect_zapped(&k, "zzzzzzzz");
	/* 3 and 6 were accessed again (a minor fault maps them). */
	evict_mapped(&k.r, 3 * PAGE, PAGE);
	evict_mapped(&k.r, 6 * PAGE, PAGE);
	c.steps = NR;
	scan(&k, &c, (size_t[]){ 0, 1, 2, 4, 5, 7 }, 6);
	expect_states(&k, "BBBRBBRB");
	expect_used(&k, "00000000");
	clock_fini(&k);
}

Test(clock, with_few_steps_left_use_is_ignored)
{
	struct clock k;
	/* evict_run() for a thread that needs room: 3 rounds, the last
	 * blind. Here 1.5 rounds, the last 8 steps blind. */
	struct clock_pass c = { .steps = 12, .blind = NR, .max = NR,
				.force = true };

	clock_init(&k, "RRRRRRRR", "11111111");
	scan(&k, &c, (size_t[]){ 4, 5, 6, 7, 0, 1, 2, 3 }, NR);
	cr_expect_eq(c.steps, 0);
	cr_expect_eq(k.r.ev->hand, 4);
	/* Pages 0..3 got their chance before the blind steps began (their
	 * mappings are zapped); 4..7 were taken with their bits cleared. */
	expect_zapped(&k, "zzzz....");
	expect_used(&k, "00000000");
	expect_states(&k, "BBBBBBBB");
	clock_fini(&k);
}

Test(clock, the_hand_wraps_and_stops_at_a_refused_round)
{
	struct clock k;
	struct clock_pass c = { .steps = NR, .max = NR };

	clock_init(&k, "RRRRRRRR", "00000000");
	k.r.ev->hand = 6;
	k.r.ev->wrap_maps = atomic_load(&k.r.ev->maps);
	/* 6 and 7, then page 0 would start a round nobody asked for. */
	scan(&k, &c, (size_t[]){ 6, 7 }, 2);
	cr_expect_eq(k.r.ev->hand, 0);
	cr_expect_eq(c.steps, 0);
	expect_states(&k, "RRRRRRBB");
	/* With two pages mapped since, it goes round. */
	evict_mapped(&k.r, 0, 2 * PAGE);
	c.steps = 5;
	scan(&k, &c, (size_t[]){ 2, 3, 4 }, 3);
	cr_expect_eq(k.r.ev->hand, 5);
	expect_zapped(&k, "zz......");
	clock_fini(&k);
}

Test(clock, mapped_counts_pages_and_sets_their_bits)
{
	struct clock k;

	clock_init(&k, "RRRRRRRR", "00000000");
	cr_expect_eq(atomic_load(&k.r.ev->maps), 0);
	evict_mapped(&k.r, 2 * PAGE, 3 * PAGE);
	cr_expect_eq(atomic_load(&k.r.ev->maps), 3);
	expect_used(&k, "00111000");
	clock_fini(&k);
}
