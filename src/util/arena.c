/* SPDX-License-Identifier: Apache-2.0 */
/*
 * gatherfs — arenas (arena.h).
 */
#include "config.h"

#include <assert.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "gatherfs/util/arena.h"

struct gfs_arena_chunk {
	gfs_arena_chunk *next;
	size_t size;
	size_t used;
	max_align_t data[];
};

enum { ARENA_CHUNK = 1 << 16 };

void *gfs_arena_alloc(gfs_arena *a, size_t n)
{
	gfs_arena_chunk *c;
	void *p;

	assert(a);
	c = a->head;
	if (n > SIZE_MAX - sizeof(*c) - 7)
		return NULL;
	n = (n + 7) & ~(size_t)7;
	if (!c || c->size - c->used < n) {
		const size_t size = n > ARENA_CHUNK / 4 ? n : ARENA_CHUNK;

		c = malloc(sizeof(*c) + size);
		if (!c)
			return NULL;
		c->size = size;
		c->used = 0;
		if (size == n && a->head) { /* a large block: keep filling the head */
			c->next = a->head->next;
			a->head->next = c;
		} else {
			c->next = a->head;
			a->head = c;
		}
	}
	p = (unsigned char *)c->data + c->used;
	c->used += n;
	return p;
}

char *gfs_arena_strndup(gfs_arena *a, const char *s, size_t n)
{
	char *p = n < SIZE_MAX ? gfs_arena_alloc(a, n + 1) : NULL;

	if (p) {
		memcpy(p, s, n);
		p[n] = '\0';
	}
	return p;
}

char *gfs_arena_strdup(gfs_arena *a, const char *s)
{
	return gfs_arena_strndup(a, s, strlen(s));
}

void gfs_arena_free(gfs_arena *a)
{
	while (a->head) {
		gfs_arena_chunk *next = a->head->next;

		free(a->head);
		a->head = next;
	}
}
