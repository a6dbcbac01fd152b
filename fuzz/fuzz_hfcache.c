/* SPDX-License-Identifier: Apache-2.0 */
/*
 * gatherfs — libFuzzer target for Hugging Face cache repositories
 * (hfcache.h): the text of refs/ and the structure of snapshots/.
 *
 * At startup a repository models--fuzz--model is made in a temporary
 * directory, its blobs/ holding copies of a real plain model's files
 * (GFS_FUZZ_HF, or -DGFS_FUZZ_HF_DEFAULT: tests/data/plain/llama_bf16).
 * Per input, refs/ and snapshots/ are emptied and rebuilt from the input's
 * lines:
 *   line 1   the tag (-o tag=), none when empty;
 *   line 2   the bytes of refs/main (absent: no refs/main);
 *   then     "REV<TAB>NAME<TAB>TARGET": snapshots/REV/NAME, a symbolic
 *            link to TARGET ("$R" in it stands for the repository's path;
 *            "=" makes NAME an empty directory), or "@ref<TAB>NAME<TAB>TEXT":
 *            refs/NAME holding TEXT.  REV and NAME are one path component
 *            (other lines are skipped; at most 32 lines).
 * Then gfs_import() runs on the repository (detection included) and, when
 * it succeeds, every tensor is read through gfs_tensor_read() (as stored
 * and as bf16); and every entry of the snapshot gfs_hf_snapshot() picks is
 * opened with gfs_hf_open_blob(), which must return only files of blobs/.
 * Must never crash, leak or hang; a refusal must come with a one-line
 * message.
 */
#include "config.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "gatherfs/importers/hfcache.h"
#include "gatherfs/importers/import.h"
#include "gatherfs/server/server.h"

#include "fuzz_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerInitialize(int *argc, char ***argv);

#ifndef GFS_FUZZ_HF_DEFAULT
#define GFS_FUZZ_HF_DEFAULT "tests/data/plain/llama_bf16"
#endif
#define NBLOBS 3
#define MAX_LINES 32

/* The blobs: the fixture's files, under fixed hash-like names. */
static const char *const g_src_names[NBLOBS] = { "config.json", "generation_config.json",
						 "model.safetensors" };
static const char *const g_blob_names[NBLOBS] = {
	"0d6b5a7e2b8c4f1a9e3d7c6b5a4f3e2d1c0b9a8f7e6d5c4b3a2f1e0d9c8b7a6f",
	"1e7c6b8f3c9d5a2b0f4e8d7c6b5a4f3e2d1c0b9a8f7e6d5c4b3a2f1e0d9c8b7a",
	"2f8d7c9a4d0e6b3c1a5f9e8d7c6b5a4f3e2d1c0b9a8f7e6d5c4b3a2f1e0d9c8b",
};
static char g_root[] = "/tmp/gfs-fuzz-hf.XXXXXX";
static char g_repo[600], g_snaps[700], g_refs[700];
static ino_t g_blob_ino[NBLOBS];

__attribute__((noreturn)) static void die(const char *what, const char *path)
{
	fprintf(stderr, "fuzz_hfcache: %s %s (set GFS_FUZZ_HF)\n", what, path);
	abort();
}

static int rm_one(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	(void)st;
	(void)ftw;
	return flag == FTW_DP ? rmdir(path) : unlink(path);
}

/* empty(): remove everything under dir (not dir itself). */
static void empty(const char *dir)
{
	DIR *d = opendir(dir);
	const struct dirent *e;
	char p[1200];

	if (!d)
		die("cannot open", dir);
	while ((e = readdir(d)) != NULL) {
		if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
			continue;
		snprintf(p, sizeof(p), "%s/%s", dir, e->d_name);
		if (nftw(p, rm_one, 16, FTW_DEPTH | FTW_PHYS) != 0)
			die("cannot remove", p);
	}
	closedir(d);
}

static void cleanup(void)
{
	nftw(g_root, rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	const char *src = getenv("GFS_FUZZ_HF");
	static char buf[1 << 20];
	char p[1200], blobs[700];

	(void)argc;
	(void)argv;
	if (!src)
		src = GFS_FUZZ_HF_DEFAULT;
	if (!mkdtemp(g_root))
		die("cannot create", g_root);
	atexit(cleanup);
	snprintf(g_repo, sizeof(g_repo), "%s/models--fuzz--model", g_root);
	snprintf(g_snaps, sizeof(g_snaps), "%s/snapshots", g_repo);
	snprintf(g_refs, sizeof(g_refs), "%s/refs", g_repo);
	snprintf(blobs, sizeof(blobs), "%s/blobs", g_repo);
	if (mkdir(g_repo, 0700) || mkdir(g_snaps, 0700) || mkdir(g_refs, 0700) || mkdir(blobs, 0700))
		die("cannot create", g_repo);
	for (int i = 0; i < NBLOBS; i++) {
		FILE *f;
		size_t n;
		struct stat st;

		snprintf(p, sizeof(p), "%s/%s", src, g_src_names[i]);
		f = fopen(p, "rb");
		if (!f)
			die("cannot open", p);
		n = fread(buf, 1, sizeof(buf), f);
		fclose(f);
		fuzz_spill(blobs, g_blob_names[i], buf, n);
		snprintf(p, sizeof(p), "%s/%s", blobs, g_blob_names[i]);
		if (stat(p, &st) != 0)
			die("cannot stat", p);
		g_blob_ino[i] = st.st_ino;
	}
	return 0;
}

/* one_component(): s is a name we may create: one path component. */
static bool one_component(const char *s)
{
	return s[0] && strlen(s) < 256 && !strchr(s, '/') && strcmp(s, ".") != 0 &&
	       strcmp(s, "..") != 0;
}

/* add_entry(): apply one "REV\tNAME\tTARGET" or "@ref\tNAME\tTEXT" line. */
static void add_entry(char *line)
{
	char *name = strchr(line, '\t'), *target, *dollar, dir[1300], to[2000];

	if (!name || !(target = strchr(name + 1, '\t')))
		return;
	*name++ = '\0';
	*target++ = '\0';
	if (!one_component(name))
		return;
	if (strcmp(line, "@ref") == 0) {
		fuzz_spill(g_refs, name, target, strlen(target));
		return;
	}
	if (!one_component(line))
		return;
	snprintf(dir, sizeof(dir), "%s/%s", g_snaps, line);
	if (mkdir(dir, 0700) != 0 && errno != EEXIST)
		return;
	if (strcmp(target, "=") == 0) {
		snprintf(to, sizeof(to), "%s/%s", dir, name);
		mkdir(to, 0700);
		return;
	}
	dollar = strstr(target, "$R");
	if (dollar) {
		*dollar = '\0';
		snprintf(to, sizeof(to), "%s%s%s", target, g_repo, dollar + 2);
	} else {
		snprintf(to, sizeof(to), "%s", target);
	}
	snprintf(dir + strlen(dir), sizeof(dir) - strlen(dir), "/%s", name);
	unlink(dir);
	if (symlink(to, dir) != 0) /* an empty or too long target: no entry */
		return;
}

/* check_blobs(): open every entry of the snapshot tag selects as a blob. */
static void check_blobs(const char *tag)
{
	char *snap = NULL, real[PATH_MAX];
	DIR *d;
	const struct dirent *e;

	if (gfs_hf_snapshot(g_repo, tag, &snap) != GFS_OK) {
		fuzz_check_refusal(NULL);
		return;
	}
	if (realpath(snap, real) && gfs_hf_is_snapshot(real) && (d = opendir(snap)) != NULL) {
		while ((e = readdir(d)) != NULL) {
			struct stat st;
			const int fd = gfs_hf_open_blob(dirfd(d), real, e->d_name);
			bool ours = false;

			if (fd < 0)
				continue;
			if (fstat(fd, &st) != 0)
				abort();
			for (int i = 0; i < NBLOBS; i++)
				ours |= st.st_ino == g_blob_ino[i];
			close(fd);
			if (!ours) {
				fprintf(stderr, "gfs_hf_open_blob(%s) opened a file outside blobs/\n",
					e->d_name);
				abort();
			}
		}
		closedir(d);
	}
	free(snap);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char *text = malloc(size + 1), *line, *next, *tag = NULL;
	gfs_import_opts opts = { 0 };
	gfs_layout *l = NULL;

	if (!text)
		abort();
	memcpy(text, data, size);
	text[size] = '\0';
	empty(g_snaps);
	empty(g_refs);
	line = text;
	for (int n = 0; line && n < MAX_LINES; n++, line = next) {
		next = strchr(line, '\n');
		if (next)
			*next++ = '\0';
		if (n == 0)
			tag = line[0] ? line : NULL;
		else if (n == 1)
			fuzz_spill(g_refs, "main", line, strlen(line));
		else
			add_entry(line);
	}
	opts.tag = tag;
	if (gfs_import(g_repo, &opts, &l) != GFS_OK)
		fuzz_check_refusal(l);
	else
		fuzz_serve_and_free(l);
	check_blobs(tag);
	free(text);
	return 0;
}
