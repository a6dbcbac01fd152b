/* SPDX-License-Identifier: Apache-2.0 */
/*
 * gatherfs — SHA-256 of tensor files, computed once per mount (see
 * tensorhash.h).
 */
#include "config.h"

#include <assert.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "gatherfs/fs/tensorhash.h"
#include "gatherfs/util/sha256.h"

#define HASH_CHUNK ((size_t)1 << 20)

enum { H_NONE, H_BUSY, H_DONE };

struct gfs_thash {
	pthread_mutex_t mu;
	pthread_cond_t cv;
	size_t n;
	unsigned char *state; /* [n] H_* under mu; NULL until the first request */
	char (*hex)[65];      /* [n] valid once H_DONE */
};

gfs_err gfs_thash_new(size_t nnodes, gfs_thash **out)
{
	gfs_thash *h = calloc(1, sizeof(*h));

	if (!h)
		return gfs_fail(GFS_ERR_NOMEM, "out of memory");
	h->n = nnodes; /* the tables come with the first request (gfs_thash_get()) */
	pthread_mutex_init(&h->mu, NULL);
	pthread_cond_init(&h->cv, NULL);
	*out = h;
	return GFS_OK;
}

void gfs_thash_free(gfs_thash *h)
{
	if (!h)
		return;
	pthread_mutex_destroy(&h->mu);
	pthread_cond_destroy(&h->cv);
	free(h->state);
	free(h->hex);
	free(h);
}

/* compute(): the hash of n's bytes into hex. */
static gfs_err compute(const gfs_fs *fs, const gfs_node *n, char hex[65])
{
	uint8_t *buf = malloc(HASH_CHUNK), d[32];
	uint64_t off = 0;
	size_t got = 0;
	gfs_sha256 c;
	gfs_err err = buf ? GFS_OK : gfs_fail(GFS_ERR_NOMEM, "out of memory");

	gfs_sha256_init(&c);
	do {
		if (!err)
			err = gfs_fs_read(fs, n, off, buf, HASH_CHUNK, &got);
		if (!err)
			gfs_sha256_update(&c, buf, got);
		off += got;
	} while (!err && got > 0);
	free(buf);
	if (!err) {
		gfs_sha256_final(&c, d);
		gfs_sha256_hex(d, hex);
	}
	return err;
}

gfs_err gfs_thash_get(gfs_thash *h, const gfs_fs *fs, const gfs_node *n, char hex[65])
{
	const size_t i = (size_t)gfs_fs_ino(fs, n) - 1;
	gfs_err err;

	assert(i < h->n);
	pthread_mutex_lock(&h->mu);
	if (!h->state) { /* no memory for hashes nobody asked for */
		h->state = calloc(h->n, 1);
		h->hex = calloc(h->n, sizeof(*h->hex));
		if (!h->state || !h->hex) {
			free(h->state);
			free(h->hex);
			h->state = NULL;
			h->hex = NULL;
			pthread_mutex_unlock(&h->mu);
			return gfs_fail(GFS_ERR_NOMEM, "out of memory");
		}
	}
	while (h->state[i] == H_BUSY)
		pthread_cond_wait(&h->cv, &h->mu);
	if (h->state[i] == H_DONE) {
		memcpy(hex, h->hex[i], 65);
		pthread_mutex_unlock(&h->mu);
		return GFS_OK;
	}
	h->state[i] = H_BUSY;
	pthread_mutex_unlock(&h->mu);
	err = compute(fs, n, hex);
	pthread_mutex_lock(&h->mu);
	if (!err)
		memcpy(h->hex[i], hex, 65);
	h->state[i] = err ? H_NONE : H_DONE;
	pthread_cond_broadcast(&h->cv);
	pthread_mutex_unlock(&h->mu);
	return err;
}
