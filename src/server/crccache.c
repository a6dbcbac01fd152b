/* SPDX-License-Identifier: Apache-2.0 */
/*
 * gatherfs — the persistent CRC cache: entry files, the directory's lock
 * and least-recently-used eviction (see crccache.h).
 */
#include "config.h"

#include <assert.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "gatherfs/server/crccache.h"
#include "gatherfs/util/common.h"

#define ENTRY_EXT ".crc"
#define TMP_EXT ".tmp"
static const char LOCK_NAME[] = ".lock";

/* An entry seen while evicting. */
typedef struct cc_entry {
	char *name;
	struct timespec mtime;
	uint64_t size;
} cc_entry;

static bool ends_with(const char *s, const char *suffix)
{
	const size_t n = strlen(s), k = strlen(suffix);

	return n >= k && strcmp(s + n - k, suffix) == 0;
}

/* is_entry_name(): a plain file name ending in .crc, not hidden. */
static bool is_entry_name(const char *name)
{
	return name[0] != '.' && !strchr(name, '/') && ends_with(name, ENTRY_EXT) &&
	       strlen(name) > strlen(ENTRY_EXT);
}

/* is_tmp_name(): a temporary file of an entry being written: NAME.crc.*.tmp. */
static bool is_tmp_name(const char *name)
{
	return name[0] != '.' && strstr(name, ENTRY_EXT ".") && ends_with(name, TMP_EXT);
}

bool gfs_crccache_get(const gfs_crccache *c, const char *name, void *buf, size_t cap,
		      size_t *len)
{
	struct stat st;
	size_t got = 0;
	bool ok;
	int dfd, fd;

	assert(is_entry_name(name));
	if (!c || !c->dir)
		return false;
	dfd = open(c->dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (dfd < 0)
		return false;
	fd = openat(dfd, name, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY);
	close(dfd);
	if (fd < 0)
		return false;
	ok = fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && (uint64_t)st.st_size <= cap;
	while (ok && got < (size_t)st.st_size) {
		const ssize_t n = read(fd, (char *)buf + got, (size_t)st.st_size - got);

		if (n < 0 && errno == EINTR)
			continue;
		ok = n > 0;
		if (ok)
			got += (size_t)n;
	}
	if (ok) /* used now: the last to be evicted */
		(void)futimens(fd, NULL);
	close(fd);
	*len = got;
	return ok;
}

/* mkdirs(): create dir and its missing parents (mode 0700); best effort. */
static void mkdirs(const char *dir)
{
	char *p = gfs_strdup(dir);

	if (!p)
		return;
	for (char *s = strchr(p + 1, '/'); s; s = strchr(s + 1, '/')) {
		*s = '\0';
		(void)mkdir(p, 0700);
		*s = '/';
	}
	(void)mkdir(p, 0700);
	free(p);
}

/* write_new(): create name in dfd (it must not exist) holding data[0..len). */
static bool write_new(int dfd, const char *name, const void *data, size_t len)
{
	const int fd = openat(dfd, name, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW,
			      0600);
	size_t done = 0;
	bool ok = fd >= 0;

	while (ok && done < len) {
		const ssize_t n = write(fd, (const char *)data + done, len - done);

		if (n < 0 && errno == EINTR)
			continue;
		ok = n > 0;
		if (ok)
			done += (size_t)n;
	}
	if (fd >= 0 && close(fd) != 0)
		ok = false;
	return ok;
}

static int cmp_older(const void *a, const void *b)
{
	const cc_entry *x = a, *y = b;

	if (x->mtime.tv_sec != y->mtime.tv_sec)
		return x->mtime.tv_sec < y->mtime.tv_sec ? -1 : 1;
	if (x->mtime.tv_nsec != y->mtime.tv_nsec)
		return x->mtime.tv_nsec < y->mtime.tv_nsec ? -1 : 1;
	return strcmp(x->name, y->name);
}

/*
 * make_room(): under the lock, remove the temporary files left over by
 * daemons that died writing them (all but keep, ours) and the least
 * recently used entries other than `name` until they and len more bytes
 * fit in max.  @return whether they fit.
 */
static bool make_room(int dfd, const char *name, const char *keep, size_t len, uint64_t max)
{
	const int lfd = openat(dfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	DIR *d = lfd >= 0 ? fdopendir(lfd) : NULL;
	cc_entry *ents = NULL;
	size_t n = 0, cap = 0;
	uint64_t total = 0;
	const struct dirent *de;
	bool ok = d != NULL;

	if (!d && lfd >= 0)
		close(lfd);
	while (ok && (de = readdir(d))) {
		struct stat st;

		if (strcmp(de->d_name, keep) != 0 && is_tmp_name(de->d_name)) {
			(void)unlinkat(dfd, de->d_name, 0);
			continue;
		}
		if (!is_entry_name(de->d_name) || strcmp(de->d_name, name) == 0 ||
		    fstatat(dfd, de->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0 ||
		    !S_ISREG(st.st_mode))
			continue;
		ok = gfs_grow((void **)&ents, &cap, n, sizeof(*ents), 64);
		if (ok)
			ents[n].name = gfs_strdup(de->d_name);
		ok = ok && ents[n].name;
		if (ok) {
			ents[n].mtime = st.st_mtim;
			ents[n].size = (uint64_t)st.st_size;
			total += ents[n++].size;
		}
	}
	if (d)
		closedir(d);
	if (ok && n)
		qsort(ents, n, sizeof(*ents), cmp_older);
	for (size_t i = 0; ok && i < n && total + len > max; i++)
		if (unlinkat(dfd, ents[i].name, 0) == 0 || errno == ENOENT)
			total -= ents[i].size;
	for (size_t i = 0; i < n; i++)
		free(ents[i].name);
	free(ents);
	return ok && total + len <= max;
}

void gfs_crccache_put(const gfs_crccache *c, const char *name, const void *data, size_t len)
{
	static atomic_uint seq;
	char tmp[NAME_MAX + 1];
	int dfd, lock;

	assert(is_entry_name(name));
	if (!c || !c->dir || len > c->max ||
	    (size_t)snprintf(tmp, sizeof(tmp), "%s.%ld.%u" TMP_EXT, name, (long)getpid(),
			     atomic_fetch_add(&seq, 1)) >= sizeof(tmp))
		return;
	mkdirs(c->dir);
	dfd = open(c->dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (dfd < 0)
		return;
	lock = openat(dfd, LOCK_NAME, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
	if (lock >= 0 && flock(lock, LOCK_EX) == 0) {
		if (write_new(dfd, tmp, data, len) && make_room(dfd, name, tmp, len, c->max)) {
			if (renameat(dfd, tmp, dfd, name) != 0)
				(void)unlinkat(dfd, tmp, 0);
		} else {
			(void)unlinkat(dfd, tmp, 0);
		}
	}
	if (lock >= 0)
		close(lock); /* unlocks */
	close(dfd);
}
