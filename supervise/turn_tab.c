/* SPDX-License-Identifier: MIT */
/*
 * turn_tab.c - the connections with turns (turn.c: a server's accepted
 * ones; client.c: a client's connected ones), keyed by their socket's
 * inode whichever supervised process sends or receives on them: a table
 * with open addressing and linear probing, at most half full.
 */
#include "turn.h"
#include "state.h"
#include "turn_state.h"

#include <stdlib.h>
#include <string.h>

static size_t slot_of(const struct sl_sup_turns *t, ino_t ino)
{
	return (size_t)(((uint64_t)ino * 0x9e3779b97f4a7c15ull) >> 32) & (t->cap - 1);
}

struct turn *sl_sup_turn_find(const struct sl_sup_turns *t, ino_t ino)
{
	if (t == NULL || t->cap == 0 || ino == 0)
		return NULL;
	for (size_t k = slot_of(t, ino);; k = (k + 1) & (t->cap - 1)) {
		if (t->tab[k].ino == ino)
			return &t->tab[k];
		if (t->tab[k].ino == 0)
			return NULL;
	}
}

struct turn *sl_sup_turn_claim(struct sl_sup_turns *t, ino_t ino)
{
	struct turn *e = sl_sup_turn_find(t, ino);
	if (e != NULL)
		return e;
	if (2 * (t->n + 1) > t->cap) { /* at most half full */
		size_t cap = t->cap != 0 ? 2 * t->cap : 64;
		struct turn *tab = calloc(cap, sizeof(*tab)), *old = t->tab;
		if (tab == NULL)
			return NULL;
		const size_t old_cap = t->cap;
		t->tab = tab;
		t->cap = cap;
		for (size_t k = 0; k < old_cap; k++) {
			if (old[k].ino == 0)
				continue;
			size_t j = slot_of(t, old[k].ino);
			while (tab[j].ino != 0)
				j = (j + 1) & (cap - 1);
			tab[j] = old[k];
		}
		free(old);
	}
	size_t k = slot_of(t, ino);
	while (t->tab[k].ino != 0)
		k = (k + 1) & (t->cap - 1);
	t->tab[k] = (struct turn){.ino = ino};
	t->n++;
	return &t->tab[k];
}

void sl_sup_turn_erase(struct sl_sup_turns *t, struct turn *e)
{
	const size_t mask = t->cap - 1;
	size_t hole = (size_t)(e - t->tab);
	for (size_t k = (hole + 1) & mask; t->tab[k].ino != 0; k = (k + 1) & mask) {
		const size_t home = slot_of(t, t->tab[k].ino);
		/* Movable into the hole unless its home lies in (hole, k]. */
		if (((k - home) & mask) >= ((k - hole) & mask)) {
			t->tab[hole] = t->tab[k];
			hole = k;
		}
	}
	t->tab[hole].ino = 0;
	t->n--;
}

struct sl_sup_turns *sl_sup_turns_of(struct sl_sup *s)
{
	if (s->turns == NULL) {
		/* The limiters are 64-byte aligned (core/sluice_core.h). */
		size_t size = (sizeof(*s->turns) + 63) & ~(size_t)63;
		s->turns = aligned_alloc(64, size);
		if (s->turns != NULL) {
			memset(s->turns, 0, size);
			s->turns->load1 = s->turns->cpu = UINT64_MAX;
		}
	}
	return s->turns;
}

void sl_sup_turn_free(struct sl_sup *s)
{
	if (s->turns == NULL)
		return;
	free(s->turns->tab);
	free(s->turns);
	s->turns = NULL;
}
