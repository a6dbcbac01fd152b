/* SPDX-License-Identifier: Apache-2.0 */
/*
 * gatherfs — bounded parallel loops (pfor.h).
 */
#include "config.h"

#include <assert.h>
#include <pthread.h>
#include <stdbool.h>
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

/* serial(): fn(ctx, i) for i in [0, n) in this thread, up to the first error. */
static gfs_err serial(size_t n, gfs_err (*fn)(void *ctx, size_t i), void *ctx)
{
	for (size_t i = 0; i < n; i++) {
		const gfs_err err = fn(ctx, i);

		if (err)
			return err;
	}
	return GFS_OK;
}

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

	if (nthreads > GFS_PFOR_MAX_THREADS)
		nthreads = GFS_PFOR_MAX_THREADS;
	return gfs_pfor_threads(n, nthreads, fn, ctx);
}

gfs_err gfs_pfor_threads(size_t n, size_t nthreads, gfs_err (*fn)(void *ctx, size_t i), void *ctx)
{
	pthread_t tids[GFS_POOL_MAX_THREADS];
	size_t started = 0;
	pfor p = { .fn = fn, .ctx = ctx, .n = n, .failed = n };

	assert(nthreads <= GFS_POOL_MAX_THREADS);
	if (nthreads > n)
		nthreads = n;
	if (nthreads < 2) {
		return serial(n, fn, ctx);
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

/*
 * The pool: calls post their loop (a pfor) on a list; an idle thread takes
 * the first loop with indices left and works on it (worker()), the calling
 * thread too; the caller then takes its loop off the list and waits for the
 * threads still on it.
 */
typedef struct job {
	pfor p;
	size_t helpers; /* pool threads on it, under the pool's mutex */
	struct job *next;
} job;

struct gfs_pool {
	pthread_mutex_t mu;
	pthread_cond_t work; /* a job was posted, or stop */
	pthread_cond_t left; /* a helper left a job */
	job *jobs;
	bool stop;
	size_t nthreads;
	pthread_t *tids;
};

/* open_job(): with pool->mu held, the first posted job with indices left, or NULL. */
static job *open_job(gfs_pool *pool)
{
	for (job *j = pool->jobs; j; j = j->next) {
		bool left;

		(void)pthread_mutex_lock(&j->p.mu);
		left = j->p.next < j->p.failed && j->p.next < j->p.n;
		(void)pthread_mutex_unlock(&j->p.mu);
		if (left)
			return j;
	}
	return NULL;
}

static void *pool_thread(void *arg)
{
	gfs_pool *pool = arg;

	(void)pthread_mutex_lock(&pool->mu);
	while (!pool->stop) {
		job *j = open_job(pool);

		if (!j) {
			(void)pthread_cond_wait(&pool->work, &pool->mu);
			continue;
		}
		j->helpers++;
		(void)pthread_mutex_unlock(&pool->mu);
		(void)worker(&j->p);
		(void)pthread_mutex_lock(&pool->mu);
		j->helpers--;
		(void)pthread_cond_broadcast(&pool->left);
	}
	(void)pthread_mutex_unlock(&pool->mu);
	return NULL;
}

gfs_err gfs_pool_new(gfs_pool **out)
{
	const long cpus = sysconf(_SC_NPROCESSORS_ONLN);
	size_t want = cpus > 1 ? (size_t)cpus - 1 : 0;

	if (want > GFS_PFOR_MAX_THREADS - 1)
		want = GFS_PFOR_MAX_THREADS - 1;
	return gfs_pool_new_threads(want, out);
}

gfs_err gfs_pool_new_threads(size_t want, gfs_pool **out)
{
	gfs_pool *pool = calloc(1, sizeof(*pool));

	assert(want <= GFS_POOL_MAX_THREADS);
	if (pool && want)
		pool->tids = calloc(want, sizeof(*pool->tids));
	if (!pool || (want && !pool->tids)) {
		free(pool);
		return gfs_fail(GFS_ERR_NOMEM, "out of memory");
	}
	(void)pthread_mutex_init(&pool->mu, NULL);
	(void)pthread_cond_init(&pool->work, NULL);
	(void)pthread_cond_init(&pool->left, NULL);
	while (pool->nthreads < want &&
	       pthread_create(&pool->tids[pool->nthreads], NULL, pool_thread, pool) == 0)
		pool->nthreads++;
	*out = pool;
	return GFS_OK;
}

void gfs_pool_free(gfs_pool *p)
{
	if (!p)
		return;
	(void)pthread_mutex_lock(&p->mu);
	assert(!p->jobs);
	p->stop = true;
	(void)pthread_cond_broadcast(&p->work);
	(void)pthread_mutex_unlock(&p->mu);
	for (size_t t = 0; t < p->nthreads; t++)
		(void)pthread_join(p->tids[t], NULL);
	(void)pthread_cond_destroy(&p->left);
	(void)pthread_cond_destroy(&p->work);
	(void)pthread_mutex_destroy(&p->mu);
	free(p->tids);
	free(p);
}

gfs_err gfs_pool_for(gfs_pool *p, size_t n, gfs_err (*fn)(void *ctx, size_t i), void *ctx)
{
	job j = { .p = { .fn = fn, .ctx = ctx, .n = n, .failed = n } };

	if (!p || p->nthreads == 0 || n < 2) {
		return serial(n, fn, ctx);
	}
	(void)pthread_mutex_init(&j.p.mu, NULL);
	(void)pthread_mutex_lock(&p->mu);
	j.next = p->jobs;
	p->jobs = &j;
	(void)pthread_cond_broadcast(&p->work);
	(void)pthread_mutex_unlock(&p->mu);
	(void)worker(&j.p);
	(void)pthread_mutex_lock(&p->mu);
	for (job **q = &p->jobs; *q; q = &(*q)->next)
		if (*q == &j) {
			*q = j.next;
			break;
		}
	while (j.helpers > 0)
		(void)pthread_cond_wait(&p->left, &p->mu);
	(void)pthread_mutex_unlock(&p->mu);
	(void)pthread_mutex_destroy(&j.p.mu);
	if (j.p.failed < n)
		return gfs_fail(j.p.err, "%s", j.p.msg);
	return GFS_OK;
}
