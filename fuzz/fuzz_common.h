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

#include "gatherfs/server/server.h"

/*
 * fuzz_read_all(): read every entry of an imported layout, in chunks, as
 * stored and converted to bf16; a read failure is a finding (abort), since
 * a layout that imported and opened must serve every byte, except EIO for
 * bytes of a record found not to match its stored checksum (reads verify
 * by default: the fuzzed bytes rarely match the CRC-32s beside them) and
 * EIO in a layout with lazy records (DCP chunks placed from .metadata,
 * whose archive only the first read opens): true then, for the caller to
 * check that an eager import refuses the same checkpoint.
 */
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

				if (err == GFS_ERR_IO && gfs_srcset_nbad(s) > 0)
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

#endif
