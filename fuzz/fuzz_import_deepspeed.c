/* SPDX-License-Identifier: Apache-2.0 */
/*
 * gatherfs — libFuzzer target for the DeepSpeed importer, on a whole
 * checkpoint.
 *
 * At startup, the fixture checkpoint GFS_FUZZ_CKPT (environment variable,
 * or the path compiled in with -DGFS_FUZZ_CKPT_DEFAULT: a ZeRO-3 world
 * size 2 save directory holding `latest` and one tag directory) is copied
 * into a temporary directory.  Per input, the first byte chooses one rank
 * file (model_states or optim_states of rank 0 or 1) and the rest of the
 * input replaces its content; then gfs_import() runs on the copy and, when
 * it succeeds, every entry is read through gfs_tensor_read() (as stored and
 * as bf16).  Must never crash, leak or hang; a refusal must come with a
 * one-line message.  The file is restored before the next input.
 */
#include "config.h"

#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "gatherfs/importers/import.h"
#include "gatherfs/server/server.h"

#include "fuzz_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerInitialize(int *argc, char ***argv);

#ifndef GFS_FUZZ_CKPT_DEFAULT
#define GFS_FUZZ_CKPT_DEFAULT "tests/data/ckpt/z3_ws2_fp32/checkpoint"
#endif
#define TAG "global_step3"

static const char *const g_files[4] = {
	"zero_pp_rank_0_mp_rank_00_model_states.pt",
	"zero_pp_rank_1_mp_rank_00_model_states.pt",
	"zero_pp_rank_0_mp_rank_00_optim_states.pt",
	"zero_pp_rank_1_mp_rank_00_optim_states.pt",
};
static char g_dir[] = "/tmp/gfs-fuzz-ds.XXXXXX";
static char g_path[4][512];
static uint8_t *g_orig[4]; /* original contents, to restore */
static size_t g_orig_len[4];
static int g_dirty = -1;   /* the file the last input overwrote, or -1 */

__attribute__((noreturn)) static void die(const char *what, const char *path)
{
	fprintf(stderr, "fuzz_import_deepspeed: %s %s (set GFS_FUZZ_CKPT)\n", what, path);
	abort();
}

static uint8_t *slurp(const char *path, size_t *len)
{
	FILE *f = fopen(path, "rb");
	uint8_t *buf = NULL;
	long n;

	if (!f || fseek(f, 0, SEEK_END) != 0 || (n = ftell(f)) < 0 || fseek(f, 0, SEEK_SET) != 0)
		die("cannot read", path);
	buf = malloc((size_t)n + 1);
	if (!buf || fread(buf, 1, (size_t)n, f) != (size_t)n)
		die("cannot read", path);
	fclose(f);
	*len = (size_t)n;
	return buf;
}

static void spill(const char *path, const uint8_t *buf, size_t len)
{
	FILE *f = fopen(path, "wb");

	if (!f || (len && fwrite(buf, 1, len, f) != len) || fclose(f) != 0)
		die("cannot write", path);
}

static void cleanup(void)
{
	char p[600];

	for (int i = 0; i < 4; i++)
		unlink(g_path[i]);
	snprintf(p, sizeof(p), "%s/latest", g_dir);
	unlink(p);
	snprintf(p, sizeof(p), "%s/" TAG, g_dir);
	rmdir(p);
	rmdir(g_dir);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	const char *ckpt = getenv("GFS_FUZZ_CKPT");
	char from[600], to[600];
	uint8_t *buf;
	size_t len;

	(void)argc;
	(void)argv;
	if (!ckpt)
		ckpt = GFS_FUZZ_CKPT_DEFAULT;
	if (!mkdtemp(g_dir))
		die("cannot create", g_dir);
	atexit(cleanup);
	snprintf(to, sizeof(to), "%s/" TAG, g_dir);
	if (mkdir(to, 0700) != 0)
		die("cannot create", to);
	snprintf(from, sizeof(from), "%s/latest", ckpt);
	snprintf(to, sizeof(to), "%s/latest", g_dir);
	buf = slurp(from, &len);
	spill(to, buf, len);
	free(buf);
	for (int i = 0; i < 4; i++) {
		snprintf(from, sizeof(from), "%s/" TAG "/%s", ckpt, g_files[i]);
		snprintf(g_path[i], sizeof(g_path[i]), "%s/" TAG "/%s", g_dir, g_files[i]);
		g_orig[i] = slurp(from, &g_orig_len[i]);
		spill(g_path[i], g_orig[i], g_orig_len[i]);
	}
	return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	gfs_layout *l = NULL;
	int which;

	if (size == 0)
		return 0;
	which = data[0] % 4;
	if (g_dirty >= 0 && g_dirty != which)
		spill(g_path[g_dirty], g_orig[g_dirty], g_orig_len[g_dirty]);
	spill(g_path[which], data + 1, size - 1);
	g_dirty = which;

	if (gfs_import(g_dir, NULL, &l) != GFS_OK) {
		fuzz_check_refusal(l);
		return 0;
	}
	/* The import read metadata only; the sources are as it saw them. */
	fuzz_serve_and_free(l);
	return 0;
}
