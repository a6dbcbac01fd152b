/* SPDX-License-Identifier: Apache-2.0 */
/*
 * latencyfs — a read-only passthrough filesystem that delays every read.
 *
 * Stands in for slow shared storage (Lustre, GPFS, NFS, object-store
 * mounts) in the benchmarks: each read request sleeps delay_us
 * microseconds, then preads from the directory it mirrors.  Requests are
 * served in parallel (one thread each, up to max_threads, default 1024), so
 * like such storage it reaches its bandwidth only with many requests in
 * flight.  Files are opened with direct_io: this layer keeps no page cache,
 * every read reaches it and pays the delay.  Not installed; bench only.
 *
 * -o cache: a caching client instead (NFS, Lustre, mountpoint-s3 with its
 * cache).  Files are opened without direct_io and with keep_cache: reads go
 * through the kernel's page cache of this mount, which stays across opens
 * (until drop_caches or the unmount); only the pages it misses reach
 * latencyfs, and each such request still pays the delay.  The kernel sends
 * them as its read-ahead does: up to max_read bytes a request (libfuse
 * offers 1 MiB, FUSE's max_pages; -o max_read=N lowers it), several in
 * flight (async reads, up to max_background), a window of the mount's bdi
 * read_ahead_kb (the kernel's 128 KiB unless raised through
 * /sys/class/bdi/MAJ:MIN/read_ahead_kb after the mount; this init offers
 * it up to 64 MiB, the kernel keeps the lower).
 *
 *   latencyfs -o delay_us=10000 [-o cache] [-o max_threads=N] SRCDIR MOUNTPOINT
 */
#define FUSE_USE_VERSION 31
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <fuse.h>
#include <limits.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

typedef struct lfs_opts {
	char *src;
	unsigned delay_us;
	int cache;
} lfs_opts;

static lfs_opts opts;
static int src_fd = -1;

/* rel(): path relative to the source dir ("." for the root). */
static const char *rel(const char *path)
{
	while (*path == '/')
		path++;
	return *path ? path : ".";
}

static void *lfs_init(struct fuse_conn_info *conn, struct fuse_config *cfg)
{
	cfg->direct_io = !opts.cache;
	cfg->kernel_cache = opts.cache;
	cfg->attr_timeout = 3600;
	cfg->entry_timeout = 3600;
	cfg->use_ino = 0;
	conn->max_background = 1024;
	conn->congestion_threshold = 1024;
	conn->max_readahead = 64u << 20;
	return NULL;
}

static int lfs_getattr(const char *path, struct stat *st, struct fuse_file_info *fi)
{
	(void)fi;
	if (fstatat(src_fd, rel(path), st, AT_SYMLINK_NOFOLLOW) < 0)
		return -errno;
	st->st_mode &= ~(mode_t)0222;
	return 0;
}

static int lfs_readdir(const char *path, void *buf, fuse_fill_dir_t fill, off_t off,
		       struct fuse_file_info *fi, enum fuse_readdir_flags flags)
{
	(void)off;
	(void)fi;
	(void)flags;
	const int fd = openat(src_fd, rel(path), O_RDONLY | O_DIRECTORY);
	if (fd < 0)
		return -errno;
	DIR *d = fdopendir(fd);
	if (!d) {
		close(fd);
		return -errno;
	}
	const struct dirent *e;
	while ((e = readdir(d)) != NULL)
		if (fill(buf, e->d_name, NULL, 0, 0))
			break;
	closedir(d);
	return 0;
}

static int lfs_readlink(const char *path, char *buf, size_t size)
{
	const ssize_t n = readlinkat(src_fd, rel(path), buf, size - 1);
	if (n < 0)
		return -errno;
	buf[n] = '\0';
	return 0;
}

static int lfs_open(const char *path, struct fuse_file_info *fi)
{
	if ((fi->flags & O_ACCMODE) != O_RDONLY)
		return -EROFS;
	const int fd = openat(src_fd, rel(path), O_RDONLY);
	if (fd < 0)
		return -errno;
	fi->fh = (uint64_t)fd;
	fi->direct_io = !opts.cache;
	fi->keep_cache = opts.cache;
	return 0;
}

static int lfs_read(const char *path, char *buf, size_t size, off_t off,
		    struct fuse_file_info *fi)
{
	(void)path;
	const struct timespec ts = { opts.delay_us / 1000000, (long)(opts.delay_us % 1000000) * 1000 };
	while (nanosleep(&ts, NULL) < 0 && errno == EINTR)
		;
	size_t done = 0;
	while (done < size) {
		const ssize_t n = pread((int)fi->fh, buf + done, size - done, off + (off_t)done);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		if (n == 0)
			break;
		done += (size_t)n;
	}
	return (int)done;
}

static int lfs_release(const char *path, struct fuse_file_info *fi)
{
	(void)path;
	close((int)fi->fh);
	return 0;
}

static const struct fuse_operations lfs_ops = {
	.init = lfs_init,
	.getattr = lfs_getattr,
	.readdir = lfs_readdir,
	.readlink = lfs_readlink,
	.open = lfs_open,
	.read = lfs_read,
	.release = lfs_release,
};

static const struct fuse_opt lfs_optspec[] = {
	{ "delay_us=%u", offsetof(lfs_opts, delay_us), 0 },
	{ "cache", offsetof(lfs_opts, cache), 1 },
	FUSE_OPT_END
};

static int lfs_arg(void *data, const char *arg, int key, struct fuse_args *out)
{
	(void)data;
	(void)out;
	if (key == FUSE_OPT_KEY_NONOPT && !opts.src) {
		opts.src = realpath(arg, NULL);
		if (!opts.src) {
			fprintf(stderr, "latencyfs: %s: %s\n", arg, strerror(errno));
			return -1;
		}
		return 0;
	}
	return 1;
}

int main(int argc, char **argv)
{
	struct fuse_args args = FUSE_ARGS_INIT(argc, argv);
	int rc = 1;
	if (fuse_opt_parse(&args, &opts, lfs_optspec, lfs_arg) < 0)
		goto out;
	if (!opts.src) {
		fprintf(stderr, "usage: latencyfs -o delay_us=N [-o cache] [-o max_threads=N] SRCDIR MOUNTPOINT\n");
		goto out;
	}
	src_fd = open(opts.src, O_RDONLY | O_DIRECTORY);
	if (src_fd < 0) {
		fprintf(stderr, "latencyfs: %s: %s\n", opts.src, strerror(errno));
		goto out;
	}
	/* defaults first: a later -o on the command line overrides them; an idle
	 * thread count given, as libfuse 3.14 warns of its own default (UINT_MAX) */
	if (fuse_opt_insert_arg(&args, 1, "-oro,default_permissions,max_threads=1024,max_idle_threads=1024") < 0)
		goto out;
	rc = fuse_main(args.argc, args.argv, &lfs_ops, NULL);
out:
	if (src_fd >= 0)
		close(src_fd);
	free(opts.src);
	fuse_opt_free_args(&args);
	return rc;
}
