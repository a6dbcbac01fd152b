/* SPDX-License-Identifier: Apache-2.0 */
/*
 * gatherfs — libFuzzer target for the Megatron-LM importer
 * (import_megatron.h), legacy and torch_dist, through gfs_import() with
 * the naming chosen from the args (naming.h).
 *
 * At startup two saves are linked into a temporary directory: a legacy
 * one (GFS_FUZZ_MG_LEGACY, or -DGFS_FUZZ_MG_LEGACY_DEFAULT: one rank,
 * mp_rank_00/model_optim_rng.pt of iter_0000003), whose rank file's
 * archive records are read into memory, and a torch_dist iteration
 * directory (GFS_FUZZ_MG_DIST, or -DGFS_FUZZ_MG_DIST_DEFAULT: 4 ranks, args
 * in common.pt).  The first input byte picks what the rest becomes:
 *   0  the data.pkl of the legacy rank file (the model dict and its args):
 *      the archive is rewritten around it, its other records as saved;
 *   1  the legacy save's latest_checkpointed_iteration.txt;
 *   2  the torch_dist common.pt (a whole torch archive);
 *   3  the torch_dist metadata.json.
 * Then gfs_import() runs on the save and, when it succeeds, every tensor
 * is read through gfs_tensor_read() (as stored and as bf16).  Must never
 * crash, leak or hang; a refusal must come with a one-line message.
 */
#include "config.h"

#include <fcntl.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "gatherfs/importers/import.h"
#include "gatherfs/readers/torchzip.h"
#include "gatherfs/server/server.h"

#include "fuzz_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerInitialize(int *argc, char ***argv);

#ifndef GFS_FUZZ_MG_LEGACY_DEFAULT
#define GFS_FUZZ_MG_LEGACY_DEFAULT "tests/data/megatron/tp1_pp1/legacy_torch"
#endif
#ifndef GFS_FUZZ_MG_DIST_DEFAULT
#define GFS_FUZZ_MG_DIST_DEFAULT "tests/data/megatron/tp2_pp2/training_torch_dist/iter_0000003"
#endif
#define RANK_FILE "iter_0000003/mp_rank_00/model_optim_rng.pt"
#define MAX_RECS 256

/* The legacy rank file's records, in archive order. */
typedef struct rec {
	char *name;
	uint8_t *data;
	size_t len;
	bool pkl; /* the data.pkl record: replaced by the input */
} rec;

static rec g_recs[MAX_RECS];
static size_t g_nrecs;
static char g_tmp[] = "/tmp/gfs-fuzz-megatron.XXXXXX";
static char g_leg[600], g_rankdir[700], g_dist[600];
static char g_leg_src[4096], g_dist_src[4096];

__attribute__((noreturn)) static void die(const char *what, const char *path)
{
	fprintf(stderr, "fuzz_import_megatron: %s %s (set GFS_FUZZ_MG_LEGACY, GFS_FUZZ_MG_DIST)\n",
		what, path);
	abort();
}

static int rm_one(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	(void)st;
	(void)ftw;
	return flag == FTW_DP ? rmdir(path) : unlink(path);
}

static void cleanup(void)
{
	nftw(g_tmp, rm_one, 16, FTW_DEPTH | FTW_PHYS);
	for (size_t i = 0; i < g_nrecs; i++) {
		free(g_recs[i].name);
		free(g_recs[i].data);
	}
}

/* load_records(): read the records of the torch archive at path into g_recs. */
static void load_records(const char *path)
{
	const int fd = open(path, O_RDONLY);
	struct stat st;
	gfs_tzip *z = NULL;

	if (fd < 0 || fstat(fd, &st) != 0 ||
	    gfs_tzip_open(fd, 0, (uint64_t)st.st_size, path, NULL, &z) != GFS_OK)
		die("cannot open the archive", path);
	g_nrecs = gfs_tzip_count(z);
	if (g_nrecs > MAX_RECS)
		die("too many records in", path);
	for (size_t i = 0; i < g_nrecs; i++) {
		const gfs_tzip_record *r = gfs_tzip_at(z, i);
		const char *slash = strrchr(r->name, '/');

		g_recs[i].name = strdup(r->name);
		g_recs[i].len = (size_t)r->size;
		g_recs[i].data = malloc(g_recs[i].len ? g_recs[i].len : 1);
		g_recs[i].pkl = slash && strcmp(slash, "/data.pkl") == 0;
		if (!g_recs[i].name || !g_recs[i].data || r->method != 0 ||
		    pread(fd, g_recs[i].data, g_recs[i].len, (off_t)r->data_off) != (ssize_t)g_recs[i].len)
			die("cannot read the records of", path);
	}
	gfs_tzip_close(z);
	close(fd);
}

static void put16(FILE *f, unsigned v)
{
	fputc((int)(v & 0xff), f);
	fputc((int)((v >> 8) & 0xff), f);
}

static void put32(FILE *f, uint32_t v)
{
	put16(f, v & 0xffff);
	put16(f, v >> 16);
}

/* zip_header(): a local (central: with its extra fields) header of record r. */
static void zip_header(FILE *f, bool central, const char *name, const uint8_t *d, size_t n,
		       uint32_t local_off)
{
	const uint32_t crc = (uint32_t)crc32(0L, d, (uInt)n);

	put32(f, central ? 0x02014b50 : 0x04034b50);
	if (central)
		put16(f, 20);
	put16(f, 20);
	put16(f, 0); /* flags */
	put16(f, 0); /* STORED */
	put32(f, 0); /* time, date */
	put32(f, crc);
	put32(f, (uint32_t)n);
	put32(f, (uint32_t)n);
	put16(f, (unsigned)strlen(name));
	put16(f, 0);
	if (central) {
		put32(f, 0); /* comment length, disk */
		put16(f, 0); /* internal attributes */
		put32(f, 0); /* external attributes */
		put32(f, local_off);
	}
	fputs(name, f);
}

/* write_rank_file(): the legacy rank file with data.pkl = pkl[0..n). */
static void write_rank_file(const uint8_t *pkl, size_t n)
{
	char path[1000];
	uint32_t offs[MAX_RECS], cd;
	FILE *f;

	snprintf(path, sizeof(path), "%s/model_optim_rng.pt", g_rankdir);
	unlink(path); /* never write through the link to the fixture */
	f = fopen(path, "wb");
	if (!f)
		die("cannot write", path);
	for (size_t i = 0; i < g_nrecs; i++) {
		const uint8_t *d = g_recs[i].pkl ? pkl : g_recs[i].data;
		const size_t len = g_recs[i].pkl ? n : g_recs[i].len;

		offs[i] = (uint32_t)ftell(f);
		zip_header(f, false, g_recs[i].name, d, len, 0);
		if (len && fwrite(d, 1, len, f) != len)
			die("cannot write", path);
	}
	cd = (uint32_t)ftell(f);
	for (size_t i = 0; i < g_nrecs; i++)
		zip_header(f, true, g_recs[i].name, g_recs[i].pkl ? pkl : g_recs[i].data,
			   g_recs[i].pkl ? n : g_recs[i].len, offs[i]);
	put32(f, 0x06054b50);
	put32(f, 0); /* disks */
	put16(f, (unsigned)g_nrecs);
	put16(f, (unsigned)g_nrecs);
	put32(f, (uint32_t)ftell(f) - 12 - cd);
	put32(f, cd);
	put16(f, 0);
	if (fclose(f) != 0)
		die("cannot write", path);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	const char *leg = getenv("GFS_FUZZ_MG_LEGACY"), *dist = getenv("GFS_FUZZ_MG_DIST");
	static const char *const dist_files[] = { ".metadata", "__0_0.distcp", "__1_0.distcp",
						  "__2_0.distcp", "__3_0.distcp" };
	char p[4400];

	(void)argc;
	(void)argv;
	if (!leg)
		leg = GFS_FUZZ_MG_LEGACY_DEFAULT;
	if (!dist)
		dist = GFS_FUZZ_MG_DIST_DEFAULT;
	if (!realpath(leg, g_leg_src))
		die("cannot resolve", leg);
	if (!realpath(dist, g_dist_src))
		die("cannot resolve", dist);
	if (!mkdtemp(g_tmp))
		die("cannot create", g_tmp);
	atexit(cleanup);
	snprintf(p, sizeof(p), "%s/" RANK_FILE, g_leg_src);
	load_records(p);
	snprintf(g_leg, sizeof(g_leg), "%s/legacy", g_tmp);
	snprintf(g_rankdir, sizeof(g_rankdir), "%s/iter_0000003/mp_rank_00", g_leg);
	snprintf(p, sizeof(p), "%s/iter_0000003", g_leg);
	if (mkdir(g_leg, 0700) || mkdir(p, 0700) || mkdir(g_rankdir, 0700))
		die("cannot create", g_rankdir);
	snprintf(g_dist, sizeof(g_dist), "%s/iter_0000003", g_tmp);
	if (mkdir(g_dist, 0700))
		die("cannot create", g_dist);
	for (size_t i = 0; i < sizeof(dist_files) / sizeof(dist_files[0]); i++) {
		snprintf(p, sizeof(p), "%s/%s", g_dist_src, dist_files[i]);
		fuzz_link(p, g_dist, dist_files[i]);
	}
	return 0;
}

/* restore(): a file of the fixture, linked in place of a fuzzed one. */
static void restore(const char *src_dir, const char *name, const char *dir)
{
	char p[4400];

	snprintf(p, sizeof(p), "%s/%s", src_dir, name);
	fuzz_link(p, dir, name);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	gfs_layout *l = NULL;
	const uint8_t *rest = data + 1;
	const size_t n = size ? size - 1 : 0;
	const char *dir;

	if (size == 0)
		return 0;
	switch (data[0] % 4) {
	case 0:
	case 1:
		if (data[0] % 4 == 0)
			write_rank_file(rest, n);
		else
			restore(g_leg_src, RANK_FILE, g_leg);
		if (data[0] % 4 == 1)
			fuzz_spill(g_leg, "latest_checkpointed_iteration.txt", rest, n);
		else
			restore(g_leg_src, "latest_checkpointed_iteration.txt", g_leg);
		dir = g_leg;
		break;
	default:
		if (data[0] % 4 == 2)
			fuzz_spill(g_dist, "common.pt", rest, n);
		else
			restore(g_dist_src, "common.pt", g_dist);
		if (data[0] % 4 == 3)
			fuzz_spill(g_dist, "metadata.json", rest, n);
		else
			restore(g_dist_src, "metadata.json", g_dist);
		dir = g_dist;
		break;
	}
	if (gfs_import(dir, NULL, &l) != GFS_OK) {
		fuzz_check_refusal(l);
		return 0;
	}
	fuzz_serve_and_free(l);
	return 0;
}
