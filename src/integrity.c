/*
 * gatherfs — source integrity: CRC-32 checks of the records of a layout, in
 * one parallel pass (see integrity.h).
 */
#include "config.h"

#include <assert.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>
#include <zstd.h>

#include "gatherfs/integrity.h"

enum {
	READ_BUF = 1 << 20,     /* bytes per pread of a FILE record */
	CHUNK = 16 << 20,       /* unit of work: a FILE record is cut into chunks */
	MAX_THREADS = 8,
	ZSTD_IN = 1 << 17,
	ZSTD_OUT = 1 << 20,
	ZSTD_WINDOW_LOG_MAX = 27, /* as the byte server */
	ZSTD_FHD = 4,           /* offset of the frame header descriptor */
	ZSTD_FHD_CHECKSUM = 1 << 2,
};

/* One unit of work: a chunk of a FILE record, or a whole ZSTD record. */
typedef struct chk_item {
	uint32_t rec;
	uint64_t off; /* FILE: chunk [off, off + len) of the record's bytes */
	uint64_t len;
	uint32_t crc;
	bool corrupt;  /* ZSTD: the frame does not decode */
	bool checksum; /* ZSTD: the frame carries a content checksum */
} chk_item;

typedef struct chk_job {
	const gfs_layout *l;
	const gfs_srcset *s;
	chk_item *items;
	size_t nitems;
	atomic_size_t next;
	_Atomic int err;  /* first error, GFS_OK if none */
	char msg[512];    /* its message */
} chk_job;

static void job_fail(chk_job *job, gfs_err err)
{
	int none = GFS_OK;

	if (atomic_compare_exchange_strong(&job->err, &none, (int)err))
		snprintf(job->msg, sizeof(job->msg), "%s", gfs_errmsg());
}

/* check_file(): CRC-32 of a chunk of a FILE record. */
static gfs_err check_file(const chk_job *job, chk_item *it, uint8_t *buf)
{
	const gfs_record *r = &job->l->records[it->rec];
	const char *path = job->l->sources[r->src].abspath;
	const int fd = gfs_srcset_fd(job->s, r->src);
	uLong crc = crc32(0, Z_NULL, 0);
	uint64_t done = 0;

	while (done < it->len) {
		const size_t n = it->len - done < READ_BUF ? (size_t)(it->len - done) : READ_BUF;
		const gfs_err err = gfs_pread_full(fd, buf, n, r->off + it->off + done, path);

		if (err)
			return err;
		crc = crc32(crc, buf, (uInt)n);
		done += n;
	}
	it->crc = (uint32_t)crc;
	return gfs_srcset_check(job->l, job->s, r->src);
}

/*
 * check_zstd(): decompress the whole frame of a ZSTD record, computing the
 * CRC-32 of the record's bytes in it.  A frame that does not decode to
 * frame_size bytes in exactly frame_len bytes is corrupt.
 */
static gfs_err check_zstd(const chk_job *job, chk_item *it, ZSTD_DCtx *d, uint8_t *in,
			  uint8_t *out)
{
	const gfs_record *r = &job->l->records[it->rec];
	const char *path = job->l->sources[r->src].abspath;
	const int fd = gfs_srcset_fd(job->s, r->src);
	const uint64_t rend = r->off + r->len;
	uLong crc = crc32(0, Z_NULL, 0);
	uint64_t consumed = 0, produced = 0;
	bool ended = false;

	(void)ZSTD_DCtx_reset(d, ZSTD_reset_session_only);
	while (!ended && consumed < r->frame_len && !it->corrupt) {
		const uint64_t left = r->frame_len - consumed;
		const size_t n = left < ZSTD_IN ? (size_t)left : ZSTD_IN;
		ZSTD_inBuffer ib = { in, n, 0 };
		const gfs_err err = gfs_pread_full(fd, in, n, r->frame_off + consumed, path);

		if (err)
			return err;
		if (consumed == 0 && n > ZSTD_FHD)
			it->checksum = (in[ZSTD_FHD] & ZSTD_FHD_CHECKSUM) != 0;
		while (!ended) {
			ZSTD_outBuffer ob = { out, ZSTD_OUT, 0 };
			const size_t ret = ZSTD_decompressStream(d, &ob, &ib);
			uint64_t a, b;

			if (ZSTD_isError(ret) || produced + ob.pos > r->frame_size) {
				it->corrupt = true;
				break;
			}
			a = produced > r->off ? produced : r->off;
			b = produced + ob.pos < rend ? produced + ob.pos : rend;
			if (a < b)
				crc = crc32(crc, out + (a - produced), (uInt)(b - a));
			produced += ob.pos;
			ended = ret == 0;
			if (ib.pos == ib.size && ob.pos < ob.size)
				break; /* needs more input */
		}
		consumed += ib.pos;
	}
	if (!ended || consumed != r->frame_len || produced != r->frame_size)
		it->corrupt = true;
	it->crc = (uint32_t)crc;
	return gfs_srcset_check(job->l, job->s, r->src);
}

static void *chk_worker(void *arg)
{
	chk_job *job = arg;
	uint8_t *buf = malloc(READ_BUF);
	uint8_t *zin = malloc(ZSTD_IN);
	uint8_t *zout = malloc(ZSTD_OUT);
	ZSTD_DCtx *d = ZSTD_createDCtx();

	if (!buf || !zin || !zout || !d) {
		job_fail(job, gfs_fail(GFS_ERR_NOMEM, "out of memory"));
		goto out;
	}
	(void)ZSTD_DCtx_setParameter(d, ZSTD_d_windowLogMax, ZSTD_WINDOW_LOG_MAX);
	while (atomic_load(&job->err) == GFS_OK) {
		const size_t i = atomic_fetch_add(&job->next, 1);
		chk_item *it;
		gfs_err err;

		if (i >= job->nitems)
			break;
		it = &job->items[i];
		err = job->l->records[it->rec].kind == GFS_PIECE_ZSTD
			      ? check_zstd(job, it, d, zin, zout)
			      : check_file(job, it, buf);
		if (err)
			job_fail(job, err);
	}
out:
	ZSTD_freeDCtx(d);
	free(zout);
	free(zin);
	free(buf);
	return NULL;
}

/* run_job(): run job on nthreads threads, this one included. */
static void run_job(chk_job *job, unsigned nthreads)
{
	pthread_t tids[MAX_THREADS];
	unsigned started = 0;

	if (nthreads > job->nitems)
		nthreads = (unsigned)job->nitems;
	while (started + 1 < nthreads &&
	       pthread_create(&tids[started], NULL, chk_worker, job) == 0)
		started++;
	chk_worker(job);
	while (started > 0)
		pthread_join(tids[--started], NULL);
}

/* nchunks(): work items of record r. */
static uint64_t nchunks(const gfs_record *r)
{
	return r->kind == GFS_PIECE_ZSTD || r->len == 0 ? 1 : (r->len - 1) / CHUNK + 1;
}

/*
 * check_claimed(): check records claimed[0..n), which the caller holds
 * BUSY, and settle every one of them (UNCHECKED on error).
 */
static gfs_err check_claimed(const gfs_layout *l, const gfs_srcset *s, const uint32_t *claimed,
			     size_t n, unsigned nthreads, gfs_integrity_stats *st)
{
	chk_job job = { .l = l, .s = s };
	uint64_t cap = 0;
	gfs_err err;

	for (size_t k = 0; k < n; k++)
		cap += nchunks(&l->records[claimed[k]]);
	job.items = cap && cap <= SIZE_MAX ? gfs_reallocarray(NULL, (size_t)cap, sizeof(chk_item))
					   : NULL;
	if (n && !job.items) {
		for (size_t k = 0; k < n; k++)
			gfs_srcset_rec_settle(s, claimed[k], GFS_REC_UNCHECKED);
		return gfs_fail(GFS_ERR_NOMEM, "out of memory");
	}
	for (size_t k = 0; k < n; k++) {
		const gfs_record *r = &l->records[claimed[k]];
		uint64_t off = 0;

		do {
			const uint64_t len = r->kind == GFS_PIECE_ZSTD || r->len - off < CHUNK
						     ? r->len - off
						     : CHUNK;

			job.items[job.nitems++] = (chk_item){ .rec = claimed[k], .off = off, .len = len };
			off += len;
		} while (off < r->len);
	}
	atomic_init(&job.next, 0);
	atomic_init(&job.err, GFS_OK);
	if (job.nitems)
		run_job(&job, nthreads);
	err = (gfs_err)atomic_load(&job.err);
	for (size_t i = 0; i < job.nitems;) {
		const uint32_t rec = job.items[i].rec;
		const gfs_record *r = &l->records[rec];
		uLong crc = job.items[i].crc;
		bool corrupt = job.items[i].corrupt;

		if (r->kind == GFS_PIECE_ZSTD) {
			st->frames++;
			st->frames_sum += job.items[i].checksum;
			st->bytes += r->frame_len;
		} else {
			st->bytes += r->len;
		}
		for (i++; i < job.nitems && job.items[i].rec == rec; i++)
			crc = crc32_combine(crc, job.items[i].crc, (z_off_t)job.items[i].len);
		st->checked += !err;
		gfs_srcset_rec_settle(s, rec,
				      err ? GFS_REC_UNCHECKED
				      : corrupt || (uint32_t)crc != r->crc32 ? GFS_REC_BAD
									     : GFS_REC_OK);
	}
	free(job.items);
	return err ? gfs_fail(err, "%s", job.msg) : GFS_OK;
}

gfs_err gfs_integrity_check(const gfs_layout *l, const gfs_srcset *s, const uint32_t *recs,
			    size_t n, unsigned nthreads, size_t *nbad, gfs_integrity_stats *st)
{
	gfs_integrity_stats dummy = { 0 };
	uint32_t *claimed;
	size_t nclaimed = 0, bad = 0;
	gfs_err err;

	if (!st)
		st = &dummy;
	if (!recs)
		n = l->nrecords;
	if (nthreads == 0) {
		const long ncpu = sysconf(_SC_NPROCESSORS_ONLN);

		nthreads = ncpu < 1 ? 1 : ncpu > MAX_THREADS ? MAX_THREADS : (unsigned)ncpu;
	}
	if (nthreads > MAX_THREADS)
		nthreads = MAX_THREADS;
	claimed = gfs_calloc(n ? n : 1, sizeof(*claimed));
	if (!claimed)
		return gfs_fail(GFS_ERR_NOMEM, "out of memory");
	/* Claim what nobody checks yet (a duplicate is BUSY by then: skipped). */
	for (size_t k = 0; k < n; k++) {
		const uint32_t r = recs ? recs[k] : (uint32_t)k;

		assert(r < l->nrecords);
		if (gfs_srcset_rec_state(s, r) == GFS_REC_UNCHECKED && gfs_srcset_rec_claim(s, r))
			claimed[nclaimed++] = r;
	}
	err = check_claimed(l, s, claimed, nclaimed, nthreads, st);
	free(claimed);
	/* Records other threads were checking meanwhile, or left unchecked. */
	for (size_t k = 0; !err && k < n; k++) {
		const uint32_t r = recs ? recs[k] : (uint32_t)k;
		gfs_rec_state state;

		while (!err && (state = gfs_srcset_rec_state(s, r)) != GFS_REC_OK &&
		       state != GFS_REC_BAD)
			if (gfs_srcset_rec_claim(s, r))
				err = check_claimed(l, s, &r, 1, 1, st);
		bad += gfs_srcset_rec_state(s, r) == GFS_REC_BAD;
	}
	if (nbad)
		*nbad = bad;
	return err;
}

gfs_err gfs_integrity_require(const gfs_layout *l, const gfs_srcset *s, const uint32_t *recs,
			      size_t n, unsigned nthreads)
{
	size_t nbad = 0;
	const gfs_err err = gfs_integrity_check(l, s, recs, n, nthreads, &nbad, NULL);
	char desc[1024];

	if (err || nbad == 0)
		return err;
	if (!recs)
		n = l->nrecords;
	for (size_t k = 0; k < n; k++) {
		const uint32_t r = recs ? recs[k] : (uint32_t)k;

		if (gfs_srcset_rec_state(s, r) == GFS_REC_BAD)
			return gfs_fail(GFS_ERR_IO, "%s does not match its stored CRC-32%s",
					gfs_record_describe(l, r, 8, desc, sizeof(desc)),
					nbad > 1 ? " (and more records are corrupt)" : "");
	}
	assert(!"a BAD record went missing");
	return GFS_ERR_IO;
}
