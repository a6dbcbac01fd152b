/* SPDX-License-Identifier: Apache-2.0 */
/*
 * gatherfs — read torch.save zip archives without reading their payloads.
 *
 * A torch zip holds <prefix>/data.pkl, <prefix>/data/<key> (one raw storage
 * per key), <prefix>/version and, from torch 2.x, more records.  This reader
 * parses the end of central directory (classic and ZIP64), the central
 * directory and each record's local header (to find where its data starts),
 * and nothing else.  Only STORED records are accepted for data/<key>.
 * Sizes come from the central directory (torch 2.x writes zero sizes in local
 * headers with a data descriptor).
 *
 * The archive may be embedded in a larger file: it occupies
 * [base, base + len) of the file, and all offsets in the archive are relative
 * to base (as torch's DCP writer embeds one torch.save per chunk).
 */
#ifndef GATHERFS_TORCHZIP_H
#define GATHERFS_TORCHZIP_H

#include "gatherfs/util/common.h"

typedef struct gfs_tzip_record {
	const char *name;  /* full name in the archive, NUL-terminated */
	uint64_t data_off; /* absolute file offset of the first data byte */
	uint64_t size;     /* uncompressed (== stored) size */
	uint32_t crc32;    /* CRC-32 from the central directory */
	uint16_t method;   /* 0 = STORED */
} gfs_tzip_record;

typedef struct gfs_tzip gfs_tzip;

/* Hard limits.  Zero fields take the defaults. */
typedef struct gfs_tzip_limits {
	uint64_t max_records; /* default 1 << 22 */
	uint64_t max_cd_bytes; /* central directory size, default 1 GiB */
	/* read the pages holding the archive's first and last 2 KiB first, one
	 * pread each, and serve the reads that fall inside them from those: a
	 * torch.save of one tensor (a DCP chunk) opens in two preads, reading
	 * up to 12 KiB of payload (four pages, less the 2 KiB ends) */
	bool windows;
} gfs_tzip_limits;

/*
 * gfs_tzip_open(): parse the archive occupying [base, base + len) of fd.
 * label names the file in error messages.  Records are validated: every
 * record's local header and data lie inside [base, base + len), names are
 * unique, and all names share one "<prefix>/" (the prefix of data.pkl).
 * The fd is borrowed; it must stay open while the gfs_tzip is used.
 * lim may be NULL (all defaults).  Reads the end records (the last 22
 * bytes, plus up to 64 KiB before them only if they are not an end record
 * without comment), the central directory and each local header; with
 * lim->windows, see gfs_tzip_limits.
 * @return GFS_OK and *out, freed with gfs_tzip_close(); on error *out is
 * NULL.
 */
gfs_err gfs_tzip_open(int fd, uint64_t base, uint64_t len, const char *label,
		      const gfs_tzip_limits *lim, gfs_tzip **out);

/* gfs_tzip_close(): free; NULL allowed. */
void gfs_tzip_close(gfs_tzip *z);

/* gfs_tzip_prefix(): the archive prefix without the trailing '/'. */
const char *gfs_tzip_prefix(const gfs_tzip *z);

/*
 * gfs_tzip_count()/gfs_tzip_at(): all records, in central directory order
 * (gfs_tzip_at() is NULL for i >= count).
 */
size_t gfs_tzip_count(const gfs_tzip *z);
const gfs_tzip_record *gfs_tzip_at(const gfs_tzip *z, size_t i);

/*
 * gfs_tzip_find(): the record "<prefix>/<relname>" (e.g. "data/0",
 * "data.pkl", "version"), or NULL.  O(log n).
 */
const gfs_tzip_record *gfs_tzip_find(const gfs_tzip *z, const char *relname);

/*
 * gfs_tzip_read_record(): read a whole (STORED) record into a new buffer
 * (caller frees).  max_size guards against huge records.
 */
gfs_err gfs_tzip_read_record(const gfs_tzip *z, const gfs_tzip_record *rec,
			     uint64_t max_size, uint8_t **buf, size_t *len);

/*
 * gfs_tzip_storage(): the data/<key> record of a storage: its absolute file
 * offset and size in bytes.  GFS_ERR_NOTFOUND if absent, GFS_ERR_UNSUPPORTED
 * if not STORED.
 */
gfs_err gfs_tzip_storage(const gfs_tzip *z, const char *key, uint64_t *off,
			 uint64_t *size);

/*
 * gfs_tzip_storage_record(): as gfs_tzip_storage(), the whole record (its
 * name, data offset, size and stored CRC-32).
 */
gfs_err gfs_tzip_storage_record(const gfs_tzip *z, const char *key,
				const gfs_tzip_record **out);

/*
 * gfs_tzip_peek_prefix(): the archive prefix of the torch zip that starts
 * file fd (of size bytes), from the name of its first local header alone:
 * one pread of at most 30 + 4096 bytes, the central directory unread; for
 * a file whose name must be checked but which is not read otherwise.
 * @return GFS_OK and *out, a new string (caller frees), or NULL when the
 * file does not start with a local header named "<prefix>/..." (then
 * nothing is known: the file is checked, if at all, when it is opened);
 * GFS_ERR_IO if the read fails.
 */
gfs_err gfs_tzip_peek_prefix(int fd, uint64_t size, const char *label, char **out);

/* gfs_tzip_label(): the label given at open. */
const char *gfs_tzip_label(const gfs_tzip *z);

#endif
