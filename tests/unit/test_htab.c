// SPDX-License-Identifier: Apache-2.0
/*
 * test_htab — cache/common/htab.h, the chained hash table that grows by
 * doubling, on a node type of its own: every node stays findable through
 * growth, removals between and after doublings, hundreds of thousands of
 * nodes, every node in one chain, and a doubling that cannot get memory
 * (calloc is wrapped: -Wl,--wrap=calloc) leaving the table as it was.
 *
 * After each step the whole table is checked against a separate record of
 * which keys are in it: each node on the chain its hash picks, the count
 * equal to the nodes on the chains, the load within max_load.
 */
#include "htab.h"
#include "tap.h"

#include <stdint.h>
#include <stdlib.h>

/* --- calloc, failing on demand ------------------------------------------- */

void *__real_calloc(size_t n, size_t size);
void *__wrap_calloc(size_t n, size_t size);

/* The next this many calls fail. volatile: the compiler takes calloc for the
 * builtin, which writes no variable of ours. */
static volatile int calloc_fail;

void *__wrap_calloc(size_t n, size_t size)
{
	if (calloc_fail > 0) {
		calloc_fail--;
		return NULL;
	}
	return __real_calloc(n, size);
}

/* --- a table of keyed nodes ---------------------------------------------- */

#define MAX_LOAD 2

struct node {
	uint64_t key;
	struct node *next;
	bool in; /* the test's own record: whether it was inserted and not removed */
};

static uint64_t mix(uint64_t k) { return (k ^ (k >> 31)) * 0x9e3779b97f4a7c15ull; }
static uint64_t node_hash(const struct node *x) { return mix(x->key); }

SFS_HTAB_DEFINE(tab, struct node, next, node_hash, MAX_LOAD);

/* Every node in one chain: removal from the middle and the end of a long
 * chain, growth that moves nothing apart. */
static uint64_t same_hash(const struct node *x)
{
	(void)x;
	return 5;
}

SFS_HTAB_DEFINE(one_chain, struct node, next, same_hash, 1);

static struct node *find(const struct tab *t, uint64_t key)
{
	struct node *x = *tab_head(t, mix(key));

	while (x && x->key != key)
		x = x->next;
	return x;
}

/* Whether t holds exactly the nodes of v[0..n) marked in, each on the chain
 * its hash picks, with t->n of them; with load, also whether the table is
 * within MAX_LOAD. Prints what is wrong first. */
static bool table_ok(const struct tab *t, const struct node *v, size_t n, bool load)
{
	size_t on_chains = 0, in = 0;

	if (!t->n_buckets || (t->n_buckets & (t->n_buckets - 1))) {
		diag("n_buckets %zu is not a power of two", t->n_buckets);
		return false;
	}
	for (size_t b = 0; b < t->n_buckets; b++)
		for (const struct node *x = t->buckets[b]; x; x = x->next) {
			if (tab_head(t, node_hash(x)) != &t->buckets[b] || !x->in) {
				diag("key %llu in bucket %zu: %s", (unsigned long long)x->key, b,
				     x->in ? "not its bucket" : "removed");
				return false;
			}
			if (++on_chains > n) {
				diag("more nodes on the chains than exist: a loop");
				return false;
			}
		}
	for (size_t i = 0; i < n; i++) {
		in += v[i].in;
		if (v[i].in && find(t, v[i].key) != &v[i]) {
			diag("key %llu not found", (unsigned long long)v[i].key);
			return false;
		}
		if (!v[i].in && find(t, v[i].key)) {
			diag("removed key %llu found", (unsigned long long)v[i].key);
			return false;
		}
	}
	if (on_chains != in || t->n != in) {
		diag("%zu nodes on the chains, count %zu, %zu inserted", on_chains, t->n, in);
		return false;
	}
	if (load && t->n > t->n_buckets * MAX_LOAD) {
		diag("%zu nodes in %zu buckets: over the load", t->n, t->n_buckets);
		return false;
	}
	return true;
}

static struct node *nodes_new(size_t n)
{
	struct node *v = malloc(n * sizeof(*v));

	if (!v) {
		printf("Bail out! out of memory\n");
		exit(1);
	}
	for (size_t i = 0; i < n; i++)
		v[i] = (struct node){.key = i * 7919 + 3};
	return v;
}

static void put(struct tab *t, struct node *x)
{
	tab_insert(t, x);
	x->in = true;
}

static void take(struct tab *t, struct node *x, bool *ok)
{
	*ok &= tab_remove(t, x);
	x->in = false;
}

/* --- tests ---------------------------------------------------------------- */

/* Hundreds of thousands of nodes from 8 buckets: every doubling keeps every
 * node findable and the table within its load. */
static void test_growth(void)
{
	enum { N = 300000 };
	struct node *v = nodes_new(N);
	struct tab t;
	bool each = true;
	size_t doublings = 0;

	ok(tab_init(&t, 8) == 0 && t.n_buckets == 8 && t.n == 0, "init: 8 empty chains");
	for (size_t i = 0; i < N; i++) {
		size_t before = t.n_buckets;
		put(&t, &v[i]);
		if (t.n_buckets != before) {
			doublings++;
			each &= t.n_buckets == 2 * before;
			if (doublings <= 4 || t.n_buckets >= N / MAX_LOAD)
				each &= table_ok(&t, v, N, true);
		}
	}
	ok(each, "each growth doubles and keeps every node findable (%zu doublings)", doublings);
	ok(table_ok(&t, v, N, true), "all %d nodes found in %zu buckets", N, t.n_buckets);
	ok(t.n_buckets == 8u << doublings && t.n_buckets * MAX_LOAD >= N &&
	       t.n_buckets * MAX_LOAD / 2 < N,
	   "grown only as far as the load needs (%zu buckets)", t.n_buckets);
	tab_fini(&t);
	ok(!t.buckets && !t.n_buckets && !t.n, "fini empties the table");
	free(v);
}

/* Removals between the doublings: every third node goes again a little after
 * it came, so that nodes leave chains that later move. */
static void test_remove_during_growth(void)
{
	enum { N = 200000 };
	struct node *v = nodes_new(N);
	struct tab t;
	bool removed = true, each = true;

	tab_init(&t, 16);
	for (size_t i = 0; i < N; i++) {
		size_t before = t.n_buckets;
		put(&t, &v[i]);
		if (i >= 50 && (i - 50) % 3 == 0)
			take(&t, &v[i - 50], &removed);
		if (t.n_buckets != before && t.n_buckets <= 1024)
			each &= table_ok(&t, v, N, true);
	}
	ok(removed, "every removal found its node");
	ok(each, "the small tables check out after each doubling");
	ok(table_ok(&t, v, N, true),
	   "after %d inserts and removals between them: %zu nodes, all found", N, t.n);
	tab_fini(&t);
	free(v);
}

/* After growth: half the nodes go, a removed node is not found again, and
 * removing it twice says so; then all of them go. */
static void test_remove_after_growth(void)
{
	enum { N = 100000 };
	struct node *v = nodes_new(N);
	struct tab t;
	bool removed = true;

	tab_init(&t, 4);
	for (size_t i = 0; i < N; i++)
		put(&t, &v[i]);
	size_t grown = t.n_buckets;
	for (size_t i = 0; i < N; i += 2)
		take(&t, &v[i], &removed);
	ok(removed && table_ok(&t, v, N, false), "half removed: the other half found, %zu left",
	   t.n);
	ok(!tab_remove(&t, &v[0]) && t.n == N / 2, "a second removal finds nothing, count kept");
	for (size_t i = 1; i < N; i += 2)
		take(&t, &v[i], &removed);
	ok(removed && t.n == 0 && table_ok(&t, v, N, false), "all removed: an empty table");
	ok(t.n_buckets == grown, "removals never shrink the array");
	for (size_t i = 0; i < N; i += 3)
		put(&t, &v[i]);
	ok(table_ok(&t, v, N, true), "inserted again after the removals: found");
	tab_fini(&t);
	free(v);
}

/* insert_at, where a walk for an absent key ended (the chain's end), and
 * unlink at the head and in the middle of a chain, as the tables that walk
 * with a pointer to the link do. */
static void test_insert_at_and_unlink(void)
{
	enum { N = 5000 };
	struct node *v = nodes_new(N);
	struct tab t;

	tab_init(&t, 2);
	for (size_t i = 0; i < N; i++) {
		struct node **p = tab_head(&t, mix(v[i].key));
		while (*p && (*p)->key != v[i].key)
			p = &(*p)->next;
		tab_insert_at(&t, p, &v[i]);
		v[i].in = true;
	}
	ok(table_ok(&t, v, N, true), "insert_at at the chain's end: %d found, grown to %zu", N,
	   t.n_buckets);
	size_t unlinked = 0;
	for (size_t b = 0; b < t.n_buckets; b++) {
		/* the head, then every second node after it */
		for (struct node **p = &t.buckets[b]; *p;) {
			(*p)->in = false;
			tab_unlink(&t, p);
			unlinked++;
			if (*p)
				p = &(*p)->next;
		}
	}
	ok(unlinked > 0 && table_ok(&t, v, N, false), "%zu unlinked by their link: the rest found",
	   unlinked);
	tab_fini(&t);
	free(v);
}

/* A doubling that cannot get its array leaves the table as it was, over its
 * load; the next insert doubles it. */
static void test_grow_fails(void)
{
	enum { N = 64 };
	struct node *v = nodes_new(N);
	struct tab t;

	calloc_fail = 1;
	ok(tab_init(&t, 8) == -ENOMEM && !t.buckets && !t.n_buckets,
	   "init without memory: -ENOMEM");
	ok(tab_init(&t, 8) == 0, "init");
	for (size_t i = 0; i < 8 * MAX_LOAD; i++)
		put(&t, &v[i]);
	ok(t.n_buckets == 8 && table_ok(&t, v, N, true), "at its load: 8 buckets");
	calloc_fail = 1;
	put(&t, &v[16]);
	ok(t.n_buckets == 8 && calloc_fail == 0, "the doubling failed: still 8 buckets");
	ok(table_ok(&t, v, N, false) && t.n == 17, "over its load, every node found");
	calloc_fail = 1;
	ok(!tab_grow(&t) && t.n_buckets == 8 && table_ok(&t, v, N, false),
	   "tab_grow without memory: false, table unchanged");
	put(&t, &v[17]);
	ok(t.n_buckets == 16 && table_ok(&t, v, N, true), "the next insert doubles it");
	tab_fini(&t);
	free(v);
}

/* Every node on one chain: removal from its head, middle and end. */
static void test_one_chain(void)
{
	enum { N = 1000 };
	struct node *v = nodes_new(N);
	struct one_chain t;
	bool removed = true, rest = true;

	one_chain_init(&t, 1);
	for (size_t i = 0; i < N; i++)
		one_chain_insert(&t, &v[i]);
	size_t in_head = 0;
	for (struct node *x = *one_chain_head(&t, 5); x; x = x->next)
		in_head++;
	ok(in_head == N && t.n == N && t.n_buckets >= N,
	   "%zu nodes, all on one chain of %zu buckets", in_head, t.n_buckets);
	/* the last inserted is the head; v[0] the end; then the middle */
	removed &= one_chain_remove(&t, &v[N - 1]);
	removed &= one_chain_remove(&t, &v[0]);
	for (size_t i = 1; i < N - 1; i += 2)
		removed &= one_chain_remove(&t, &v[i]);
	for (size_t i = 2; i < N - 1; i += 2) {
		bool found = false;
		for (struct node *x = *one_chain_head(&t, 5); x && !found; x = x->next)
			found = x == &v[i];
		rest &= found;
	}
	ok(removed && rest && t.n == N / 2 - 1,
	   "head, end and every other removed: %zu left, each still there", t.n);
	one_chain_fini(&t);
	free(v);
}

int main(int argc, char **argv)
{
	static const struct tap_test tests[] = {
	    {"growth", test_growth},
	    {"remove_during_growth", test_remove_during_growth},
	    {"remove_after_growth", test_remove_after_growth},
	    {"insert_at_and_unlink", test_insert_at_and_unlink},
	    {"grow_fails", test_grow_fails},
	    {"one_chain", test_one_chain},
	};

	return tap_run(tests, sizeof(tests) / sizeof(tests[0]), argc, argv);
}
