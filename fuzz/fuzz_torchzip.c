/* SPDX-License-Identifier: Apache-2.0 */
/*
 * gatherfs — libFuzzer target for the torch zip reader.
 *
 * The input is written once to a memfd as [input][junk][input], then opened
 * both at base 0 and embedded at base len + junk, each time with the length
 * of the input.  Every opened archive is walked: records must lie inside
 * the archive, gfs_tzip_find() must find each record by its own name, and
 * gfs_tzip_storage() / gfs_tzip_read_record() are called on each.
 * gfs_tzip_peek_prefix() reads the input's first record name.
 */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "gatherfs/readers/torchzip.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define JUNK_LEN 13
#define MAX_READ 4096

static void check(bool ok, const char *what)
{
	if (!ok) {
		fprintf(stderr, "fuzz_torchzip: invariant failed: %s\n", what);
		abort();
	}
}

static bool write_all(int fd, const uint8_t *p, size_t n)
{
	while (n > 0) {
		const ssize_t w = write(fd, p, n);

		if (w <= 0)
			return false;
		p += w;
		n -= (size_t)w;
	}
	return true;
}

static void walk(const gfs_tzip *z, uint64_t base, uint64_t len)
{
	const char *const prefix = gfs_tzip_prefix(z);
	const size_t plen = strlen(prefix);
	const size_t n = gfs_tzip_count(z);

	check(n > 0 && gfs_tzip_find(z, "data.pkl") != NULL, "data.pkl found");
	check(gfs_tzip_at(z, n) == NULL, "at(count) is NULL");
	for (size_t i = 0; i < n; i++) {
		const gfs_tzip_record *const rec = gfs_tzip_at(z, i);
		uint64_t off, size;
		uint8_t *buf;
		size_t got;

		check(rec != NULL, "record exists");
		check(strncmp(rec->name, prefix, plen) == 0 &&
			      rec->name[plen] == '/',
		      "record under prefix");
		check(gfs_tzip_find(z, rec->name + plen + 1) == rec,
		      "find by own name");
		check(rec->data_off >= base && rec->data_off - base <= len,
		      "data starts inside the archive");
		if (rec->method == 0)
			check(rec->size <= len - (rec->data_off - base),
			      "STORED data ends inside the archive");
		if (strncmp(rec->name + plen + 1, "data/", 5) == 0 &&
		    gfs_tzip_storage(z, rec->name + plen + 6, &off, &size) ==
			    GFS_OK)
			check(off == rec->data_off && size == rec->size,
			      "storage matches record");
		if (gfs_tzip_read_record(z, rec, MAX_READ, &buf, &got) ==
		    GFS_OK) {
			check(got == rec->size, "read size");
			free(buf);
		}
	}
	check(gfs_tzip_find(z, "no/such/record") == NULL, "missing record");
	(void)gfs_tzip_storage(z, "0", &(uint64_t){ 0 }, &(uint64_t){ 0 });
}

static void try_open(int fd, uint64_t base, uint64_t len,
		     const gfs_tzip_limits *lim)
{
	gfs_tzip *z = NULL;

	if (gfs_tzip_open(fd, base, len, "fuzz.pt", lim, &z) != GFS_OK) {
		check(gfs_errmsg()[0] != '\0' && !strchr(gfs_errmsg(), '\n'),
		      "one-line error message");
		return;
	}
	check(strcmp(gfs_tzip_label(z), "fuzz.pt") == 0, "label");
	walk(z, base, len);
	gfs_tzip_close(z);
}

/* try_peek(): gfs_tzip_peek_prefix() of the file's first size bytes. */
static void try_peek(int fd, uint64_t size)
{
	char *prefix = NULL;

	if (gfs_tzip_peek_prefix(fd, size, "fuzz.pt", &prefix) == GFS_OK && prefix)
		check(prefix[0] && !strchr(prefix, '/'), "a peeked prefix: not empty, no '/'");
	free(prefix);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static const uint8_t junk[JUNK_LEN] = "PK\x05\x06junkjunk!";
	const gfs_tzip_limits small = { .max_records = 64,
					.max_cd_bytes = 8192 };
	const int fd = memfd_create("fuzz_torchzip", MFD_CLOEXEC);

	if (fd < 0)
		abort();
	if (!write_all(fd, data, size) || !write_all(fd, junk, JUNK_LEN) ||
	    !write_all(fd, data, size))
		abort();
	try_peek(fd, size);
	try_open(fd, 0, size, NULL);
	try_open(fd, size + JUNK_LEN, size, &small);
	close(fd);
	return 0;
}
