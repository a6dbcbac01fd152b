/* SPDX-License-Identifier: Apache-2.0 */
/*
 * gatherfs — the persistent CRC cache: a directory of small entry files
 * (the CRC-32s of a torch zip view, view_torchzip.c) kept under a size
 * bound, shared by every daemon that names the same directory.
 *
 * An entry is a file NAME.crc.  Its modification time is its recency: a
 * hit sets it to now.  A write takes an exclusive flock(2) on the
 * directory's `.lock`, writes the entry to a temporary file, removes the
 * least recently used entries until the total size of the entries with
 * the new one is within the bound, renames the temporary file into place
 * and unlocks: an entry is never seen half-written, and temporary files
 * found under the lock are left-overs of a daemon that died writing one
 * (removed).  Only files named *.crc and *.crc.*.tmp are ever removed.
 * Readers take no lock: an entry removed under an open reader stays
 * readable to it.  Everything is best effort: a cache that cannot be read
 * or written is a miss.  All calls are thread-safe.
 */
#ifndef GATHERFS_CRCCACHE_H
#define GATHERFS_CRCCACHE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Default and accepted bounds of the total size of the entries. */
#define GFS_CRCCACHE_DEFAULT_MAX ((uint64_t)64 << 20)
#define GFS_CRCCACHE_MIN ((uint64_t)1 << 10)
#define GFS_CRCCACHE_MAX ((uint64_t)1 << 40)

typedef struct gfs_crccache {
	const char *dir; /* absolute; created (mode 0700, with parents) on first write */
	uint64_t max;    /* bound on the total size of the entries, in bytes */
} gfs_crccache;

/*
 * gfs_crccache_get(): the entry `name` (a file name ending in .crc) of c
 * into buf (cap bytes) and its length in *len, marked used; false if
 * there is none or it is larger than cap.
 */
bool gfs_crccache_get(const gfs_crccache *c, const char *name, void *buf, size_t cap,
		      size_t *len);

/*
 * gfs_crccache_put(): store data[0..len) as entry `name` (a file name
 * ending in .crc) of c, replacing any, after evicting the least recently
 * used entries the bound requires; nothing if len alone exceeds it.
 */
void gfs_crccache_put(const gfs_crccache *c, const char *name, const void *data, size_t len);

#endif
