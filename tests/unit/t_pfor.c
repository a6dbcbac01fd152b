/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Unit tests for the parallel loops (pfor.h): gfs_pfor() and gfs_pool_for()
 * visit every index once, return the error and message of the lowest
 * failing index as a serial loop would, and a pool serves several callers
 * at once.
 */
#include "config.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "gatherfs/util/pfor.h"
#include "tap.h"

enum { N = 5000 };

typedef struct visit {
	atomic_int seen[N];
	size_t fail_from; /* indices >= this fail (N: none) */
} visit;

static gfs_err count(void *ctx, size_t i)
{
	visit *v = ctx;

	atomic_fetch_add(&v->seen[i], 1);
	if (i >= v->fail_from)
		return gfs_fail(i % 2 ? GFS_ERR_IO : GFS_ERR_FORMAT, "index %zu failed", i);
	return GFS_OK;
}

static bool once_each(visit *v, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (atomic_load(&v->seen[i]) != 1)
			return false;
	return true;
}

static visit vs[4];

static void *caller(void *arg)
{
	static atomic_int next;
	gfs_pool *pool = arg;
	visit *v = &vs[atomic_fetch_add(&next, 1)];

	v->fail_from = N;
	return (void *)(uintptr_t)(gfs_pool_for(pool, N, count, v) == GFS_OK && once_each(v, N));
}

int main(void)
{
	static visit v;
	gfs_pool *pool = NULL;
	pthread_t t[4];
	bool all = true;
	gfs_err err;

	v.fail_from = N;
	tap_ok(gfs_pfor(N, count, &v) == GFS_OK && once_each(&v, N), "gfs_pfor visits every index once");
	memset(&v, 0, sizeof(v));
	v.fail_from = 1001;
	err = gfs_pfor(N, count, &v);
	tap_ok(err == GFS_ERR_IO && strcmp(gfs_errmsg(), "index 1001 failed") == 0,
	       "gfs_pfor returns the lowest failing index's error: %s", gfs_errmsg());

	tap_ok(gfs_pool_new(&pool) == GFS_OK && pool, "a pool starts");
	memset(&v, 0, sizeof(v));
	v.fail_from = N;
	tap_ok(gfs_pool_for(pool, N, count, &v) == GFS_OK && once_each(&v, N),
	       "gfs_pool_for visits every index once");
	for (size_t from = 0; from < 3; from++) {
		memset(&v, 0, sizeof(v));
		v.fail_from = from * 1000 + 2;
		err = gfs_pool_for(pool, N, count, &v);
		tap_ok(err == GFS_ERR_FORMAT && atoi(gfs_errmsg() + strlen("index ")) == (int)(from * 1000 + 2),
		       "gfs_pool_for returns the lowest failing index's error: %s", gfs_errmsg());
		for (size_t i = 0; i <= v.fail_from; i++)
			all &= atomic_load(&v.seen[i]) == 1;
	}
	tap_ok(all, "every index up to the lowest failing one ran once");
	memset(&v, 0, sizeof(v));
	v.fail_from = N;
	tap_ok(gfs_pool_for(pool, 0, count, &v) == GFS_OK && gfs_pool_for(pool, 1, count, &v) == GFS_OK &&
	       once_each(&v, 1) && atomic_load(&v.seen[1]) == 0, "n = 0 and n = 1");
	for (size_t k = 0; k < 4; k++)
		tap_ok(pthread_create(&t[k], NULL, caller, pool) == 0, "caller %zu starts", k);
	all = true;
	for (size_t k = 0; k < 4; k++) {
		void *ok;

		all &= pthread_join(t[k], &ok) == 0 && ok;
	}
	tap_ok(all, "four callers at once share the pool, each index of each once");
	gfs_pool_free(pool);
	tap_ok(gfs_pool_for(NULL, 3, count, &v) == GFS_OK, "no pool: a serial loop");
	return tap_done();
}
