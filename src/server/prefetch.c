/* SPDX-License-Identifier: Apache-2.0 */
/*
 * gatherfs — read-ahead for sequential readers: a pool of chunk buffers
 * filled by worker threads, one lock for the pool and its streams.
 *
 * A chunk is FREE (no owner), QUEUED or FILLING for its stream, then READY
 * or FAILED.  A stream drops chunks it no longer needs; a dropped chunk
 * that is queued, being filled or pinned by a hit is marked stale and
 * freed by whoever ends that (the worker, gfs_pfstream_put()).
 */
#include "config.h"

#include <assert.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "gatherfs/server/prefetch.h"

enum { MAX_WORKERS = 64 };

typedef enum ch_state { CH_FREE, CH_QUEUED, CH_FILLING, CH_READY, CH_FAILED } ch_state;

typedef struct chunk {
	gfs_pfstream *s; /* owner; NULL when FREE */
	uint64_t off;    /* in the owner's file, a multiple of GFS_PF_CHUNK */
	size_t len;      /* <= GFS_PF_CHUNK, shorter at the end of the file */
	ch_state st;
	unsigned pins;   /* hits holding its bytes */
	bool stale;      /* dropped: freed when no longer queued, filling or pinned */
	uint8_t *buf;    /* GFS_PF_CHUNK bytes, allocated on first fill */
	struct chunk *qnext;
} chunk;

struct gfs_prefetch {
	pthread_mutex_t mu;
	pthread_cond_t work; /* for workers: a chunk queued, or stop */
	pthread_cond_t done; /* a chunk settled or was freed */
	chunk *ch;
	size_t nch;
	pthread_t th[MAX_WORKERS];
	size_t nth;  /* started */
	size_t maxth;
	chunk *qhead, *qtail;
	bool stop;
	gfs_prefetch_stats st;
	gfs_pfstream *streams; /* open streams, freed with the pool if left open */
};

struct gfs_pfstream {
	gfs_prefetch *p;
	const gfs_vfile *vf;
	uint64_t size;
	uint64_t next;  /* where the last read ended */
	uint64_t ahead; /* read-ahead scheduled up to here */
	bool seq;       /* the last read started where the one before ended */
	unsigned slow;  /* slow sequential reads in a row */
	bool on;        /* prefetching */
	unsigned users; /* gets not yet ended by a put or timed */
	gfs_pfstream *lprev, *lnext; /* in the pool's list of open streams */
};

static uint64_t floor_chunk(uint64_t off)
{
	return off - off % GFS_PF_CHUNK;
}

/* release(): c back to the pool (lock held). */
static void release(gfs_prefetch *p, chunk *c)
{
	c->s = NULL;
	c->st = CH_FREE;
	c->stale = false;
	c->pins = 0;
	pthread_cond_broadcast(&p->done);
}

/* drop(): the owner no longer needs c (lock held). */
static void drop(gfs_prefetch *p, chunk *c)
{
	if (c->st == CH_QUEUED || c->st == CH_FILLING || c->pins > 0)
		c->stale = true;
	else
		release(p, c);
}

/* drop_below(): drop the live chunks of s that end at or before end (lock held). */
static void drop_below(gfs_pfstream *s, uint64_t end)
{
	gfs_prefetch *p = s->p;

	for (size_t i = 0; i < p->nch; i++) {
		chunk *c = &p->ch[i];

		if (c->s == s && !c->stale && c->off + c->len <= end)
			drop(p, c);
	}
}

static void *worker(void *arg)
{
	gfs_prefetch *p = arg;

	pthread_mutex_lock(&p->mu);
	while (!p->stop) {
		chunk *c = p->qhead;
		const gfs_vfile *vf;
		size_t got = 0;
		bool ok;

		if (!c) {
			pthread_cond_wait(&p->work, &p->mu);
			continue;
		}
		p->qhead = c->qnext;
		if (!p->qhead)
			p->qtail = NULL;
		if (c->stale) {
			release(p, c);
			continue;
		}
		c->st = CH_FILLING;
		vf = c->s->vf;
		pthread_mutex_unlock(&p->mu);
		if (!c->buf)
			c->buf = gfs_iobuf(GFS_PF_CHUNK);
		/* The error (if any) is reported when the reader reads the
		 * range itself. */
		ok = c->buf && gfs_vfile_read(vf, c->off, c->buf, c->len, &got) == GFS_OK &&
		     got == c->len;
		pthread_mutex_lock(&p->mu);
		c->st = ok ? CH_READY : CH_FAILED;
		if (ok)
			p->st.filled += c->len;
		if (c->stale)
			release(p, c);
		pthread_cond_broadcast(&p->done);
	}
	pthread_mutex_unlock(&p->mu);
	return NULL;
}

gfs_err gfs_prefetch_new(uint64_t budget, gfs_prefetch **out)
{
	gfs_prefetch *p;

	assert(budget >= GFS_PF_CHUNK && budget <= GFS_PF_MAX);
	p = calloc(1, sizeof(*p));
	if (!p)
		return gfs_fail(GFS_ERR_NOMEM, "out of memory");
	p->nch = (size_t)(budget / GFS_PF_CHUNK);
	p->ch = calloc(p->nch, sizeof(*p->ch));
	if (!p->ch) {
		free(p);
		return gfs_fail(GFS_ERR_NOMEM, "out of memory");
	}
	p->maxth = p->nch < MAX_WORKERS ? p->nch : MAX_WORKERS;
	if (pthread_mutex_init(&p->mu, NULL) != 0) {
		free(p->ch);
		free(p);
		return gfs_fail(GFS_ERR_NOMEM, "cannot create a lock");
	}
	if (pthread_cond_init(&p->work, NULL) != 0 || pthread_cond_init(&p->done, NULL) != 0)
		abort(); /* never fails on Linux (no attributes) */
	*out = p;
	return GFS_OK;
}

void gfs_prefetch_free(gfs_prefetch *p)
{
	if (!p)
		return;
	pthread_mutex_lock(&p->mu);
	p->stop = true;
	pthread_cond_broadcast(&p->work);
	pthread_mutex_unlock(&p->mu);
	for (size_t i = 0; i < p->nth; i++)
		pthread_join(p->th[i], NULL);
	for (size_t i = 0; i < p->nch; i++)
		free(p->ch[i].buf);
	while (p->streams) {
		gfs_pfstream *s = p->streams;

		p->streams = s->lnext;
		free(s);
	}
	pthread_cond_destroy(&p->work);
	pthread_cond_destroy(&p->done);
	pthread_mutex_destroy(&p->mu);
	free(p->ch);
	free(p);
}

/* start_workers(): start the workers if none runs; true if some run (lock held). */
static bool start_workers(gfs_prefetch *p)
{
	while (p->nth < p->maxth && pthread_create(&p->th[p->nth], NULL, worker, p) == 0)
		p->nth++;
	return p->nth > 0;
}

gfs_err gfs_pfstream_open(gfs_prefetch *p, const gfs_vfile *vf, gfs_pfstream **out)
{
	gfs_pfstream *s = calloc(1, sizeof(*s));

	if (!s)
		return gfs_fail(GFS_ERR_NOMEM, "out of memory");
	s->p = p;
	s->vf = vf;
	s->size = gfs_vfile_size(vf);
	pthread_mutex_lock(&p->mu);
	s->lnext = p->streams;
	if (p->streams)
		p->streams->lprev = s;
	p->streams = s;
	pthread_mutex_unlock(&p->mu);
	*out = s;
	return GFS_OK;
}

/* owns(): whether some chunk still belongs to s (lock held). */
static bool owns(const gfs_pfstream *s)
{
	for (size_t i = 0; i < s->p->nch; i++)
		if (s->p->ch[i].s == s)
			return true;
	return false;
}

void gfs_pfstream_close(gfs_pfstream *s)
{
	gfs_prefetch *p;

	if (!s)
		return;
	p = s->p;
	pthread_mutex_lock(&p->mu);
	drop_below(s, UINT64_MAX);
	/* a reader may still be between its reply and its put or timed */
	while (owns(s) || s->users > 0)
		pthread_cond_wait(&p->done, &p->mu);
	if (s->lprev)
		s->lprev->lnext = s->lnext;
	else
		p->streams = s->lnext;
	if (s->lnext)
		s->lnext->lprev = s->lprev;
	pthread_mutex_unlock(&p->mu);
	free(s);
}

/* schedule(): queue free chunks for the window from the chunk of off on (lock held). */
static void schedule(gfs_pfstream *s, uint64_t off)
{
	gfs_prefetch *p = s->p;
	const uint64_t room = (uint64_t)p->nch * GFS_PF_CHUNK;
	const uint64_t end = s->size - floor_chunk(off) > room ? floor_chunk(off) + room : s->size;
	size_t i = 0;
	bool queued = false;

	if (s->ahead < floor_chunk(off))
		s->ahead = floor_chunk(off);
	while (s->ahead < end) {
		chunk *c;

		while (i < p->nch && p->ch[i].st != CH_FREE)
			i++;
		if (i == p->nch)
			break;
		c = &p->ch[i];
		c->s = s;
		c->off = s->ahead;
		c->len = s->size - s->ahead < GFS_PF_CHUNK ? (size_t)(s->size - s->ahead)
							   : GFS_PF_CHUNK;
		c->st = CH_QUEUED;
		c->qnext = NULL;
		if (p->qtail)
			p->qtail->qnext = c;
		else
			p->qhead = c;
		p->qtail = c;
		s->ahead += c->len;
		queued = true;
	}
	if (queued)
		pthread_cond_broadcast(&p->work);
}

/*
 * ready_at(): the live chunk of s holding byte off once it is filled, or
 * NULL if there is none or its fill failed (dropped then) (lock held).
 */
static chunk *ready_at(gfs_pfstream *s, uint64_t off)
{
	gfs_prefetch *p = s->p;
	chunk *c = NULL;
	uint64_t coff;

	for (size_t i = 0; i < p->nch && !c; i++)
		if (p->ch[i].s == s && !p->ch[i].stale && p->ch[i].off <= off &&
		    off - p->ch[i].off < p->ch[i].len)
			c = &p->ch[i];
	if (!c)
		return NULL;
	coff = c->off;
	while ((c->st == CH_QUEUED || c->st == CH_FILLING) && !c->stale && c->s == s &&
	       c->off == coff)
		pthread_cond_wait(&p->done, &p->mu);
	if (c->s != s || c->off != coff || c->stale)
		return NULL; /* dropped meanwhile by another read of the stream */
	if (c->st != CH_READY) {
		drop(p, c);
		return NULL;
	}
	return c;
}

/* end_use(): a get ended by its put or timed (lock held). */
static void end_use(gfs_pfstream *s)
{
	assert(s->users > 0);
	if (--s->users == 0)
		pthread_cond_broadcast(&s->p->done);
}

/* unpin(): a hit no longer holds c (lock held). */
static void unpin(gfs_prefetch *p, chunk *c)
{
	assert(c->pins > 0);
	if (--c->pins == 0 && c->stale)
		release(p, c);
}

bool gfs_pfstream_get(gfs_pfstream *s, uint64_t off, size_t len, uint8_t *buf,
		      gfs_pfhit *hit)
{
	gfs_prefetch *p = s->p;
	uint64_t end;
	chunk *c1, *c2 = NULL;
	size_t n1;

	assert(len > 0);
	pthread_mutex_lock(&p->mu);
	end = off < s->size ? (s->size - off < len ? s->size : off + len) : off;
	s->users++;
	s->seq = off == s->next;
	s->next = end;
	if (s->on && !s->seq) {
		/* not sequential (any more): stop until it is again */
		drop_below(s, UINT64_MAX);
		s->on = false;
		s->slow = 0;
		s->ahead = 0;
	}
	if (!s->on || end == off || len > GFS_PF_CHUNK) {
		pthread_mutex_unlock(&p->mu);
		return false;
	}
	drop_below(s, off);
	schedule(s, off);
	c1 = ready_at(s, off);
	if (!c1) {
		pthread_mutex_unlock(&p->mu);
		return false;
	}
	c1->pins++;
	if (end > c1->off + c1->len) {
		/* len <= GFS_PF_CHUNK: the next chunk holds the rest */
		c2 = ready_at(s, c1->off + c1->len);
		if (!c2) {
			unpin(p, c1);
			pthread_mutex_unlock(&p->mu);
			return false;
		}
		c2->pins++;
	}
	p->st.served += end - off;
	pthread_mutex_unlock(&p->mu);
	hit->len = (size_t)(end - off);
	hit->hold[0] = c1;
	hit->hold[1] = c2;
	if (!c2) {
		hit->mem = c1->buf + (off - c1->off);
		return true;
	}
	n1 = (size_t)(c1->off + c1->len - off);
	memcpy(buf, c1->buf + (off - c1->off), n1);
	memcpy(buf + n1, c2->buf, hit->len - n1);
	hit->mem = buf;
	return true;
}

void gfs_pfstream_put(gfs_pfstream *s, gfs_pfhit *hit)
{
	gfs_prefetch *p = s->p;

	pthread_mutex_lock(&p->mu);
	for (size_t i = 0; i < 2; i++)
		if (hit->hold[i])
			unpin(p, hit->hold[i]);
	hit->hold[0] = hit->hold[1] = NULL;
	end_use(s);
	pthread_mutex_unlock(&p->mu);
}


void gfs_pfstream_timed(gfs_pfstream *s, uint64_t ns)
{
	gfs_prefetch *p = s->p;

	pthread_mutex_lock(&p->mu);
	if (!s->on) {
		s->slow = s->seq && ns >= GFS_PF_SLOW_NS ? s->slow + 1 : 0;
		if (s->slow >= 2 && s->next < s->size && start_workers(p)) {
			p->st.streams++;
			s->on = true;
			s->ahead = floor_chunk(s->next);
		}
	}
	end_use(s);
	pthread_mutex_unlock(&p->mu);
}

gfs_prefetch_stats gfs_prefetch_stats_get(gfs_prefetch *p)
{
	gfs_prefetch_stats st;

	pthread_mutex_lock(&p->mu);
	st = p->st;
	pthread_mutex_unlock(&p->mu);
	return st;
}
