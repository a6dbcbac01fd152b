/* SPDX-License-Identifier: Apache-2.0 */
/*
 * gatherfs — error messages, allocation wrappers and full preads.
 */
#include "config.h"

#include <assert.h>
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <limits.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <sys/vfs.h>
#include <unistd.h>

#include "gatherfs/util/common.h"

static _Thread_local char errmsg[GFS_ERRMSG_MAX];

/* Messages quote names and strings from untrusted files: a control byte
 * there would break the one-line contract (or fake a second log line), so
 * every one becomes '?'. */
static void one_line(char *s)
{
	for (; *s; s++)
		if ((unsigned char)*s < 0x20 || *s == 0x7f)
			*s = '?';
}

const char *gfs_strerror(gfs_err err)
{
	switch (err) {
	case GFS_OK: return "success";
	case GFS_ERR_NOMEM: return "out of memory";
	case GFS_ERR_IO: return "I/O error";
	case GFS_ERR_FORMAT: return "format error";
	case GFS_ERR_UNSUPPORTED: return "unsupported";
	case GFS_ERR_LIMIT: return "limit exceeded";
	case GFS_ERR_NOTFOUND: return "not found";
	case GFS_ERR_INVAL: return "invalid argument";
	}
	return "unknown error";
}

gfs_err gfs_failv(gfs_err err, const char *fmt, va_list ap)
{
	vsnprintf(errmsg, sizeof(errmsg), fmt, ap);
	one_line(errmsg);
	return err;
}

gfs_err gfs_fail(gfs_err err, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	gfs_failv(err, fmt, ap);
	va_end(ap);
	return err;
}

gfs_err gfs_fail_prefix(gfs_err err, const char *fmt, ...)
{
	char prefix[GFS_ERRMSG_MAX];
	char old[GFS_ERRMSG_MAX];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(prefix, sizeof(prefix), fmt, ap);
	va_end(ap);
	memcpy(old, errmsg, sizeof(old));
	/* Truncation is acceptable for a message; the check silences the warning. */
	if (snprintf(errmsg, sizeof(errmsg), "%s: %s", prefix,
		     old[0] ? old : gfs_strerror(err)) >= (int)sizeof(errmsg))
		errmsg[sizeof(errmsg) - 1] = '\0';
	one_line(errmsg);
	return err;
}

bool gfs_escape_has(unsigned set, unsigned char c)
{
	return ((set & GFS_ESC_CONTROL) && (c < 0x20 || c == 0x7f)) ||
	       ((set & GFS_ESC_PATH) && (c == '%' || c == '/'));
}

size_t gfs_escape(const char *s, size_t n, unsigned set, char *out)
{
	static const char hex[] = "0123456789ABCDEF";
	char *p = out;

	assert((s || !n) && out);
	for (size_t i = 0; i < n; i++) {
		const unsigned char c = (unsigned char)s[i];

		if (gfs_escape_has(set, c)) {
			*p++ = '%';
			*p++ = hex[c >> 4];
			*p++ = hex[c & 15];
		} else {
			*p++ = (char)c;
		}
	}
	*p = '\0';
	return (size_t)(p - out);
}

const char *gfs_shown_key(const char *s, size_t n, char *buf)
{
	size_t k;

	assert(s && buf);
	k = gfs_escape(s, n < GFS_SHOWN_KEY_MAX ? n : GFS_SHOWN_KEY_MAX,
		       GFS_ESC_CONTROL | GFS_ESC_PATH, buf);
	if (n > GFS_SHOWN_KEY_MAX)
		memcpy(buf + k, "...", 4);
	assert(strlen(buf) < GFS_SHOWN_KEY_BUF);
	return buf;
}

const char *gfs_errmsg(void)
{
	return errmsg;
}

void *gfs_calloc(size_t n, size_t size)
{
	if (n == 0 || size == 0)
		return calloc(1, 1);
	return calloc(n, size);
}

void *gfs_iobuf(size_t n)
{
	void *p = NULL;

	assert(n > 0);
	return posix_memalign(&p, GFS_IOBUF_ALIGN, n) == 0 ? p : NULL;
}

void *gfs_reallocarray(void *p, size_t n, size_t size)
{
	size_t total;

	if (__builtin_mul_overflow(n, size, &total))
		return NULL;
	return realloc(p, total ? total : 1);
}

bool gfs_grow(void **arr, size_t *cap, size_t len, size_t elem, size_t first)
{
	size_t ncap;
	void *n;

	assert(len <= *cap && first > 0);
	if (len < *cap)
		return true;
	ncap = *cap ? *cap * 2 : first;
	if (ncap < *cap)
		return false;
	n = gfs_reallocarray(*arr, ncap, elem);
	if (!n)
		return false;
	*arr = n;
	*cap = ncap;
	return true;
}

char *gfs_strndup(const char *s, size_t n)
{
	char *d = malloc(n + 1);

	if (!d)
		return NULL;
	memcpy(d, s, n);
	d[n] = '\0';
	return d;
}

char *gfs_path_join(const char *dir, const char *name)
{
	const size_t n = strlen(dir) + 1 + strlen(name) + 1;
	char *p = malloc(n);

	if (p)
		snprintf(p, n, "%s/%s", dir, name);
	return p;
}

char *gfs_strdup(const char *s)
{
	return gfs_strndup(s, strlen(s));
}

void gfs_buf_put(gfs_buf *b, const void *data, size_t n)
{
	if (b->oom)
		return;
	if (b->cap - b->len <= n) {
		size_t cap = b->cap ? b->cap : 4096;
		uint8_t *p;

		while (cap - b->len <= n) {
			if (cap > SIZE_MAX / 2) {
				b->oom = true;
				return;
			}
			cap *= 2;
		}
		p = realloc(b->p, cap);
		if (!p) {
			b->oom = true;
			return;
		}
		b->p = p;
		b->cap = cap;
	}
	memcpy(b->p + b->len, data, n);
	b->len += n;
	b->p[b->len] = '\0';
}

bool gfs_fd_remote(int fd)
{
	static const unsigned long remote[] = {
		0x6969,     /* NFS */
		0x65735546, /* FUSE */
		0xff534d42, /* CIFS */
		0xfe534d42, /* SMB2 */
		0x517b,     /* SMB */
		0x0bd00bd0, /* Lustre */
		0x00c36400, /* Ceph */
		0x47504653, /* GPFS */
		0x01021997, /* 9P */
		0x6b414653, /* AFS */
		0x19830326, /* BeeGFS */
		0x013111a8, /* IBRIX */
		0x73757245, /* Coda */
	};
	struct statfs sf;

	if (fstatfs(fd, &sf) != 0)
		return false;
	for (size_t i = 0; i < sizeof(remote) / sizeof(remote[0]); i++)
		if ((unsigned long)sf.f_type == remote[i])
			return true;
	return false;
}

bool gfs_fd_cached(int fd, uint64_t off)
{
	char b;
	struct iovec v = { .iov_base = &b, .iov_len = 1 };

	return preadv2(fd, &v, 1, (off_t)off, RWF_NOWAIT) == 1;
}

gfs_err gfs_pread_full(int fd, void *buf, size_t len, uint64_t off,
		       const char *label)
{
	uint8_t *p = buf;

	while (len > 0) {
		const ssize_t n = pread(fd, p, len, (off_t)off);

		if (n < 0) {
			if (errno == EINTR)
				continue;
			return gfs_fail(GFS_ERR_IO, "%s: read at offset %llu failed: %s",
					label, (unsigned long long)off, strerror(errno));
		}
		if (n == 0)
			return gfs_fail(GFS_ERR_FORMAT,
					"%s: truncated: %zu bytes missing at offset %llu",
					label, len, (unsigned long long)off);
		p += n;
		len -= (size_t)n;
		off += (uint64_t)n;
	}
	return GFS_OK;
}

gfs_err gfs_open_regular(const char *path, unsigned flags, int *fd, struct stat *st)
{
	struct stat own;
	const int fl = O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK |
		       ((flags & GFS_OPEN_NOFOLLOW) ? O_NOFOLLOW : 0);

	assert(path && fd);
	if (!st)
		st = &own;
	*fd = open(path, fl);
	if (*fd < 0) {
		if (errno == ENOENT)
			return gfs_fail(GFS_ERR_NOTFOUND, "%s: cannot open: %s", path, strerror(errno));
		if (errno == ELOOP && (flags & GFS_OPEN_NOFOLLOW))
			return gfs_fail(GFS_ERR_FORMAT, "%s: a symbolic link: refused (give the file itself)",
					path);
		return gfs_fail(GFS_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
	}
	if (fstat(*fd, st) != 0 || !S_ISREG(st->st_mode) ||
	    fcntl(*fd, F_SETFL, fcntl(*fd, F_GETFL) & ~O_NONBLOCK) != 0) {
		close(*fd);
		*fd = -1;
		return gfs_fail(GFS_ERR_FORMAT, "%s: not a regular file", path);
	}
	return GFS_OK;
}

gfs_err gfs_read_meta(const char *path, uint64_t max, unsigned flags, char **text, size_t *len)
{
	struct stat st;
	int fd;
	gfs_err err;

	*text = NULL;
	*len = 0;
	err = gfs_open_regular(path, flags, &fd, &st);
	if (err)
		return err;
	if ((uint64_t)st.st_size > max) {
		close(fd);
		return gfs_fail(GFS_ERR_LIMIT, "%s: larger than %llu bytes: refused", path,
				(unsigned long long)max);
	}
	*text = malloc((size_t)st.st_size + 1);
	if (!*text) {
		close(fd);
		return gfs_fail(GFS_ERR_NOMEM, "out of memory");
	}
	err = gfs_pread_full(fd, *text, (size_t)st.st_size, 0, path);
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

gfs_err gfs_read_text(const char *path, uint64_t max, char **text, size_t *len)
{
	return gfs_read_meta(path, max, 0, text, len);
}

size_t gfs_dir_matches(const char *dir, bool (*match)(const char *path, const char *name),
		       char *first, size_t nf, char *list, size_t n)
{
	DIR *d;
	const struct dirent *de;
	size_t count = 0, k = 0;

	assert(dir && match && first && nf > 0 && list && n > 0);
	first[0] = list[0] = '\0';
	d = opendir(dir);
	if (!d)
		return 0;
	while ((de = readdir(d))) {
		char path[PATH_MAX];

		if (strlen(de->d_name) >= nf ||
		    (size_t)snprintf(path, sizeof(path), "%s/%s", dir, de->d_name) >= sizeof(path) ||
		    !match(path, de->d_name))
			continue;
		if (count++ == 0)
			snprintf(first, nf, "%s", de->d_name);
		if (k < n) {
			const int w = snprintf(list + k, n - k, "%s%s", k ? ", " : "", de->d_name);

			k = w < 0 || (size_t)w >= n - k ? n : k + (size_t)w;
			if (k == n && n > 4)
				snprintf(list + n - 4, 4, "...");
		}
	}
	closedir(d);
	return count;
}
