/*
 * gatherfs — a bounded parallel loop (pfor.h).
 */
#include "config.h"

#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "gatherfs/util/pfor.h"

typedef struct pfor {
	gfs_err (*fn)(void *ctx, size_t i);
	void *ctx;
	size_t n;
	pthread_mutex_t mu;
	size_t next;   /* the next index to take */
	size_t failed; /* the lowest failing index, n if none */
	gfs_err err;
	char msg[1024]; /* the size of gfs_errmsg()'s buffer */
} pfor;

static void *worker(void *arg)
{
	pfor *p = arg;

	for (;;) {
		size_t i;
		gfs_err err;

		(void)pthread_mutex_lock(&p->mu);
		i = p->next < p->failed ? p->next++ : p->n;
		(void)pthread_mutex_unlock(&p->mu);
		if (i >= p->n)
			return NULL;
		err = p->fn(p->ctx, i);
		if (!err)
			continue;
		(void)pthread_mutex_lock(&p->mu);
		if (i < p->failed) {
			p->failed = i;
			p->err = err;
			(void)snprintf(p->msg, sizeof(p->msg), "%s", gfs_errmsg());
		}
		(void)pthread_mutex_unlock(&p->mu);
	}
}

gfs_err gfs_pfor(size_t n, gfs_err (*fn)(void *ctx, size_t i), void *ctx)
{
	const long cpus = sysconf(_SC_NPROCESSORS_ONLN);
	size_t nthreads = cpus > 1 ? (size_t)cpus : 1;
	pthread_t tids[GFS_PFOR_MAX_THREADS];
	size_t started = 0;
	pfor p = { .fn = fn, .ctx = ctx, .n = n, .failed = n };

	if (nthreads > GFS_PFOR_MAX_THREADS)
		nthreads = GFS_PFOR_MAX_THREADS;
	if (nthreads > n)
		nthreads = n;
	if (nthreads < 2) {
		for (size_t i = 0; i < n; i++) {
			const gfs_err err = fn(ctx, i);

			if (err)
				return err;
		}
		return GFS_OK;
	}
	(void)pthread_mutex_init(&p.mu, NULL);
	/* the calling thread is one of the workers */
	while (started + 1 < nthreads && pthread_create(&tids[started], NULL, worker, &p) == 0)
		started++;
	(void)worker(&p);
	for (size_t t = 0; t < started; t++)
		(void)pthread_join(tids[t], NULL);
	(void)pthread_mutex_destroy(&p.mu);
	if (p.failed < n)
		return gfs_fail(p.err, "%s", p.msg);
	return GFS_OK;
}
