/* SPDX-License-Identifier: Apache-2.0 */
/*
 * gatherfs — helpers shared by the fuzz targets.
 */
#ifndef GATHERFS_FUZZ_COMMON_H
#define GATHERFS_FUZZ_COMMON_H

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gatherfs/arith/dtype.h"
#include "gatherfs/server/declcheck.h"
#include "gatherfs/server/server.h"

/*
 * fuzz_touches_bad(): do the stored bytes [lo, hi) of tensor t (a computed
 * tensor: any byte of its inputs) lie in a piece whose record is not
 * servable now (found BAD; with verify on, also not yet checked)?
 */
static inline bool fuzz_touches_bad(const gfs_layout *l, const gfs_srcset *s, const gfs_tensor *t,
				    uint64_t lo, uint64_t hi)
{
	if (t->comp) {
		for (int k = 0; k < GFS_OPIN_COUNT; k++) {
			const int64_t in = t->comp->in[k];

			if (in >= 0 && l->inputs &&
			    fuzz_touches_bad(l, s, &l->inputs->tensors[in], 0, UINT64_MAX))
				return true;
		}
		return false;
	}
	for (size_t p = 0; p < t->npieces; p++) {
		const gfs_piece pc = gfs_tensor_piece(t, p);
		const uint64_t end = pc.toff + (pc.count - 1) * pc.dst_stride + pc.len;

		if (pc.rec != GFS_NO_RECORD && pc.toff < hi && lo < end &&
		    !gfs_srcset_rec_servable(s, pc.rec))
			return true;
	}
	return false;
}

/*
 * fuzz_read_all(): read every entry of an imported layout, in chunks, as
 * stored and converted to bf16; a read failure is a finding (abort), since
 * a layout that imported and opened must serve every byte, except EIO for
 * a read whose bytes lie in a record found not to match its stored
 * checksum (reads verify by default: the fuzzed bytes rarely match the
 * CRC-32s beside them; fuzz_touches_bad() on the chunk's stored bytes,
 * once some record is BAD) and EIO in a layout with lazy records (DCP
 * chunks placed from .metadata, whose archive only the first read opens):
 * true then, for the caller to check that an eager import refuses the same
 * checkpoint.
 */
/*
 * fuzz_bad_chunk(): do output bytes [off, off + len) of entry i, presented
 * for want, come from a record that is not servable (fuzz_touches_bad())?
 */
static inline bool fuzz_bad_chunk(const gfs_layout *l, const gfs_srcset *s, size_t i,
				  gfs_dtype want, uint64_t off, size_t len)
{
	const gfs_tensor *t = &l->tensors[i];
	size_t in_sz, out_sz;

	if (t->alias_of >= 0)
		t = &l->tensors[t->alias_of];
	in_sz = gfs_dtype_size(t->dtype);
	out_sz = gfs_dtype_size(gfs_dtype_out(t->dtype, want));
	if (!in_sz || !out_sz)
		return false;
	return fuzz_touches_bad(l, s, t, off / out_sz * in_sz,
				(off + len + out_sz - 1) / out_sz * in_sz);
}

/*
 * fuzz_refused_entry(): does the server refuse entry i on purpose, for what
 * the data proved: declarations (a tp_split file, universal_checkpoint_info)
 * shown wrong and i governed by them, or on-read replicas of its target
 * that differ?  Its EIO is then the answer, and only its own.
 */
static inline bool fuzz_refused_entry(const gfs_layout *l, const gfs_srcset *s, size_t i)
{
	const size_t ti = l->tensors[i].alias_of >= 0 ? (size_t)l->tensors[i].alias_of : i;

	return (gfs_srcset_decls_wrong(s) && gfs_layout_governed(l, i)) ||
	       !gfs_srcset_replicas_servable(s, ti);
}

static inline bool fuzz_read_all(const gfs_layout *l, const gfs_srcset *s)
{
	static uint8_t buf[1 << 16];
	static const gfs_dtype wants[] = { GFS_DT_INVALID, GFS_DT_BF16 };

	for (size_t w = 0; w < 2; w++)
		for (size_t i = 0; i < l->ntensors; i++) {
			const uint64_t n = gfs_tensor_out_nbytes(l, i, wants[w]);

			for (uint64_t off = 0; off < n; off += sizeof(buf)) {
				const size_t len = n - off < sizeof(buf) ? (size_t)(n - off) : sizeof(buf);

				const gfs_err err = gfs_tensor_read(l, s, i, wants[w], off, buf, len);

				if (err == GFS_ERR_IO && gfs_srcset_nbad(s) > 0 &&
				    fuzz_bad_chunk(l, s, i, wants[w], off, len))
					continue;
				if (err == GFS_ERR_IO && fuzz_refused_entry(l, s, i))
					break;
				if (err == GFS_ERR_IO && l->lazy_records)
					return true;
				if (err != GFS_OK) {
					fprintf(stderr, "read failed: %s\n", gfs_errmsg());
					abort();
				}
			}
		}
	return false;
}

/*
 * fuzz_check_refusal(): an importer that failed must have produced no layout
 * and exactly one line of message; anything else is a finding (abort).
 */
static inline void fuzz_check_refusal(const gfs_layout *l)
{
	const char *const msg = gfs_errmsg();

	if (l || !msg[0] || strchr(msg, '\n')) {
		fprintf(stderr, "bad refusal (layout %p): '%s'\n", (const void *)l, msg);
		abort();
	}
}

/*
 * fuzz_serve_and_free(): open the sources of an imported layout, read every
 * entry (fuzz_read_all) when they open, and free the layout; true when a
 * lazy record failed a read (fuzz_read_all()).
 */
static inline bool fuzz_serve_and_free(gfs_layout *l)
{
	gfs_srcset *s = NULL;
	bool lazy_eio = false;

	if (gfs_srcset_open(l, &s) == GFS_OK) {
		lazy_eio = fuzz_read_all(l, s);
		gfs_srcset_close(s);
	}
	gfs_layout_free(l);
	return lazy_eio;
}

/*
 * fuzz_spill(): write buf[0..len) to dir/name (replacing it); abort on
 * failure.
 */
static inline void fuzz_spill(const char *dir, const char *name, const void *buf, size_t len)
{
	char path[1200];
	FILE *f;

	snprintf(path, sizeof(path), "%s/%s", dir, name);
	unlink(path);
	f = fopen(path, "wb");
	if (!f || (len && fwrite(buf, 1, len, f) != len) || fclose(f) != 0) {
		fprintf(stderr, "fuzz: cannot write %s\n", path);
		abort();
	}
}

/*
 * fuzz_link(): make dir/name a symbolic link to target (replacing it);
 * abort on failure.
 */
static inline void fuzz_link(const char *target, const char *dir, const char *name)
{
	char path[1200];

	snprintf(path, sizeof(path), "%s/%s", dir, name);
	unlink(path);
	if (symlink(target, path) != 0) {
		fprintf(stderr, "fuzz: cannot link %s\n", path);
		abort();
	}
}

#endif
