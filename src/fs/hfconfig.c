/* SPDX-License-Identifier: Apache-2.0 */
/*
 * gatherfs — config.json and generation_config.json as served (see config.h).
 */
#include "config.h"

#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "gatherfs/fs/hfconfig.h"
#include "gatherfs/importers/hfcache.h"
#include "gatherfs/util/json.h"

#define CONFIG_MAX ((uint64_t)1 << 24)

const char *const gfs_config_names[GFS_CONFIG_NNAMES] = { "config.json", "generation_config.json" };

/*
 * open_root_file(): open name in directory root for reading: a regular
 * file, or a symbolic link that resolves beneath root (or a snapshot's link
 * into blobs/).  @return the descriptor, or -1 with errno: ENOENT when
 * there is none the mount would show (missing, not a regular file, a link
 * that leads elsewhere), another when it cannot be opened.
 */
static int open_root_file(const char *root, const char *name)
{
	char real[PATH_MAX], target[PATH_MAX];
	char *path = gfs_path_join(root, name);
	struct stat st;
	int fd = -1;

	if (!path) {
		errno = ENOMEM;
		return -1;
	}
	errno = ENOENT;
	if (lstat(path, &st) != 0) {
		free(path);
		return -1;
	}
	if (S_ISREG(st.st_mode)) {
		fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NOCTTY | O_NONBLOCK);
	} else if (S_ISLNK(st.st_mode) && realpath(root, real)) {
		const size_t n = strlen(real);
		int dfd;

		if (realpath(path, target) && strncmp(target, real, n) == 0 && target[n] == '/')
			fd = open(target, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NOCTTY | O_NONBLOCK);
		else if (gfs_hf_is_snapshot(real) &&
			 (dfd = open(real, O_RDONLY | O_DIRECTORY | O_CLOEXEC)) >= 0) {
			fd = gfs_hf_open_blob(dfd, real, name);
			close(dfd);
		}
		if (fd < 0 && errno != EACCES && errno != EIO && errno != ENOMEM)
			errno = ENOENT; /* a link the mount does not follow either */
	}
	free(path);
	return fd;
}

/* read_root_file(): root/name's bytes as a new string in *text, or NULL if none. */
static gfs_err read_root_file(const char *root, const char *name, char **text, size_t *len)
{
	const int fd = open_root_file(root, name);
	struct stat st;
	gfs_err err = GFS_OK;

	*text = NULL;
	*len = 0;
	if (fd < 0)
		return errno == ENOENT ? GFS_OK : errno == ENOMEM
			? gfs_fail(GFS_ERR_NOMEM, "out of memory")
			: gfs_fail(GFS_ERR_IO, "%s/%s: cannot open: %s", root, name, strerror(errno));
	if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
		close(fd);
		return GFS_OK;
	}
	if ((uint64_t)st.st_size > CONFIG_MAX)
		err = gfs_fail(GFS_ERR_FORMAT, "%s/%s: larger than 16 MiB", root, name);
	if (!err && !(*text = malloc((size_t)st.st_size + 1)))
		err = gfs_fail(GFS_ERR_NOMEM, "out of memory");
	if (!err)
		err = gfs_pread_full(fd, *text, (size_t)st.st_size, 0, name);
	close(fd);
	if (err) {
		free(*text);
		*text = NULL;
		return err;
	}
	(*text)[st.st_size] = '\0';
	*len = (size_t)st.st_size;
	return GFS_OK;
}

/* set_item(): root's key (added if add and missing) becomes value; *changed if it did. */
static bool set_item(cJSON *root, const char *key, cJSON *value, bool add, bool *changed)
{
	cJSON *old = cJSON_GetObjectItemCaseSensitive(root, key);

	if (!value)
		return false;
	if ((!old && !add) || (old && cJSON_Compare(old, value, true))) {
		cJSON_Delete(value);
		return true;
	}
	*changed = true;
	if (old)
		return cJSON_ReplaceItemInObjectCaseSensitive(root, key, value);
	if (!cJSON_AddItemToObject(root, key, value)) {
		cJSON_Delete(value);
		return false;
	}
	return true;
}

/* rewrite(): config.json text[0..len) made to agree with what is served. */
static gfs_err rewrite(const char *label, gfs_dtype want, bool untied, char **text, size_t *len,
		       bool *changed)
{
	cJSON *root = NULL;
	gfs_err err = gfs_json_parse(*text, *len, label, &root);
	bool ok = true;

	if (!err && !cJSON_IsObject(root))
		err = gfs_fail(GFS_ERR_FORMAT, "%s: not a JSON object", label);
	if (err) {
		cJSON_Delete(root);
		return err;
	}
	if (untied)
		ok = set_item(root, "tie_word_embeddings", cJSON_CreateFalse(), true, changed);
	if (ok && want != GFS_DT_INVALID) {
		const char *dt = gfs_dtype_name(want);
		const bool has5 = cJSON_GetObjectItemCaseSensitive(root, "dtype") != NULL;

		ok = set_item(root, "torch_dtype", cJSON_CreateString(dt), !has5, changed) &&
		     set_item(root, "dtype", cJSON_CreateString(dt), false, changed);
	}
	if (ok && *changed) {
		char *out = cJSON_Print(root);

		ok = out != NULL;
		if (ok) {
			free(*text);
			*text = out;
			*len = strlen(out);
		}
	}
	cJSON_Delete(root);
	return ok ? GFS_OK : gfs_fail(GFS_ERR_NOMEM, "out of memory");
}

gfs_err gfs_config_served(const gfs_layout *l, const char *name, gfs_dtype want, bool untied,
			  char **text, size_t *len, bool *rewritten)
{
	bool changed = false, generated;
	gfs_err err = GFS_OK;

	assert(strcmp(name, gfs_config_names[0]) == 0 || strcmp(name, gfs_config_names[1]) == 0);
	*text = NULL;
	*len = 0;
	for (size_t i = 0; i < l->ntexts && !*text; i++) {
		if (strcmp(l->texts[i].name, name) != 0)
			continue;
		*text = gfs_strdup(l->texts[i].text);
		if (!*text)
			return gfs_fail(GFS_ERR_NOMEM, "out of memory");
		*len = strlen(*text);
	}
	generated = *text != NULL;
	if (!generated && l->root_dir)
		err = read_root_file(l->root_dir, name, text, len);
	if (!err && *text && strcmp(name, "config.json") == 0 &&
	    (untied || want != GFS_DT_INVALID))
		err = rewrite(name, want, untied, text, len, &changed);
	/* a generated or rewritten text ends in a newline, as the mount serves it */
	if (!err && *text && (changed || generated) &&
	    (*len == 0 || (*text)[*len - 1] != '\n')) {
		char *t = realloc(*text, *len + 2);

		if (!t) {
			err = gfs_fail(GFS_ERR_NOMEM, "out of memory");
		} else {
			t[(*len)++] = '\n';
			t[*len] = '\0';
			*text = t;
		}
	}
	if (err) {
		free(*text);
		*text = NULL;
		*len = 0;
	}
	if (rewritten)
		*rewritten = changed;
	return err;
}
