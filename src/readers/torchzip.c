/* SPDX-License-Identifier: Apache-2.0 */
/*
 * gatherfs — read torch.save zip archives without reading their payloads.
 *
 * Opening an archive reads the end of central directory (the last 22
 * bytes, or the last 64 KiB if the archive has a comment), its ZIP64
 * locator and record, the central directory in one pread, and the fixed
 * part plus the name of each record's local header, nothing else.  With
 * gfs_tzip_limits.windows, the pages holding its first and its last 2 KiB
 * are read first, in one pread each (one in all for a small archive), and
 * every read that falls inside them is served from them: a torch.save of
 * one tensor (a DCP chunk's archive) opens in two preads instead of about
 * ten, at the price of the payload bytes those pages hold.  Every
 * offset is relative to the archive's base and every range is checked
 * against [base, base + len) with overflow-safe arithmetic before use.
 * Sizes come from the central directory only: torch 2.x writes zero sizes
 * and CRCs in local headers and follows each record with a data descriptor.
 */
#include "config.h"

#include <assert.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>

#include "gatherfs/readers/torchzip.h"

#define ZIP_LOCAL_SIG 0x04034b50u
#define ZIP_CENTRAL_SIG 0x02014b50u
#define ZIP_EOCD_SIG 0x06054b50u
#define ZIP64_EOCD_SIG 0x06064b50u
#define ZIP64_LOCATOR_SIG 0x07064b50u

#define ZIP_U16_MAX 0xFFFFu
#define ZIP_U32_MAX 0xFFFFFFFFu

#define DEFAULT_MAX_RECORDS ((uint64_t)1 << 22)
#define DEFAULT_MAX_CD_BYTES ((uint64_t)1 << 30)

enum {
	LOCAL_HDR_SIZE = 30,
	CENTRAL_HDR_SIZE = 46,
	EOCD_SIZE = 22,
	EOCD_MAX_COMMENT = 65535,
	ZIP64_LOCATOR_SIZE = 20,
	ZIP64_EOCD_SIZE = 56,
	/* "size of zip64 end of central directory record" excludes 12 bytes */
	ZIP64_EOCD_MIN_SIZE_FIELD = ZIP64_EOCD_SIZE - 12,
	ZIP64_EXTRA_ID = 0x0001,
	EXTRA_HDR_SIZE = 4,
	FLAG_ENCRYPTED = 0x0001,
	FLAG_STRONG_ENCRYPTION = 0x0040,
	METHOD_STORED = 0,
	/* Longest record name accepted (torch itself uses 512-byte buffers). */
	MAX_NAME_LEN = 4096,
	/* Longest name shown in an error message. */
	SHOW_NAME_MAX = 160,
	/* gfs_tzip_limits.windows: bytes read at least at each end of an
	 * archive when it is opened, in whole pages of PAGE bytes */
	WIN_MIN = 2048,
	PAGE = 4096,
};

static const char DATA_PKL[] = "/data.pkl";
#define DATA_PKL_LEN (sizeof(DATA_PKL) - 1)

struct gfs_tzip {
	int fd;
	uint64_t base;
	uint64_t len;
	char *label;
	char *prefix; /* without the trailing '/' */
	size_t prefix_len;
	size_t count;
	gfs_tzip_record *recs;           /* central directory order */
	const gfs_tzip_record **by_name; /* sorted by name, for lookups */
	char *names;                     /* every name, NUL-terminated */
	uint8_t *win;     /* the archive's first and last bytes (see above) */
	size_t head_len;  /* win[0, head_len): bytes [0, head_len) */
	size_t tail_len;  /* win[head_len, +tail_len): the last tail_len bytes */
};

/* Where the central directory is, from the (ZIP64) end records. */
typedef struct zip_end {
	uint64_t count;   /* number of central directory entries */
	uint64_t cd_off;  /* relative to base */
	uint64_t cd_size;
	uint64_t end_off; /* first end record: the directory must end before */
} zip_end;

/* One parsed central directory entry; name points into the directory. */
typedef struct cd_entry {
	const uint8_t *name;
	size_t name_len;
	uint16_t method;
	uint32_t crc32;
	uint64_t csize;
	uint64_t usize;
	uint64_t lho; /* local header offset, relative to base */
} cd_entry;

/*
 * show_name(): a printable copy of name for error messages: control bytes
 * become '?', long names are cut with "...".  @return buf.
 */
static const char *show_name(char buf[SHOW_NAME_MAX], const void *name,
			     size_t len)
{
	const uint8_t *const s = name;
	const size_t keep = SHOW_NAME_MAX - 4;
	const size_t n = len < keep ? len : keep;

	for (size_t i = 0; i < n; i++)
		buf[i] = (s[i] < 0x20 || s[i] == 0x7f) ? '?' : (char)s[i];
	if (n < len)
		memcpy(buf + n, "...", 4);
	else
		buf[n] = '\0';
	return buf;
}

/*
 * in_windows(): the n bytes at archive-relative offset rel (already
 * checked) lie in z->win; *at: where.
 */
static bool in_windows(const gfs_tzip *z, size_t n, uint64_t rel, const uint8_t **at)
{
	const uint64_t tail = z->len - z->tail_len;

	assert(rel <= z->len && n <= z->len - rel);
	if (z->head_len && rel + n <= z->head_len) {
		*at = z->win + rel;
		return true;
	}
	if (z->tail_len && rel >= tail) {
		*at = z->win + z->head_len + (rel - tail);
		return true;
	}
	return false;
}

/* zread(): read n bytes at archive-relative offset rel (already checked). */
static gfs_err zread(const gfs_tzip *z, void *buf, size_t n, uint64_t rel)
{
	const uint8_t *at;

	if (in_windows(z, n, rel, &at)) {
		memcpy(buf, at, n);
		return GFS_OK;
	}
	return gfs_pread_full(z->fd, buf, n, z->base + rel, z->label);
}

/*
 * read_windows(): read the archive's first and last bytes into z->win: the
 * pages (of PAGE bytes, absolute alignment) holding its first and its last
 * WIN_MIN bytes, all of it when those meet.
 */
static gfs_err read_windows(gfs_tzip *z)
{
	const uint64_t end = z->base + z->len;
	uint64_t head_end = (z->base + WIN_MIN + PAGE - 1) / PAGE * PAGE;
	uint64_t tail = end > WIN_MIN ? (end - WIN_MIN) / PAGE * PAGE : 0;
	gfs_err err;

	if (head_end >= tail || head_end >= end) {
		head_end = end;
		tail = end;
	}
	z->win = malloc((size_t)(head_end - z->base + end - tail) + 1);
	if (!z->win)
		return gfs_fail(GFS_ERR_NOMEM, "%s: out of memory", z->label);
	err = gfs_pread_full(z->fd, z->win, (size_t)(head_end - z->base), z->base, z->label);
	if (!err && tail < end)
		err = gfs_pread_full(z->fd, z->win + (head_end - z->base), (size_t)(end - tail),
				     tail, z->label);
	if (err)
		return err;
	z->head_len = (size_t)(head_end - z->base);
	z->tail_len = (size_t)(end - tail);
	return GFS_OK;
}

/*
 * find_eocd(): locate the classic end of central directory record and copy
 * it to rec.  Torch writes no comment, so the last 22 bytes are tried first;
 * otherwise the last 22 + 65535 bytes are searched backwards for the last
 * signature whose comment ends the archive, else the last one whose
 * comment fits in it (trailing bytes after the archive are tolerated).
 */
static gfs_err find_eocd(const gfs_tzip *z, uint64_t *pos,
			 uint8_t rec[EOCD_SIZE])
{
	uint8_t *win;
	size_t wlen;
	uint64_t wstart;
	bool found = false;
	gfs_err err;

	if (z->len < EOCD_SIZE)
		return gfs_fail(GFS_ERR_FORMAT,
				"%s: %llu bytes is too small for a zip archive",
				z->label, (unsigned long long)z->len);
	err = zread(z, rec, EOCD_SIZE, z->len - EOCD_SIZE);
	if (err)
		return err;
	if (gfs_le32(rec) == ZIP_EOCD_SIG && gfs_le16(rec + 20) == 0) {
		*pos = z->len - EOCD_SIZE;
		return GFS_OK;
	}
	wlen = z->len < EOCD_SIZE + EOCD_MAX_COMMENT ?
		       (size_t)z->len :
		       (size_t)(EOCD_SIZE + EOCD_MAX_COMMENT);
	wstart = z->len - wlen;
	win = malloc(wlen);
	if (!win)
		return gfs_fail(GFS_ERR_NOMEM, "%s: out of memory", z->label);
	err = zread(z, win, wlen, wstart);
	if (err) {
		free(win);
		return err;
	}
	for (size_t i = wlen - EOCD_SIZE + 1; i-- > 0;) {
		const size_t room = wlen - EOCD_SIZE - i;
		const uint16_t comment_len = gfs_le16(win + i + 20);

		if (gfs_le32(win + i) != ZIP_EOCD_SIG || comment_len > room)
			continue;
		/* A record whose comment ends the archive beats one that
		 * merely fits (a signature inside the comment, say). */
		if (!found || comment_len == room) {
			memcpy(rec, win + i, EOCD_SIZE);
			*pos = wstart + i;
			found = true;
		}
		if (comment_len == room)
			break;
	}
	free(win);
	if (found)
		return GFS_OK;
	return gfs_fail(GFS_ERR_FORMAT,
			"%s: not a zip archive (no end of central directory record)",
			z->label);
}

/* read_end64(): the ZIP64 end record named by the locator at loc_pos. */
static gfs_err read_end64(const gfs_tzip *z, const uint8_t *loc,
			  uint64_t loc_pos, zip_end *end)
{
	uint8_t rec[ZIP64_EOCD_SIZE];
	const uint64_t off = gfs_le64(loc + 8);
	uint64_t rec_end;
	gfs_err err;

	if (gfs_le32(loc + 4) != 0 || gfs_le32(loc + 16) > 1)
		return gfs_fail(GFS_ERR_UNSUPPORTED,
				"%s: multi-disk zip archives are not supported",
				z->label);
	if (off > loc_pos || loc_pos - off < ZIP64_EOCD_SIZE)
		return gfs_fail(GFS_ERR_FORMAT,
				"%s: ZIP64 end of central directory offset %llu does not fit before its locator at %llu",
				z->label, (unsigned long long)off,
				(unsigned long long)loc_pos);
	err = zread(z, rec, sizeof(rec), off);
	if (err)
		return err;
	if (gfs_le32(rec) != ZIP64_EOCD_SIG)
		return gfs_fail(GFS_ERR_FORMAT,
				"%s: no ZIP64 end of central directory signature at offset %llu",
				z->label, (unsigned long long)off);
	if (gfs_le64(rec + 4) < ZIP64_EOCD_MIN_SIZE_FIELD ||
	    !gfs_add_u64(off + 12, gfs_le64(rec + 4), &rec_end) ||
	    rec_end > loc_pos)
		return gfs_fail(GFS_ERR_FORMAT,
				"%s: ZIP64 end of central directory record has a bad size %llu",
				z->label, (unsigned long long)gfs_le64(rec + 4));
	if (gfs_le32(rec + 16) != 0 || gfs_le32(rec + 20) != 0 ||
	    gfs_le64(rec + 24) != gfs_le64(rec + 32))
		return gfs_fail(GFS_ERR_UNSUPPORTED,
				"%s: multi-disk zip archives are not supported",
				z->label);
	end->count = gfs_le64(rec + 32);
	end->cd_size = gfs_le64(rec + 40);
	end->cd_off = gfs_le64(rec + 48);
	end->end_off = off;
	return GFS_OK;
}

/*
 * read_end(): find the central directory from the end records.  The ZIP64
 * record is used whenever its locator precedes the classic record (torch
 * always writes both), and required when a classic field is saturated.
 */
static gfs_err read_end(const gfs_tzip *z, zip_end *end)
{
	uint8_t eocd[EOCD_SIZE];
	uint8_t loc[ZIP64_LOCATOR_SIZE];
	uint64_t pos = 0;
	gfs_err err;

	err = find_eocd(z, &pos, eocd);
	if (err)
		return err;
	const uint16_t disk = gfs_le16(eocd + 4);
	const uint16_t cd_disk = gfs_le16(eocd + 6);
	const uint16_t n_disk = gfs_le16(eocd + 8);
	const uint16_t n_total = gfs_le16(eocd + 10);
	const uint32_t cd_size = gfs_le32(eocd + 12);
	const uint32_t cd_off = gfs_le32(eocd + 16);
	const bool need64 = disk == ZIP_U16_MAX || cd_disk == ZIP_U16_MAX ||
			    n_disk == ZIP_U16_MAX || n_total == ZIP_U16_MAX ||
			    cd_size == ZIP_U32_MAX || cd_off == ZIP_U32_MAX;

	if (pos >= ZIP64_LOCATOR_SIZE) {
		err = zread(z, loc, sizeof(loc), pos - ZIP64_LOCATOR_SIZE);
		if (err)
			return err;
		if (gfs_le32(loc) == ZIP64_LOCATOR_SIG)
			return read_end64(z, loc, pos - ZIP64_LOCATOR_SIZE, end);
	}
	if (need64)
		return gfs_fail(GFS_ERR_FORMAT,
				"%s: zip end of central directory needs ZIP64 but there is no ZIP64 locator",
				z->label);
	if (disk != 0 || cd_disk != 0 || n_disk != n_total)
		return gfs_fail(GFS_ERR_UNSUPPORTED,
				"%s: multi-disk zip archives are not supported",
				z->label);
	end->count = n_total;
	end->cd_size = cd_size;
	end->cd_off = cd_off;
	end->end_off = pos;
	return GFS_OK;
}

/*
 * check_end(): the central directory lies before the end records, its entry
 * count can fit in its size, and both are within the limits.
 */
static gfs_err check_end(const gfs_tzip *z, const zip_end *end,
			 const gfs_tzip_limits *lim)
{
	const uint64_t max_records =
		lim && lim->max_records ? lim->max_records : DEFAULT_MAX_RECORDS;
	const uint64_t max_cd_bytes = lim && lim->max_cd_bytes ?
					      lim->max_cd_bytes :
					      DEFAULT_MAX_CD_BYTES;
	uint64_t cd_end, min_size;

	if (!gfs_add_u64(end->cd_off, end->cd_size, &cd_end) ||
	    cd_end > end->end_off)
		return gfs_fail(GFS_ERR_FORMAT,
				"%s: zip central directory (%llu bytes at offset %llu) runs past the end records at %llu",
				z->label, (unsigned long long)end->cd_size,
				(unsigned long long)end->cd_off,
				(unsigned long long)end->end_off);
	if (!gfs_mul_u64(end->count, CENTRAL_HDR_SIZE, &min_size) ||
	    min_size > end->cd_size)
		return gfs_fail(GFS_ERR_FORMAT,
				"%s: zip entry count %llu cannot fit in a central directory of %llu bytes",
				z->label, (unsigned long long)end->count,
				(unsigned long long)end->cd_size);
	if (end->count > max_records)
		return gfs_fail(GFS_ERR_LIMIT,
				"%s: zip archive has %llu records, more than the limit of %llu",
				z->label, (unsigned long long)end->count,
				(unsigned long long)max_records);
	if (end->cd_size > max_cd_bytes || end->cd_size > SIZE_MAX)
		return gfs_fail(GFS_ERR_LIMIT,
				"%s: zip central directory is %llu bytes, more than the limit of %llu",
				z->label, (unsigned long long)end->cd_size,
				(unsigned long long)max_cd_bytes);
	if (end->count == 0)
		return gfs_fail(GFS_ERR_FORMAT,
				"%s: zip archive has no records (no <prefix>%s)",
				z->label, DATA_PKL);
	return GFS_OK;
}

/*
 * parse_zip64_extra(): replace the saturated classic fields of an entry
 * with the values of its ZIP64 extended information extra field, which
 * holds, in this order, only the saturated ones of: uncompressed size,
 * compressed size, local header offset, disk number.
 */
static gfs_err parse_zip64_extra(const gfs_tzip *z, size_t idx, const uint8_t *x,
				 size_t xlen, cd_entry *e, uint32_t *disk)
{
	char name[SHOW_NAME_MAX];

	const bool want_u = e->usize == ZIP_U32_MAX;
	const bool want_c = e->csize == ZIP_U32_MAX;
	const bool want_o = e->lho == ZIP_U32_MAX;
	const bool want_d = *disk == ZIP_U16_MAX;
	const size_t need = 8 * ((size_t)want_u + want_c + want_o) + 4 * want_d;
	size_t i = 0;

	if (need == 0)
		return GFS_OK;
	while (xlen - i >= EXTRA_HDR_SIZE) {
		const uint16_t id = gfs_le16(x + i);
		const uint16_t sz = gfs_le16(x + i + 2);
		const uint8_t *f = x + i + EXTRA_HDR_SIZE;

		if (sz > xlen - i - EXTRA_HDR_SIZE)
			return gfs_fail(GFS_ERR_FORMAT,
					"%s: zip central directory entry %zu (%s): extra field runs past its end",
					z->label, idx, show_name(name, e->name, e->name_len));
		if (id != ZIP64_EXTRA_ID) {
			i += EXTRA_HDR_SIZE + (size_t)sz;
			continue;
		}
		if (sz < need)
			return gfs_fail(GFS_ERR_FORMAT,
					"%s: zip central directory entry %zu (%s): ZIP64 extra field is %u bytes, needs %zu",
					z->label, idx, show_name(name, e->name, e->name_len), (unsigned)sz,
					need);
		if (want_u) {
			e->usize = gfs_le64(f);
			f += 8;
		}
		if (want_c) {
			e->csize = gfs_le64(f);
			f += 8;
		}
		if (want_o) {
			e->lho = gfs_le64(f);
			f += 8;
		}
		if (want_d)
			*disk = gfs_le32(f);
		return GFS_OK;
	}
	return gfs_fail(GFS_ERR_FORMAT,
			"%s: zip central directory entry %zu (%s): saturated size or offset but no ZIP64 extra field",
			z->label, idx, show_name(name, e->name, e->name_len));
}

/*
 * parse_cd_entry(): parse and check the entry at *pos of the central
 * directory cd (cd_size bytes); advance *pos past it.
 */
static gfs_err parse_cd_entry(const gfs_tzip *z, const uint8_t *cd,
			      size_t cd_size, size_t *pos, size_t idx,
			      cd_entry *e)
{
	char shown[SHOW_NAME_MAX];
	const uint8_t *const p = cd + *pos;
	const size_t rest = cd_size - *pos;
	gfs_err err;

	assert(*pos <= cd_size);
	if (rest < CENTRAL_HDR_SIZE)
		return gfs_fail(GFS_ERR_FORMAT,
				"%s: zip central directory entry %zu is truncated",
				z->label, idx);
	if (gfs_le32(p) != ZIP_CENTRAL_SIG)
		return gfs_fail(GFS_ERR_FORMAT,
				"%s: zip central directory entry %zu has a bad signature",
				z->label, idx);
	const uint16_t flags = gfs_le16(p + 8);
	const size_t name_len = gfs_le16(p + 28);
	const size_t extra_len = gfs_le16(p + 30);
	const size_t total = CENTRAL_HDR_SIZE + name_len + extra_len +
			     gfs_le16(p + 32);
	uint32_t disk = gfs_le16(p + 34);

	if (total > rest)
		return gfs_fail(GFS_ERR_FORMAT,
				"%s: zip central directory entry %zu runs past the end of the central directory",
				z->label, idx);
	if (name_len == 0)
		return gfs_fail(GFS_ERR_FORMAT,
				"%s: zip central directory entry %zu has an empty name",
				z->label, idx);
	if (name_len > MAX_NAME_LEN)
		return gfs_fail(GFS_ERR_LIMIT,
				"%s: zip central directory entry %zu has a %zu-byte name, more than the limit of %d",
				z->label, idx, name_len, MAX_NAME_LEN);
	e->name = p + CENTRAL_HDR_SIZE;
	e->name_len = name_len;
	if (memchr(e->name, '\0', name_len))
		return gfs_fail(GFS_ERR_FORMAT,
				"%s: zip central directory entry %zu (%s): name contains a NUL byte",
				z->label, idx, show_name(shown, e->name, name_len));
	if (flags & (FLAG_ENCRYPTED | FLAG_STRONG_ENCRYPTION))
		return gfs_fail(GFS_ERR_UNSUPPORTED,
				"%s: zip record %s is encrypted", z->label, show_name(shown, e->name, name_len));
	e->method = gfs_le16(p + 10);
	e->crc32 = gfs_le32(p + 16);
	e->csize = gfs_le32(p + 20);
	e->usize = gfs_le32(p + 24);
	e->lho = gfs_le32(p + 42);
	err = parse_zip64_extra(z, idx, e->name + name_len, extra_len, e, &disk);
	if (err)
		return err;
	if (disk != 0)
		return gfs_fail(GFS_ERR_UNSUPPORTED,
				"%s: zip record %s is on disk %lu (multi-disk archives are not supported)",
				z->label, show_name(shown, e->name, name_len), (unsigned long)disk);
	if (e->method == METHOD_STORED && e->csize != e->usize)
		return gfs_fail(GFS_ERR_FORMAT,
				"%s: zip record %s is STORED but its compressed size %llu differs from its size %llu",
				z->label, show_name(shown, e->name, name_len), (unsigned long long)e->csize,
				(unsigned long long)e->usize);
	if (e->lho >= z->len || z->len - e->lho < LOCAL_HDR_SIZE)
		return gfs_fail(GFS_ERR_FORMAT,
				"%s: zip central directory entry %zu (%s) points past the end of the archive",
				z->label, idx, show_name(shown, e->name, name_len));
	*pos += total;
	return GFS_OK;
}

/*
 * check_local(): check the local header of entry e (record rec, whose name
 * is already set) and compute where its data starts.  hdr holds the
 * header's fixed part and name when they lie inside the archive; it is not
 * read when they do not (refused).
 */
static gfs_err check_local(const gfs_tzip *z, const cd_entry *e,
			   gfs_tzip_record *rec, const uint8_t *hdr)
{
	char shown[SHOW_NAME_MAX];
	const size_t n = LOCAL_HDR_SIZE + e->name_len;
	uint64_t rel, end;

	assert(e->name_len <= MAX_NAME_LEN && e->lho < z->len && hdr);
	if (z->len - e->lho < n)
		return gfs_fail(GFS_ERR_FORMAT,
				"%s: zip record %s: local header at offset %llu runs past the end of the archive",
				z->label, show_name(shown, rec->name, e->name_len),
				(unsigned long long)e->lho);
	if (gfs_le32(hdr) != ZIP_LOCAL_SIG)
		return gfs_fail(GFS_ERR_FORMAT,
				"%s: zip record %s: no local header signature at offset %llu",
				z->label, show_name(shown, rec->name, e->name_len),
				(unsigned long long)e->lho);
	if (gfs_le16(hdr + 26) != e->name_len ||
	    memcmp(hdr + LOCAL_HDR_SIZE, e->name, e->name_len) != 0)
		return gfs_fail(GFS_ERR_FORMAT,
				"%s: zip record %s: local header name differs from the central directory",
				z->label, show_name(shown, rec->name, e->name_len));
	if (!gfs_add_u64(e->lho, (uint64_t)n + gfs_le16(hdr + 28), &rel) ||
	    !gfs_add_u64(rel, e->csize, &end) || end > z->len)
		return gfs_fail(GFS_ERR_FORMAT,
				"%s: zip record %s: data (%llu bytes) runs past the end of the archive",
				z->label, show_name(shown, rec->name, e->name_len),
				(unsigned long long)e->csize);
	rec->data_off = z->base + rel;
	return GFS_OK;
}

/* find_prefix(): set z->prefix from the first "<prefix>/data.pkl" record. */
static gfs_err find_prefix(gfs_tzip *z)
{
	for (size_t i = 0; i < z->count; i++) {
		const char *const name = z->recs[i].name;
		const size_t len = strlen(name);

		if (len <= DATA_PKL_LEN ||
		    strcmp(name + len - DATA_PKL_LEN, DATA_PKL) != 0 ||
		    memchr(name, '/', len - DATA_PKL_LEN))
			continue;
		z->prefix = gfs_strndup(name, len - DATA_PKL_LEN);
		if (!z->prefix)
			return gfs_fail(GFS_ERR_NOMEM, "%s: out of memory",
					z->label);
		z->prefix_len = len - DATA_PKL_LEN;
		return GFS_OK;
	}
	return gfs_fail(GFS_ERR_FORMAT,
			"%s: zip archive has no <prefix>%s record (not a torch.save archive)",
			z->label, DATA_PKL);
}

/* check_prefix(): every record is named "<prefix>/...". */
static gfs_err check_prefix(const gfs_tzip *z)
{
	char shown[SHOW_NAME_MAX];
	char shown_prefix[SHOW_NAME_MAX];

	for (size_t i = 0; i < z->count; i++) {
		const char *const name = z->recs[i].name;

		if (strncmp(name, z->prefix, z->prefix_len) != 0 ||
		    name[z->prefix_len] != '/')
			return gfs_fail(GFS_ERR_FORMAT,
					"%s: zip record %s is not under the archive prefix %s/",
					z->label,
					show_name(shown, name, strlen(name)),
					show_name(shown_prefix, z->prefix,
						  z->prefix_len));
	}
	return GFS_OK;
}

static int cmp_rec_name(const void *a, const void *b)
{
	const gfs_tzip_record *const *const ra = a;
	const gfs_tzip_record *const *const rb = b;

	return strcmp((*ra)->name, (*rb)->name);
}

/* sort_names(): fill z->by_name and reject duplicate names. */
static gfs_err sort_names(gfs_tzip *z)
{
	char shown[SHOW_NAME_MAX];

	for (size_t i = 0; i < z->count; i++)
		z->by_name[i] = &z->recs[i];
	qsort(z->by_name, z->count, sizeof(*z->by_name), cmp_rec_name);
	for (size_t i = 1; i < z->count; i++) {
		const char *const name = z->by_name[i]->name;

		if (strcmp(z->by_name[i - 1]->name, name) == 0)
			return gfs_fail(GFS_ERR_FORMAT,
					"%s: zip record %s appears more than once",
					z->label, show_name(shown, name, strlen(name)));
	}
	return GFS_OK;
}

/* local_end(): one past entry e's local header (name included), relative to base. */
static uint64_t local_end(const cd_entry *e)
{
	return e->lho + LOCAL_HDR_SIZE + e->name_len;
}

/*
 * local_group(): the entries [i, *j] whose local headers check_locals()
 * reads together: consecutive entries without data (a ZeRO-3 model states
 * file has one per param) whose headers follow in order, up to LOCAL_BATCH
 * bytes in all; *end: one past the last header.  No data byte of a record
 * is in the group.  A header running past the archive stays alone.
 */
#define LOCAL_BATCH ((size_t)64 * 1024)

static void local_group(const gfs_tzip *z, const cd_entry *ents, size_t count, size_t i,
			size_t *j, uint64_t *end)
{
	const uint64_t start = ents[i].lho;

	*j = i;
	*end = local_end(&ents[i]);
	while (*j + 1 < count && ents[*j].csize == 0 && ents[*j + 1].lho > ents[*j].lho &&
	       local_end(&ents[*j + 1]) <= z->len && *end <= z->len &&
	       (local_end(&ents[*j + 1]) > *end ? local_end(&ents[*j + 1]) : *end) - start <=
		       LOCAL_BATCH) {
		++*j;
		if (local_end(&ents[*j]) > *end)
			*end = local_end(&ents[*j]);
	}
}

/*
 * hint_locals(): ask the kernel to start reading the local headers of
 * entries [i, count) (POSIX_FADV_WILLNEED, ranges less than a page apart
 * asked together), so that check_locals()' preads of a cold archive wait
 * for reads already in flight instead of issuing them one at a time: a
 * cold verl rank file has about 300 headers, one disk read each.  Headers
 * running past the archive are left to check_local() to refuse.  Only a
 * hint: no error.
 */
static void hint_locals(const gfs_tzip *z, const cd_entry *ents, size_t count, size_t i)
{
	const uint8_t *at;
	uint64_t from = 0, to = 0;

	for (; i < count; i++) {
		const uint64_t start = ents[i].lho, end = local_end(&ents[i]);

		if (end > z->len || in_windows(z, (size_t)(end - start), start, &at))
			continue;
		if (to > from && start >= from && start <= to + PAGE) {
			if (end > to)
				to = end;
			continue;
		}
		if (to > from)
			(void)posix_fadvise(z->fd, (off_t)(z->base + from), (off_t)(to - from),
					    POSIX_FADV_WILLNEED);
		from = start;
		to = end;
	}
	if (to > from)
		(void)posix_fadvise(z->fd, (off_t)(z->base + from), (off_t)(to - from),
				    POSIX_FADV_WILLNEED);
}

/*
 * read_group(): the n bytes at archive-relative offset rel (already
 * checked: the local headers of entries [i, ...)) into buf.  Until
 * *hinted, the bytes are first asked of the page cache alone (RWF_NOWAIT):
 * the first that are not there get hint_locals() for entries [i, count)
 * and set *hinted, so a warm archive costs no more system calls than
 * before, a cold one waits on many reads at once.
 */
static gfs_err read_group(const gfs_tzip *z, const cd_entry *ents, size_t count, size_t i,
			  uint8_t *buf, size_t n, uint64_t rel, bool *hinted)
{
	const uint8_t *at;

	if (!*hinted && !in_windows(z, n, rel, &at)) {
		struct iovec v = { .iov_base = buf, .iov_len = n };

		if (preadv2(z->fd, &v, 1, (off_t)(z->base + rel), RWF_NOWAIT) == (ssize_t)n)
			return GFS_OK;
		hint_locals(z, ents, count, i);
		*hinted = true;
	}
	return zread(z, buf, n, rel);
}

/* check_locals(): check_local() for the count entries of the central directory cd. */
static gfs_err check_locals(gfs_tzip *z, const uint8_t *cd, size_t cd_size, size_t count)
{
	cd_entry *ents = gfs_calloc(count ? count : 1, sizeof(*ents));
	uint8_t *win = malloc(LOCAL_BATCH);
	size_t pos = 0;
	bool hinted = false;
	gfs_err err = GFS_OK;

	if (!ents || !win) {
		free(ents);
		free(win);
		return gfs_fail(GFS_ERR_NOMEM, "%s: out of memory", z->label);
	}
	for (size_t i = 0; i < count; i++) {
		err = parse_cd_entry(z, cd, cd_size, &pos, i, &ents[i]);
		assert(err == GFS_OK);
	}
	for (size_t i = 0; !err && i < count;) {
		const uint64_t start = ents[i].lho;
		uint64_t end;
		size_t j;

		local_group(z, ents, count, i, &j, &end);
		if (end > z->len) {
			/* refused by check_local() before it reads win */
			err = check_local(z, &ents[i], &z->recs[i], win);
			assert(err != GFS_OK);
			break;
		}
		assert(end - start <= LOCAL_BATCH);
		err = read_group(z, ents, count, i, win, (size_t)(end - start), start, &hinted);
		for (size_t k = i; !err && k <= j; k++)
			err = check_local(z, &ents[k], &z->recs[k], win + (ents[k].lho - start));
		i = j + 1;
	}
	free(ents);
	free(win);
	return err;
}

/*
 * load_records(): parse the count entries of the central directory cd
 * into z->recs (two passes: check and measure, then fill), then check the
 * prefix, names and local headers.
 */
static gfs_err load_records(gfs_tzip *z, const uint8_t *cd, size_t cd_size,
			    size_t count)
{
	cd_entry e;
	size_t pos = 0;
	size_t names_size = 0;
	char *next;
	gfs_err err;

	for (size_t i = 0; i < count; i++) {
		err = parse_cd_entry(z, cd, cd_size, &pos, i, &e);
		if (err)
			return err;
		names_size += e.name_len + 1;
	}
	if (pos != cd_size)
		return gfs_fail(GFS_ERR_FORMAT,
				"%s: zip central directory has %zu bytes after its %zu entries",
				z->label, cd_size - pos, count);
	/* Each entry has at least CENTRAL_HDR_SIZE bytes besides its name. */
	assert(names_size <= cd_size);
	z->recs = gfs_calloc(count, sizeof(*z->recs));
	z->by_name = gfs_calloc(count, sizeof(*z->by_name));
	z->names = malloc(names_size);
	if (!z->recs || !z->by_name || !z->names)
		return gfs_fail(GFS_ERR_NOMEM, "%s: out of memory", z->label);
	z->count = count;
	pos = 0;
	next = z->names;
	for (size_t i = 0; i < count; i++) {
		gfs_tzip_record *const rec = &z->recs[i];

		err = parse_cd_entry(z, cd, cd_size, &pos, i, &e);
		assert(err == GFS_OK);
		memcpy(next, e.name, e.name_len);
		next[e.name_len] = '\0';
		rec->name = next;
		rec->size = e.usize;
		rec->crc32 = e.crc32;
		rec->method = e.method;
		next += e.name_len + 1;
	}
	err = find_prefix(z);
	if (!err)
		err = check_prefix(z);
	if (!err)
		err = sort_names(z);
	if (!err)
		err = check_locals(z, cd, cd_size, count);
	return err;
}

gfs_err gfs_tzip_open(int fd, uint64_t base, uint64_t len, const char *label,
		      const gfs_tzip_limits *lim, gfs_tzip **out)
{
	uint64_t end_abs;
	zip_end end = { 0 };
	uint8_t *cd;
	gfs_tzip *z;
	gfs_err err;

	if (!out || fd < 0 || !label)
		return gfs_fail(GFS_ERR_INVAL,
				"gfs_tzip_open: bad argument (fd %d, label %s)",
				fd, label ? label : "NULL");
	*out = NULL;
	if (!gfs_add_u64(base, len, &end_abs))
		return gfs_fail(GFS_ERR_INVAL,
				"%s: archive range %llu + %llu overflows", label,
				(unsigned long long)base, (unsigned long long)len);
	z = calloc(1, sizeof(*z));
	if (!z)
		return gfs_fail(GFS_ERR_NOMEM, "%s: out of memory", label);
	z->fd = fd;
	z->base = base;
	z->len = len;
	z->label = gfs_strdup(label);
	if (!z->label) {
		gfs_tzip_close(z);
		return gfs_fail(GFS_ERR_NOMEM, "%s: out of memory", label);
	}
	err = lim && lim->windows ? read_windows(z) : GFS_OK;
	if (!err)
		err = read_end(z, &end);
	if (!err)
		err = check_end(z, &end, lim);
	if (err) {
		gfs_tzip_close(z);
		return err;
	}
	/* check_end() bounded cd_size by SIZE_MAX and count by cd_size / 46. */
	cd = malloc((size_t)end.cd_size);
	if (!cd) {
		gfs_tzip_close(z);
		return gfs_fail(GFS_ERR_NOMEM,
				"%s: out of memory for a %llu-byte central directory",
				label, (unsigned long long)end.cd_size);
	}
	err = zread(z, cd, (size_t)end.cd_size, end.cd_off);
	if (!err)
		err = load_records(z, cd, (size_t)end.cd_size,
				   (size_t)end.count);
	free(cd);
	if (err) {
		gfs_tzip_close(z);
		return err;
	}
	*out = z;
	return GFS_OK;
}

void gfs_tzip_close(gfs_tzip *z)
{
	if (!z)
		return;
	free(z->win);
	free(z->names);
	free(z->by_name);
	free(z->recs);
	free(z->prefix);
	free(z->label);
	free(z);
}

const char *gfs_tzip_prefix(const gfs_tzip *z)
{
	assert(z && z->prefix);
	return z->prefix;
}

size_t gfs_tzip_count(const gfs_tzip *z)
{
	assert(z);
	return z->count;
}

const gfs_tzip_record *gfs_tzip_at(const gfs_tzip *z, size_t i)
{
	assert(z);
	return i < z->count ? &z->recs[i] : NULL;
}

const char *gfs_tzip_label(const gfs_tzip *z)
{
	assert(z);
	return z->label;
}

gfs_err gfs_tzip_peek_prefix(int fd, uint64_t size, const char *label, char **out)
{
	uint8_t hdr[LOCAL_HDR_SIZE + MAX_NAME_LEN];
	const size_t want = size < sizeof(hdr) ? (size_t)size : sizeof(hdr);
	const uint8_t *slash;
	size_t name_len, n;
	gfs_err err;

	assert(out);
	*out = NULL;
	if (want < LOCAL_HDR_SIZE)
		return GFS_OK;
	err = gfs_pread_full(fd, hdr, want, 0, label);
	if (err)
		return err == GFS_ERR_IO ? err : GFS_OK;
	if (gfs_le32(hdr) != ZIP_LOCAL_SIG)
		return GFS_OK;
	name_len = gfs_le16(hdr + 26);
	if (name_len > want - LOCAL_HDR_SIZE)
		return GFS_OK;
	slash = memchr(hdr + LOCAL_HDR_SIZE, '/', name_len);
	if (!slash || slash == hdr + LOCAL_HDR_SIZE)
		return GFS_OK;
	n = (size_t)(slash - (hdr + LOCAL_HDR_SIZE));
	*out = malloc(n + 1);
	if (!*out)
		return gfs_fail(GFS_ERR_NOMEM, "%s: out of memory", label);
	for (size_t i = 0; i < n; i++) /* a NUL byte must not shorten it */
		(*out)[i] = hdr[LOCAL_HDR_SIZE + i] ? (char)hdr[LOCAL_HDR_SIZE + i] : '?';
	(*out)[n] = '\0';
	return GFS_OK;
}

/*
 * cmp_concat(): compare s with the concatenation of a and b, with the
 * sign strcmp() would give.
 */
static int cmp_concat(const char *s, const char *a, const char *b)
{
	const unsigned char *us = (const unsigned char *)s;

	for (const unsigned char *ua = (const unsigned char *)a; *ua;
	     ua++, us++) {
		if (*us != *ua)
			return *us < *ua ? -1 : 1;
	}
	return strcmp((const char *)us, b);
}

/* lookup(): the record named "<prefix>/<a><b>", or NULL. */
static const gfs_tzip_record *lookup(const gfs_tzip *z, const char *a,
				     const char *b)
{
	size_t lo = 0, hi = z->count;

	/* All names share "<prefix>/", so they sort as their remainders. */
	while (lo < hi) {
		const size_t mid = lo + (hi - lo) / 2;
		const gfs_tzip_record *const rec = z->by_name[mid];
		const int c = cmp_concat(rec->name + z->prefix_len + 1, a, b);

		if (c == 0)
			return rec;
		if (c < 0)
			lo = mid + 1;
		else
			hi = mid;
	}
	return NULL;
}

const gfs_tzip_record *gfs_tzip_find(const gfs_tzip *z, const char *relname)
{
	assert(z && relname);
	return lookup(z, "", relname);
}

/* check_stored(): GFS_ERR_UNSUPPORTED unless rec is STORED. */
static gfs_err check_stored(const gfs_tzip *z, const gfs_tzip_record *rec)
{
	char shown[SHOW_NAME_MAX];

	if (rec->method == METHOD_STORED)
		return GFS_OK;
	return gfs_fail(GFS_ERR_UNSUPPORTED,
			"%s: zip record %s is compressed (method %u); only STORED records are supported",
			z->label, show_name(shown, rec->name, strlen(rec->name)),
			(unsigned)rec->method);
}

gfs_err gfs_tzip_read_record(const gfs_tzip *z, const gfs_tzip_record *rec,
			     uint64_t max_size, uint8_t **buf, size_t *len)
{
	char shown[SHOW_NAME_MAX];
	uint8_t *data;
	gfs_err err;

	assert(z && rec && buf && len);
	assert(rec >= z->recs && rec < z->recs + z->count);
	err = check_stored(z, rec);
	if (err)
		return err;
	if (rec->size > max_size || rec->size > SIZE_MAX)
		return gfs_fail(GFS_ERR_LIMIT,
				"%s: zip record %s is %llu bytes, more than the limit of %llu",
				z->label,
				show_name(shown, rec->name, strlen(rec->name)),
				(unsigned long long)rec->size,
				(unsigned long long)max_size);
	data = malloc(rec->size ? (size_t)rec->size : 1);
	if (!data)
		return gfs_fail(GFS_ERR_NOMEM, "%s: out of memory", z->label);
	err = zread(z, data, (size_t)rec->size, rec->data_off - z->base);
	if (err) {
		free(data);
		return err;
	}
	*buf = data;
	*len = (size_t)rec->size;
	return GFS_OK;
}

gfs_err gfs_tzip_storage_record(const gfs_tzip *z, const char *key,
				const gfs_tzip_record **out)
{
	char shown[SHOW_NAME_MAX];
	char shown_prefix[SHOW_NAME_MAX];
	const gfs_tzip_record *rec;
	gfs_err err;

	assert(z && key && out);
	rec = lookup(z, "data/", key);
	if (!rec)
		return gfs_fail(GFS_ERR_NOTFOUND,
				"%s: zip archive has no storage record %s/data/%s",
				z->label,
				show_name(shown_prefix, z->prefix, z->prefix_len),
				show_name(shown, key, strlen(key)));
	err = check_stored(z, rec);
	if (err)
		return err;
	*out = rec;
	return GFS_OK;
}

gfs_err gfs_tzip_storage(const gfs_tzip *z, const char *key, uint64_t *off,
			 uint64_t *size)
{
	const gfs_tzip_record *rec;
	const gfs_err err = gfs_tzip_storage_record(z, key, &rec);

	if (err)
		return err;
	*off = rec->data_off;
	*size = rec->size;
	return GFS_OK;
}
