/* SPDX-License-Identifier: Apache-2.0 */
/*
 * gatherfs — arenas: many small allocations (names, shapes, paths) that live
 * and die together, one malloc per 64 KiB instead of one per string.
 */
#ifndef GATHERFS_ARENA_H
#define GATHERFS_ARENA_H

#include <stddef.h>

typedef struct gfs_arena_chunk gfs_arena_chunk;

/* An arena; a zero-initialized one is empty. */
typedef struct gfs_arena {
	gfs_arena_chunk *head; /* the chunk being filled, then older ones */
} gfs_arena;

/*
 * gfs_arena_alloc(): n uninitialized bytes from a, aligned to 8, never
 * moved, freed only by gfs_arena_free().  A request over 16 KiB gets a
 * chunk of its own.  @return the bytes, or NULL (out of memory).
 */
void *gfs_arena_alloc(gfs_arena *a, size_t n);

/* gfs_arena_strdup(): a copy of s in a.  @return the copy, or NULL. */
char *gfs_arena_strdup(gfs_arena *a, const char *s);

/* gfs_arena_strndup(): a copy of s[0..n) and a NUL in a.  @return it, or NULL. */
char *gfs_arena_strndup(gfs_arena *a, const char *s, size_t n);

/* gfs_arena_free(): free everything allocated from a; a is empty again. */
void gfs_arena_free(gfs_arena *a);

#endif
