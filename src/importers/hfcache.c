/* SPDX-License-Identifier: Apache-2.0 */
/*
 * gatherfs — Hugging Face cache repositories: a repository's snapshot, and
 * a snapshot's links into blobs/ (see hfcache.h).
 */
#include "config.h"

#include <assert.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "gatherfs/importers/hfcache.h"
#include "gatherfs/util/sha1.h"
#include "gatherfs/util/sha256.h"

#define REPO_PREFIX "models--"
#define ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))

/* is_dir_in(): dir/name is a directory (following links, as the import does). */
static bool is_dir_in(const char *dir, size_t dlen, const char *name)
{
	char path[PATH_MAX];
	struct stat st;

	return (size_t)snprintf(path, sizeof(path), "%.*s/%s", (int)dlen, dir, name) <
		       sizeof(path) &&
	       stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

/* repo_at(): dir[0..len) (no trailing '/') is a repository. */
static bool repo_at(const char *dir, size_t len)
{
	size_t base = len;

	while (base > 0 && dir[base - 1] != '/')
		base--;
	return len - base > strlen(REPO_PREFIX) &&
	       strncmp(dir + base, REPO_PREFIX, strlen(REPO_PREFIX)) == 0 &&
	       is_dir_in(dir, len, "blobs") && is_dir_in(dir, len, "snapshots") &&
	       is_dir_in(dir, len, "refs");
}

bool gfs_hf_is_repo(const char *dir)
{
	size_t len = strlen(dir);

	while (len > 1 && dir[len - 1] == '/')
		len--;
	return repo_at(dir, len);
}

/* rev_ok(): rev[0..len) is one path component fit to name a revision. */
static bool rev_ok(const char *rev, size_t len)
{
	if (len == 0 || len > GFS_HF_REV_MAX || (len == 1 && rev[0] == '.') ||
	    (len == 2 && rev[0] == '.' && rev[1] == '.'))
		return false;
	for (size_t i = 0; i < len; i++)
		if (rev[i] == '/' || (unsigned char)rev[i] < 0x20 || rev[i] == 0x7f)
			return false;
	return true;
}

/*
 * read_ref(): the revision the regular file repo/refs/name (not a link)
 * holds (trailing white space dropped) into rev[GFS_HF_REV_MAX + 1]; its
 * text is never quoted (a link swapped in could name a secret).  @return
 * GFS_OK, GFS_ERR_NOTFOUND if there is no such file, or an error.
 */
static gfs_err read_ref(const char *repo, const char *name, char *rev)
{
	char path[PATH_MAX];
	char buf[GFS_HF_REV_MAX + 2];
	ssize_t n;
	int fd;
	gfs_err err;

	if ((size_t)snprintf(path, sizeof(path), "%s/refs/%s", repo, name) >= sizeof(path))
		return gfs_fail(GFS_ERR_LIMIT, "%s: path too long", repo);
	err = gfs_open_regular(path, GFS_OPEN_NOFOLLOW, &fd, NULL);
	if (err)
		return err;
	n = pread(fd, buf, sizeof(buf), 0);
	close(fd);
	if (n < 0)
		return gfs_fail(GFS_ERR_IO, "%s: cannot read: %s", path, strerror(errno));
	while (n > 0 && strchr(" \t\r\n", buf[n - 1]))
		n--;
	if (!rev_ok(buf, (size_t)n))
		return gfs_fail(GFS_ERR_FORMAT,
				"%s: does not name a revision (one path component of 1 to %d bytes)",
				path, GFS_HF_REV_MAX);
	memcpy(rev, buf, (size_t)n);
	rev[n] = '\0';
	return GFS_OK;
}

/* snapshot_path(): malloc'd repo/snapshots/rev, if a directory; else NULL. */
static char *snapshot_path(const char *repo, const char *rev)
{
	char *p = malloc(strlen(repo) + strlen(rev) + sizeof("/snapshots/"));
	struct stat st;

	if (!p)
		return NULL;
	sprintf(p, "%s/snapshots/%s", repo, rev);
	if (stat(p, &st) == 0 && S_ISDIR(st.st_mode))
		return p;
	free(p);
	errno = ENOENT;
	return NULL;
}

gfs_err gfs_hf_snapshot(const char *repo, const char *rev, char **out)
{
	char ref[GFS_HF_REV_MAX + 1];
	const char *want = rev ? rev : "main";
	gfs_err err;

	*out = NULL;
	if (!rev_ok(want, strlen(want)))
		return gfs_fail(GFS_ERR_INVAL,
				"%s: tag '%s': not a revision (one path component of 1 to %d bytes)",
				repo, want, GFS_HF_REV_MAX);
	if (rev) {
		*out = snapshot_path(repo, rev);
		if (*out)
			return GFS_OK;
		if (errno == ENOMEM)
			return gfs_fail(GFS_ERR_NOMEM, "out of memory");
	}
	err = read_ref(repo, want, ref);
	if (err == GFS_ERR_NOTFOUND && rev)
		return gfs_fail(GFS_ERR_NOTFOUND, "%s: no snapshot or ref '%s' (snapshots/%s, refs/%s)",
				repo, rev, rev, rev);
	if (err == GFS_ERR_NOTFOUND)
		return gfs_fail(GFS_ERR_NOTFOUND,
				"%s: no refs/main: pick a snapshot with a tag (-o tag=REV)", repo);
	if (err)
		return err;
	*out = snapshot_path(repo, ref);
	if (*out)
		return GFS_OK;
	if (errno == ENOMEM)
		return gfs_fail(GFS_ERR_NOMEM, "out of memory");
	return gfs_fail(GFS_ERR_NOTFOUND,
			"%s: refs/%s names a revision that is no directory in snapshots/", repo, want);
}

/* repo_len(): the length of REPO in canonical real = REPO/snapshots/REV, or 0. */
static size_t repo_len(const char *real)
{
	const char *rev = strrchr(real, '/');
	static const char snaps[] = "/snapshots";
	const size_t sl = sizeof(snaps) - 1;
	size_t len;

	if (!rev || rev == real || !rev[1])
		return 0;
	len = (size_t)(rev - real);
	if (len <= sl || strncmp(real + len - sl, snaps, sl) != 0)
		return 0;
	return len - sl;
}

bool gfs_hf_is_snapshot(const char *real)
{
	const size_t len = repo_len(real);

	return len > 0 && repo_at(real, len);
}

/*
 * blob_of(): the FILE of link text `text` in snapshot real (whose
 * repository is real[0..rlen)) if the text is "../../blobs/FILE" (with
 * "." and empty components allowed) or "REPO/blobs/FILE"; else NULL.
 * text is modified.
 */
static const char *blob_of(char *text, const char *real, size_t rlen)
{
	const char *want[] = { "..", "..", "blobs" };
	size_t k = 0;
	char *s = text, *comp = NULL;

	if (text[0] == '/') {
		static const char blobs[] = "/blobs/";

		if (strncmp(text, real, rlen) != 0 || strncmp(text + rlen, blobs, 7) != 0)
			return NULL;
		comp = text + rlen + sizeof(blobs) - 1;
		return rev_ok(comp, strlen(comp)) ? comp : NULL;
	}
	for (char *slash; s; s = slash ? slash + 1 : NULL) {
		slash = strchr(s, '/');
		if (slash)
			*slash = '\0';
		if (!s[0] || strcmp(s, ".") == 0)
			continue;
		if (k < ARRAY_LEN(want)) {
			if (strcmp(s, want[k]) != 0)
				return NULL;
		} else if (k == ARRAY_LEN(want) && strcmp(s, "..") != 0) {
			comp = s;
		} else {
			return NULL;
		}
		k++;
	}
	return k == ARRAY_LEN(want) + 1 ? comp : NULL;
}

/* open_blob(): gfs_hf_open_blob(), the blob's name copied into blob_name[PATH_MAX]. */
static int open_blob(int dfd, const char *real, const char *name, char *blob_name)
{
	char text[PATH_MAX];
	const size_t rlen = repo_len(real);
	const char *blob;
	ssize_t n;
	int rfd, bfd, fd;

	assert(rlen > 0);
	n = readlinkat(dfd, name, text, sizeof(text));
	if (n < 0)
		return -1;
	if ((size_t)n >= sizeof(text)) {
		errno = EXDEV;
		return -1;
	}
	text[n] = '\0';
	blob = blob_of(text, real, rlen);
	if (!blob) {
		errno = EXDEV;
		return -1;
	}
	snprintf(blob_name, PATH_MAX, "%s", blob);
	rfd = openat(dfd, "../..", O_PATH | O_DIRECTORY | O_CLOEXEC);
	if (rfd < 0)
		return -1;
	bfd = openat(rfd, "blobs", O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	close(rfd);
	if (bfd < 0)
		return -1;
	fd = openat(bfd, blob, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
	if (fd < 0) {
		const int e = errno;

		close(bfd);
		errno = e;
		return -1;
	}
	close(bfd);
	return fd;
}

int gfs_hf_open_blob(int dfd, const char *real, const char *name)
{
	char blob[PATH_MAX];

	return open_blob(dfd, real, name, blob);
}

/* is_hex(): s is exactly n lower-case hex digits. */
static bool is_hex(const char *s, size_t n)
{
	return strlen(s) == n && strspn(s, "0123456789abcdef") == n;
}

/*
 * hash_blob(): the hex hash of fd's contents its name says (64 hex digits:
 * SHA-256; 40: git's blob SHA-1 of "blob LEN\0" + contents) into got.
 */
static gfs_err hash_blob(int fd, const char *label, bool sha1, char got[65])
{
	static const char digits[] = "0123456789abcdef";
	enum { CHUNK = 1 << 20 };
	uint8_t *buf = malloc(CHUNK), dig[32];
	struct stat st;
	gfs_sha256 c256;
	gfs_sha1 c1;
	uint64_t off = 0;
	gfs_err err = GFS_OK;

	if (!buf)
		return gfs_fail(GFS_ERR_NOMEM, "out of memory");
	if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode))
		err = gfs_fail(GFS_ERR_IO, "%s: not a regular file", label);
	gfs_sha256_init(&c256);
	gfs_sha1_init(&c1);
	if (!err && sha1) {
		char head[32];
		const int hn = snprintf(head, sizeof(head), "blob %llu", (unsigned long long)st.st_size);

		gfs_sha1_update(&c1, head, (size_t)hn + 1); /* with its NUL */
	}
	while (!err && off < (uint64_t)st.st_size) {
		const size_t n = (uint64_t)st.st_size - off < CHUNK ? (size_t)((uint64_t)st.st_size - off)
								    : CHUNK;

		err = gfs_pread_full(fd, buf, n, off, label);
		if (!err && sha1)
			gfs_sha1_update(&c1, buf, n);
		else if (!err)
			gfs_sha256_update(&c256, buf, n);
		off += n;
	}
	free(buf);
	if (err)
		return err;
	if (sha1)
		gfs_sha1_final(&c1, dig);
	else
		gfs_sha256_final(&c256, dig);
	for (int i = 0; i < (sha1 ? 20 : 32); i++) {
		got[2 * i] = digits[dig[i] >> 4];
		got[2 * i + 1] = digits[dig[i] & 15];
	}
	got[sha1 ? 40 : 64] = '\0';
	return GFS_OK;
}

gfs_err gfs_hf_verify(const char *snapshot, gfs_hf_blob_fn fn, void *ctx)
{
	char real[PATH_MAX];
	DIR *d;
	gfs_err err = GFS_OK;

	if (!realpath(snapshot, real) || !gfs_hf_is_snapshot(real))
		return gfs_fail(GFS_ERR_INVAL, "%s: not a snapshot of a Hugging Face cache repository",
				snapshot);
	d = opendir(real);
	if (!d)
		return gfs_fail(GFS_ERR_IO, "%s: cannot open directory: %s", real, strerror(errno));
	for (;;) {
		char blob[PATH_MAX], got[65];
		const struct dirent *de;
		int fd;

		errno = 0;
		de = readdir(d);
		if (!de) {
			if (errno)
				err = gfs_fail(GFS_ERR_IO, "%s: cannot list: %s", real, strerror(errno));
			break;
		}
		if (de->d_type != DT_LNK)
			continue;
		fd = open_blob(dirfd(d), real, de->d_name, blob);
		if (fd < 0)
			continue; /* not a link into blobs/: the views do not show it either */
		if (is_hex(blob, 64) || is_hex(blob, 40)) {
			err = hash_blob(fd, de->d_name, is_hex(blob, 40), got);
			if (!err)
				fn(ctx, de->d_name, blob, strcmp(got, blob) == 0 ? NULL : got);
		}
		close(fd);
		if (err)
			break;
	}
	closedir(d);
	return err;
}
