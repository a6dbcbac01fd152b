/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Regression tests for faults found by the fuzzers and the fault-injection
 * tests (docs/RELIABILITY.md):
 *   - a tensor with no elements (no pieces) finishes and reads (fuzz_server:
 *     qsort(NULL, 0) in gfs_layout_finish(), undefined behaviour);
 *   - a source unlinked, or replaced by rename, while open keeps serving its
 *     bytes (the unlink changes its ctime: that alone is no change);
 *   - a source rewritten in place fails with GFS_ERR_IO naming the file,
 *     and gfs_srcset_check() says so too.
 */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "gatherfs/index/layout.h"
#include "gatherfs/server/server.h"
#include "tap.h"

static char tmpdir[] = "/tmp/gfs-t-faults-XXXXXX";
static char srcpath[512];

/* write_source(): 64 bytes, byte i holding i + base. */
static void write_source(const char *path, int base)
{
	uint8_t buf[64];
	FILE *f;

	for (int i = 0; i < 64; i++)
		buf[i] = (uint8_t)(i + base);
	f = fopen(path, "wb");
	if (!f || fwrite(buf, 1, sizeof(buf), f) != sizeof(buf) || fclose(f) != 0)
		abort();
}

/* build(): "empty" float32 [0, 3] (no pieces) and "w" uint8 [16] at offset 8. */
static gfs_layout *build(void)
{
	const uint64_t s03[2] = { 0, 3 }, s16[1] = { 16 };
	gfs_layout *l = NULL;
	uint32_t src;
	size_t a, b;

	if (gfs_layout_new("test", tmpdir, &l) || gfs_layout_add_source(l, "src.bin", 64, &src) ||
	    gfs_layout_add_tensor(l, "empty", GFS_DT_F32, 2, s03, &a) ||
	    gfs_layout_add_tensor(l, "w", GFS_DT_U8, 1, s16, &b) ||
	    gfs_layout_add_piece(l, b, src, 8, 16) || gfs_layout_finish(l, "test")) {
		fprintf(stderr, "build: %s\n", gfs_errmsg());
		abort();
	}
	return l;
}

/* reads_ok(): "w" reads bytes 8.. + base. */
static bool reads_ok(const gfs_layout *l, const gfs_srcset *s, int base)
{
	uint8_t buf[16];

	if (gfs_tensor_read(l, s, 1, GFS_DT_INVALID, 0, buf, sizeof(buf)) != GFS_OK)
		return false;
	for (int i = 0; i < 16; i++)
		if (buf[i] != (uint8_t)(8 + i + base))
			return false;
	return true;
}

int main(void)
{
	gfs_layout *l;
	gfs_srcset *s = NULL;
	char other[600];
	uint8_t buf[4];
	const struct timespec tick = { 0, 20 * 1000 * 1000 };

	if (!mkdtemp(tmpdir))
		abort();
	snprintf(srcpath, sizeof(srcpath), "%s/src.bin", tmpdir);
	snprintf(other, sizeof(other), "%s/new.bin", tmpdir);
	write_source(srcpath, 0);

	l = build();
	tap_ok(l->tensors[0].npieces == 0 && l->tensors[0].nbytes == 0,
	       "a tensor with no elements finishes with no pieces");
	tap_ok(gfs_srcset_open(l, &s) == GFS_OK, "open the sources");
	tap_ok(gfs_tensor_read(l, s, 0, GFS_DT_BF16, 0, buf, 0) == GFS_OK,
	       "a tensor with no elements reads 0 bytes");
	tap_ok(reads_ok(l, s, 0) && gfs_srcset_check(l, s, 0) == GFS_OK, "reads before any change");

	nanosleep(&tick, NULL); /* let the clock move past the open's timestamps */
	write_source(other, 100);
	tap_ok(rename(other, srcpath) == 0, "replace the source by rename");
	tap_ok(reads_ok(l, s, 0) && gfs_srcset_check(l, s, 0) == GFS_OK,
	       "a source replaced by rename serves its old bytes");
	gfs_srcset_close(s);
	s = NULL;

	tap_ok(gfs_srcset_open(l, &s) == GFS_OK, "open the new source");
	nanosleep(&tick, NULL);
	tap_ok(unlink(srcpath) == 0, "unlink the source");
	tap_ok(reads_ok(l, s, 100), "an unlinked source serves its bytes");
	gfs_srcset_close(s);
	s = NULL;

	write_source(srcpath, 0);
	tap_ok(gfs_srcset_open(l, &s) == GFS_OK, "open a fresh source");
	nanosleep(&tick, NULL);
	{
		FILE *f = fopen(srcpath, "r+b");

		if (!f || fseek(f, 10, SEEK_SET) != 0 || fputc(0xff, f) == EOF || fclose(f) != 0)
			abort();
	}
	tap_ok(gfs_tensor_read(l, s, 1, GFS_DT_INVALID, 0, buf, sizeof(buf)) == GFS_ERR_IO &&
		       strstr(gfs_errmsg(), "src.bin") && strstr(gfs_errmsg(), "changed"),
	       "a source rewritten in place fails: %s", gfs_errmsg());
	tap_ok(gfs_srcset_check(l, s, 0) == GFS_ERR_IO, "gfs_srcset_check() sees the change");
	gfs_srcset_close(s);
	gfs_layout_free(l);
	unlink(srcpath);
	rmdir(tmpdir);
	return tap_done();
}
