/* SPDX-License-Identifier: Apache-2.0 */
/*
 * gatherfs — libFuzzer target for the PyTorch DCP importer's `.metadata`
 * parser, on a real checkpoint.
 *
 * At startup, the .distcp files of the fixture GFS_FUZZ_DCP (environment
 * variable, or the path compiled in with -DGFS_FUZZ_DCP_DEFAULT: a DCP
 * directory) are linked into a temporary directory.  Per input, the input
 * becomes that directory's `.metadata`: gfs_dcp_parse_metadata() runs on it,
 * then gfs_import_dcp() on the directory and, when it succeeds, every
 * tensor is read through gfs_tensor_read() (as stored and as bf16), which
 * exercises strided and zstd pieces.  Must never crash, leak or hang; a
 * refusal must come with a one-line message.  The parse runs twice, with
 * the reader's fast paths (the prescan split from 1 byte on) and without:
 * records, ids and errors must be the same.
 */
#include "config.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gatherfs/importers/import.h"
#include "gatherfs/readers/dcpmeta.h"
#include "gatherfs/server/server.h"

#include "fuzz_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerInitialize(int *argc, char ***argv);

#ifndef GFS_FUZZ_DCP_DEFAULT
#define GFS_FUZZ_DCP_DEFAULT "tests/data/dcp/shard1_ws3/checkpoint"
#endif

static char g_dir[] = "/tmp/gfs-fuzz-dcp.XXXXXX";
static char g_meta[600];
static char g_links[16][600];
static int g_nlinks;

static void die(const char *what, const char *path)
{
	fprintf(stderr, "fuzz_dcp_metadata: %s %s (set GFS_FUZZ_DCP)\n", what, path);
	abort();
}

static void cleanup(void)
{
	for (int i = 0; i < g_nlinks; i++)
		unlink(g_links[i]);
	unlink(g_meta);
	rmdir(g_dir);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	const char *ckpt = getenv("GFS_FUZZ_DCP");
	char abs[512];
	struct dirent *e;
	DIR *d;

	(void)argc;
	(void)argv;
	if (!ckpt)
		ckpt = GFS_FUZZ_DCP_DEFAULT;
	if (!realpath(ckpt, abs))
		die("cannot resolve", ckpt);
	if (!mkdtemp(g_dir))
		die("cannot create", g_dir);
	atexit(cleanup);
	snprintf(g_meta, sizeof(g_meta), "%s/.metadata", g_dir);
	d = opendir(abs);
	if (!d)
		die("cannot list", abs);
	while ((e = readdir(d)) != NULL && g_nlinks < 16) {
		char from[1100];
		const size_t n = strlen(e->d_name);

		if (n < 7 || strcmp(e->d_name + n - 7, ".distcp") != 0)
			continue;
		snprintf(from, sizeof(from), "%s/%s", abs, e->d_name);
		snprintf(g_links[g_nlinks], sizeof(g_links[0]), "%s/%s", g_dir, e->d_name);
		if (symlink(from, g_links[g_nlinks]) != 0)
			die("cannot link", g_links[g_nlinks]);
		g_nlinks++;
	}
	closedir(d);
	if (g_nlinks == 0)
		die("no .distcp files in", abs);
	return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	gfs_dcpmeta *pk = NULL, *slow = NULL;
	gfs_layout *l = NULL;
	FILE *f;
	char msg[GFS_ERRMSG_MAX];
	gfs_err perr, serr;

	gfs_dcpmeta_set_fast(false, 0, false);
	serr = gfs_dcp_parse_metadata(data, size, "fuzz.metadata", &slow);
	snprintf(msg, sizeof(msg), "%s", gfs_errmsg());
	for (int lazy = 0; lazy < 2; lazy++) { /* fast with the split prescan, then without a prescan */
		gfs_dcpmeta_free(pk);
		pk = NULL;
		gfs_dcpmeta_set_fast(true, lazy ? 0 : 1, lazy);
		perr = gfs_dcp_parse_metadata(data, size, "fuzz.metadata", &pk);
		gfs_dcpmeta_set_fast(true, 0, true);
		if (perr != serr || (perr ? strcmp(msg, gfs_errmsg()) != 0 : !gfs_dcpmeta_same(pk, slow))) {
			fprintf(stderr, "the fast paths disagree (lazy %d): %s / %s\n", lazy,
				perr ? gfs_errmsg() : "ok", serr ? msg : "ok");
			abort();
		}
	}
	gfs_dcpmeta_free(slow);
	if (perr != GFS_OK && (pk || !gfs_errmsg()[0] || strchr(gfs_errmsg(), '\n')))
		abort();
	gfs_dcpmeta_free(pk);
	f = fopen(g_meta, "wb");
	if (!f || (size && fwrite(data, 1, size, f) != size) || fclose(f) != 0)
		die("cannot write", g_meta);
	if (gfs_import_dcp(g_dir, NULL, &l) != GFS_OK) {
		fuzz_check_refusal(l);
		return 0;
	}
	if (perr != GFS_OK) /* the importer accepted what the parser refused */
		abort();
	if (fuzz_serve_and_free(l)) {
		/* a lazy chunk failed its first read: opening every chunk at
		 * import must refuse the checkpoint (else a served byte that
		 * could be read correctly failed) */
		setenv("GATHERFS_DCP_EAGER", "1", 1);
		l = NULL;
		if (gfs_import_dcp(g_dir, NULL, &l) == GFS_OK) {
			fprintf(stderr, "a lazy chunk failed a read, but the eager import accepts\n");
			abort();
		}
		fuzz_check_refusal(l);
		unsetenv("GATHERFS_DCP_EAGER");
	}
	return 0;
}
