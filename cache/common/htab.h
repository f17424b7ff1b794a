/* SPDX-License-Identifier: Apache-2.0 */
/*
 * htab — the bucket array of a chained hash table that grows by doubling,
 * for tables whose nodes carry their own chain link (no allocation per
 * node). Header only: SFS_HTAB_DEFINE generates the code for one node type,
 * as BSD's sys/tree.h does, so that each table keeps its nodes' own link
 * field, of their own type, and nothing is cast through void *.
 *
 *   struct name ── buckets[n_buckets] ──> node ──link──> node ──link──> NULL
 *                  n: nodes on the chains
 *
 * SFS_HTAB_DEFINE(name, node_t, link, hash, max_load) declares struct name
 * and, for nodes of type node_t chained through their field `link` (a
 * node_t *), the static functions name_init, name_fini, name_head,
 * name_insert, name_insert_at, name_unlink, name_remove and name_grow.
 * hash is a function uint64_t hash(const node_t *) whose low bits pick a
 * node's bucket (the same node must always give the same value); max_load
 * is how many nodes per bucket, on average, the table holds before it
 * doubles.
 *
 * Owns: where a node's chain is, how many nodes the chains hold, and when
 * and how the bucket array doubles. Does not own: the nodes (their memory,
 * their layout, what else links them), lookups by key (the owner walks the
 * chain from name_head() and compares its keys its own way), the lock.
 *
 * Growth: once an insert leaves more than max_load nodes per bucket, the
 * array doubles and every node moves to its bucket in the new one, all
 * within that insert, so that a lookup never meets a table half moved. If
 * the larger array cannot be allocated the table keeps its size: chains get
 * longer, lookups stay correct. The array never shrinks.
 *
 * Threading: none of its own. The owner serialises every call on a table
 * and every walk of its chains (its lock, or a single thread).
 */
#ifndef SFS_HTAB_H
#define SFS_HTAB_H

#include <errno.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#define SFS_HTAB_DEFINE(name, node_t, link, hash, max_load)                                        \
	struct name {                                                                              \
		node_t **buckets; /* n_buckets chain heads */                                      \
		size_t n_buckets; /* a power of two; 0 before name##_init */                       \
		size_t n;	  /* nodes on the chains */                                        \
	};                                                                                         \
                                                                                                   \
	/* Allocates n_buckets (a power of two) empty chains. Returns 0 or                         \
	 * -ENOMEM (t is then left empty, n_buckets 0). */                                         \
	__attribute__((unused)) static int name##_init(struct name *t, size_t n_buckets)           \
	{                                                                                          \
		t->buckets = calloc(n_buckets, sizeof(*t->buckets));                               \
		t->n_buckets = t->buckets ? n_buckets : 0;                                         \
		t->n = 0;                                                                          \
		return t->buckets ? 0 : -ENOMEM;                                                   \
	}                                                                                          \
                                                                                                   \
	/* Frees the bucket array; the nodes still on it stay the owner's. */                      \
	__attribute__((unused)) static void name##_fini(struct name *t)                            \
	{                                                                                          \
		free(t->buckets);                                                                  \
		t->buckets = NULL;                                                                 \
		t->n_buckets = t->n = 0;                                                           \
	}                                                                                          \
                                                                                                   \
	/* The head of the chain of the nodes whose hash is h (t initialised). */                  \
	__attribute__((unused)) static inline node_t **name##_head(const struct name *t,           \
								   uint64_t h)                     \
	{                                                                                          \
		return &t->buckets[h & (t->n_buckets - 1)];                                        \
	}                                                                                          \
                                                                                                   \
	/* Doubles the bucket array and moves every node to its bucket there.                      \
	 * Returns false, the table unchanged, when the larger array cannot be                     \
	 * allocated. */                                                                           \
	__attribute__((unused)) static bool name##_grow(struct name *t)                            \
	{                                                                                          \
		size_t old_n = t->n_buckets;                                                       \
		node_t **old = t->buckets;                                                         \
		node_t **nb = calloc(old_n * 2, sizeof(*nb));                                      \
                                                                                                   \
		if (!nb)                                                                           \
			return false;                                                              \
		t->buckets = nb;                                                                   \
		t->n_buckets = old_n * 2;                                                          \
		for (size_t b = 0; b < old_n; b++)                                                 \
			for (node_t *x = old[b], *next; x; x = next) {                             \
				node_t **head = name##_head(t, hash(x));                           \
				next = x->link;                                                    \
				x->link = *head;                                                   \
				*head = x;                                                         \
			}                                                                          \
		free(old);                                                                         \
		return true;                                                                       \
	}                                                                                          \
                                                                                                   \
	/* Links x, on no chain of t, in at p: the head of x's chain or the link                   \
	 * of a node on it (where a walk of the chain for x's key ended); then                     \
	 * doubles the array if the table is over max_load. */                                     \
	__attribute__((unused)) static void name##_insert_at(struct name *t, node_t **p,           \
							     node_t *x)                            \
	{                                                                                          \
		x->link = *p;                                                                      \
		*p = x;                                                                            \
		if (++t->n > t->n_buckets * (max_load))                                            \
			name##_grow(t);                                                            \
	}                                                                                          \
                                                                                                   \
	/* Puts x, on no chain of t, at the head of its chain; as insert_at. */                    \
	__attribute__((unused)) static void name##_insert(struct name *t, node_t *x)               \
	{                                                                                          \
		name##_insert_at(t, name##_head(t, hash(x)), x);                                   \
	}                                                                                          \
                                                                                                   \
	/* Takes the node *p off its chain; p is the head of a chain of t or the                   \
	 * link of the node before it (as found by walking the chain). */                          \
	__attribute__((unused)) static inline void name##_unlink(struct name *t, node_t **p)       \
	{                                                                                          \
		node_t *x = *p;                                                                    \
                                                                                                   \
		*p = x->link;                                                                      \
		x->link = NULL;                                                                    \
		t->n--;                                                                            \
	}                                                                                          \
                                                                                                   \
	/* Takes x off its chain. Returns whether it was on one. */                                \
	__attribute__((unused)) static bool name##_remove(struct name *t, node_t *x)               \
	{                                                                                          \
		for (node_t **p = name##_head(t, hash(x)); *p; p = &(*p)->link)                    \
			if (*p == x) {                                                             \
				name##_unlink(t, p);                                               \
				return true;                                                       \
			}                                                                          \
		return false;                                                                      \
	}                                                                                          \
	struct name /* so that SFS_HTAB_DEFINE(...); ends with a semicolon */

#endif
