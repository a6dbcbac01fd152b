/* SPDX-License-Identifier: Apache-2.0 */
/*
 * gatherfs — libFuzzer target for the naming module (naming.h): the
 * Hugging Face view of a Megatron model from its args or from an
 * hf_config directory.
 *
 * At startup the legacy Megatron save GFS_FUZZ_NAMING (or
 * -DGFS_FUZZ_NAMING_DEFAULT: 2 pipeline stages, with hf_config/ beside
 * legacy_torch/) is imported once in the Megatron view.  The first input
 * byte picks what the rest becomes:
 *   0  hf_config/config.json (generation_config.json as saved);
 *   1  hf_config/generation_config.json (config.json as saved);
 *      for both, gfs_import() runs on the save with -o hf_config=;
 *   2  a pickle whose root dict holds "args" (an argparse.Namespace: the
 *      data.pkl of a torch_dist common.pt): gfs_arch_from_args() on its
 *      state, then, when the architecture is known, gfs_naming_to_hf() of
 *      the Megatron view imported at startup.
 * Every layout made is read through gfs_tensor_read() (as stored and as
 * bf16).  Must never crash, leak or hang; a refusal must come with a
 * one-line message.
 */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "gatherfs/importers/import.h"
#include "gatherfs/importers/naming.h"
#include "gatherfs/readers/pickle.h"
#include "gatherfs/server/server.h"

#include "fuzz_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerInitialize(int *argc, char ***argv);

#ifndef GFS_FUZZ_NAMING_DEFAULT
#define GFS_FUZZ_NAMING_DEFAULT "tests/data/megatron/tp1_pp2"
#endif

static const char *const g_cfg[2] = { "config.json", "generation_config.json" };
static char g_dir[] = "/tmp/gfs-fuzz-naming.XXXXXX";
static char g_src[4096], g_save[4200];
static gfs_layout *g_mg;
static char g_text[2][1 << 16]; /* the saved config.json, generation_config.json */
static size_t g_len[2];

static void cleanup(void)
{
	char p[700];

	for (int i = 0; i < 2; i++) {
		snprintf(p, sizeof(p), "%s/%s", g_dir, g_cfg[i]);
		unlink(p);
	}
	rmdir(g_dir);
	gfs_layout_free(g_mg);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	const char *src = getenv("GFS_FUZZ_NAMING");
	const gfs_import_opts mg = { .naming = "megatron" };

	(void)argc;
	(void)argv;
	if (!src)
		src = GFS_FUZZ_NAMING_DEFAULT;
	if (!realpath(src, g_src) || !mkdtemp(g_dir)) {
		fprintf(stderr, "fuzz_naming: cannot resolve %s or create %s (set GFS_FUZZ_NAMING)\n", src,
			g_dir);
		abort();
	}
	atexit(cleanup);
	for (int i = 0; i < 2; i++) {
		char p[4400];
		FILE *f;

		snprintf(p, sizeof(p), "%s/hf_config/%s", g_src, g_cfg[i]);
		f = fopen(p, "rb");
		if (!f) {
			fprintf(stderr, "fuzz_naming: cannot open %s\n", p);
			abort();
		}
		g_len[i] = fread(g_text[i], 1, sizeof(g_text[i]), f);
		fclose(f);
	}
	snprintf(g_save, sizeof(g_save), "%s/legacy_torch", g_src);
	if (gfs_import(g_save, &mg, &g_mg) != GFS_OK) {
		fprintf(stderr, "fuzz_naming: %s\n", gfs_errmsg());
		abort();
	}
	return 0;
}

/* from_args(): the Hugging Face view from the args in pickle buf[0..n). */
static void from_args(const uint8_t *buf, size_t n)
{
	gfs_pickle *pk = NULL;
	const gfs_pv *args;
	gfs_arch a;
	gfs_layout *l = NULL;

	if (gfs_pickle_load(buf, n, "fuzz:data.pkl", NULL, &pk) != GFS_OK) {
		fuzz_check_refusal(NULL);
		return;
	}
	args = gfs_pv_dict_get(gfs_pickle_root(pk), "args");
	if (args && args->kind == GFS_PV_OBJECT && args->u.obj.state &&
	    args->u.obj.state->kind == GFS_PV_DICT) {
		if (gfs_arch_from_args(args->u.obj.state, "the args of fuzz", &a) != GFS_OK)
			fuzz_check_refusal(NULL);
		else if (a.family && a.vocab > 0) {
			if (gfs_naming_to_hf(g_mg, &a, "fuzz", &l) != GFS_OK)
				fuzz_check_refusal(l);
			else
				fuzz_serve_and_free(l);
		}
		gfs_arch_clear(&a);
	}
	gfs_pickle_free(pk);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	gfs_import_opts opts = { .hf_config = g_dir };
	gfs_layout *l = NULL;
	int which;

	if (size == 0)
		return 0;
	which = data[0] % 3;
	if (which == 2) {
		from_args(data + 1, size - 1);
		return 0;
	}
	fuzz_spill(g_dir, g_cfg[which], data + 1, size - 1);
	fuzz_spill(g_dir, g_cfg[!which], g_text[!which], g_len[!which]);
	if (gfs_import(g_save, &opts, &l) != GFS_OK) {
		fuzz_check_refusal(l);
		return 0;
	}
	fuzz_serve_and_free(l);
	return 0;
}
