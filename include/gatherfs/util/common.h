/* SPDX-License-Identifier: Apache-2.0 */
/*
 * gatherfs — common definitions: the one error type, error messages,
 * checked arithmetic and small allocation helpers.
 *
 * Every fallible function in gatherfs returns a gfs_err.  GFS_OK is 0.  On
 * failure the function also records a one-line, human readable message in a
 * thread-local buffer (gfs_errmsg()), naming the file and the problem.
 * errno values appear only at the FUSE edge.
 */
#ifndef GATHERFS_COMMON_H
#define GATHERFS_COMMON_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/stat.h>

typedef enum gfs_err {
	GFS_OK = 0,
	GFS_ERR_NOMEM,       /* allocation failed or a hard limit on size was hit */
	GFS_ERR_IO,          /* a system call on a file failed */
	GFS_ERR_FORMAT,      /* malformed or inconsistent input */
	GFS_ERR_UNSUPPORTED, /* well-formed input we do not handle */
	GFS_ERR_LIMIT,       /* input exceeds a safety limit (depth, count, size) */
	GFS_ERR_NOTFOUND,    /* a named file, record or tensor does not exist */
	GFS_ERR_INVAL,       /* bad argument from the user */
} gfs_err;

/* gfs_strerror(): short static name of an error code ("format error"...). */
const char *gfs_strerror(gfs_err err);

/*
 * gfs_fail(): record a formatted message as the current thread's last error
 * and return err, so callers can write `return gfs_fail(GFS_ERR_FORMAT, ...)`.
 * The message should name the file and the problem.  @return err.
 */
gfs_err gfs_fail(gfs_err err, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

/*
 * gfs_failv(): as gfs_fail() with a va_list.
 */
gfs_err gfs_failv(gfs_err err, const char *fmt, va_list ap)
	__attribute__((format(printf, 2, 0)));

/*
 * gfs_fail_prefix(): prepend "prefix: " to the current thread's last error
 * message (used to add context such as a file name).  @return err.
 */
gfs_err gfs_fail_prefix(gfs_err err, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

/* The longest error message, its NUL included. */
#define GFS_ERRMSG_MAX 1024

/* gfs_errmsg(): the current thread's last error message ("" if none). */
const char *gfs_errmsg(void);

/* Checked arithmetic: return false on overflow, leaving *out unspecified. */
static inline bool gfs_add_u64(uint64_t a, uint64_t b, uint64_t *out)
{
	return !__builtin_add_overflow(a, b, out);
}

static inline bool gfs_mul_u64(uint64_t a, uint64_t b, uint64_t *out)
{
	return !__builtin_mul_overflow(a, b, out);
}

/*
 * gfs_malloc()/gfs_calloc()/gfs_realloc()/gfs_strdup(): thin wrappers that
 * return NULL on failure (and for calloc/reallocarray on overflow of n*size).
 * They never abort; callers turn NULL into GFS_ERR_NOMEM.
 */
void *gfs_calloc(size_t n, size_t size);
void *gfs_reallocarray(void *p, size_t n, size_t size);
char *gfs_strdup(const char *s);
char *gfs_strndup(const char *s, size_t n);

/*
 * gfs_iobuf(): n bytes (n > 0) aligned to GFS_IOBUF_ALIGN, for buffers that
 * pread() and copies fill from the page cache; free() it.  NULL when out of
 * memory.  A large malloc() block starts 16 bytes into its mapping, and the
 * kernel's copy of page-aligned page-cache bytes to such an address runs at
 * a fifth of its speed on some x86-64 CPUs (bench/RESULTS.md, "Read
 * buffers aligned").  Contents are undefined.
 */
#define GFS_IOBUF_ALIGN 64
void *gfs_iobuf(size_t n);

/* Byte sets of gfs_escape(): the bytes it writes %XX. */
#define GFS_ESC_CONTROL 1u /* control bytes: 0x00-0x1f and 0x7f */
#define GFS_ESC_PATH 2u    /* '%' and '/' (a tensors/ file name escapes both sets) */

/* gfs_escape_has(): byte c is in the byte set `set` (GFS_ESC_* or'ed). */
bool gfs_escape_has(unsigned set, unsigned char c);

/*
 * gfs_escape(): the n bytes of s into out, each byte of `set` written %XX
 * (upper-case hex), and a NUL; out holds at least 3 * n + 1 bytes.
 * Returns the length written, the NUL not counted.
 */
size_t gfs_escape(const char *s, size_t n, unsigned set, char *out);

/*
 * gfs_shown_key(): the n bytes of key s (NULs included) for a one-line
 * message, written as tensors/ file names write keys: '%', '/' and control
 * bytes (0x00-0x1f, 0x7f) as %XX; past GFS_SHOWN_KEY_MAX bytes of s it is
 * cut and ends in "...".  buf holds GFS_SHOWN_KEY_BUF bytes; returns buf.
 */
#define GFS_SHOWN_KEY_MAX 64
#define GFS_SHOWN_KEY_BUF (3 * GFS_SHOWN_KEY_MAX + 4)
const char *gfs_shown_key(const char *s, size_t n, char *buf);

/* gfs_path_join(): "dir/name" as a new string (free() it), NULL when out of memory. */
char *gfs_path_join(const char *dir, const char *name);

/*
 * gfs_grow(): make room for element len of the array *arr of *cap elements
 * of elem bytes (len <= *cap): when full, reallocate it to twice its
 * capacity, or first elements if it has none, and update *arr and *cap.
 * False (and *arr, *cap unchanged) if out of memory.
 */
bool gfs_grow(void **arr, size_t *cap, size_t len, size_t elem, size_t first);

/*
 * gfs_pread_full(): read exactly len bytes at off from fd.  label names the
 * file in error messages.  A short read (end of file) is GFS_ERR_FORMAT
 * ("truncated"), a failing system call GFS_ERR_IO.
 */
gfs_err gfs_pread_full(int fd, void *buf, size_t len, uint64_t off,
		       const char *label);

/*
 * gfs_fd_remote(): is fd on a network or FUSE file system (NFS, CIFS/SMB,
 * Lustre, Ceph, GPFS, 9P, AFS, BeeGFS, IBRIX, Coda, any FUSE mount), where
 * one read may take milliseconds?  false when fstatfs() fails.
 */
bool gfs_fd_remote(int fd);

/*
 * gfs_fd_cached(): is the byte at off of fd in the page cache?  A one-byte
 * pread() with RWF_NOWAIT, nothing else read; false too where that cannot
 * tell (a file system without page cache or without RWF_NOWAIT, off past
 * the end).
 */
bool gfs_fd_cached(int fd, uint64_t off);

/* gfs_open_regular() flags */
#define GFS_OPEN_NOFOLLOW 1u /* refuse a symbolic link as the last component */

/*
 * gfs_open_regular(): open the file at path for reading as metadata
 * (tracker files, configs, checkpoint files) the way no hostile path can
 * stall or widen: O_NONBLOCK (a FIFO or device never blocks the open),
 * O_NOCTTY, with GFS_OPEN_NOFOLLOW also O_NOFOLLOW; then anything but a
 * regular file is refused (GFS_ERR_FORMAT) and O_NONBLOCK cleared.  A
 * missing file is GFS_ERR_NOTFOUND (with a message).  @return GFS_OK, *fd
 * (close it) and, when st is not NULL, its fstat in *st.
 */
gfs_err gfs_open_regular(const char *path, unsigned flags, int *fd, struct stat *st);

/*
 * gfs_read_meta(): the whole of the regular file at path (opened by
 * gfs_open_regular() with flags), of at most max bytes, NUL-terminated
 * (free *text); a larger file is GFS_ERR_LIMIT.  @return GFS_OK, *text and
 * *len.
 */
gfs_err gfs_read_meta(const char *path, uint64_t max, unsigned flags, char **text, size_t *len);

/* gfs_read_text(): gfs_read_meta() following links (flags 0). */
gfs_err gfs_read_text(const char *path, uint64_t max, char **text, size_t *len);

/*
 * gfs_dir_matches(): how many entries of directory dir match accepts
 * (match(path, name), path being dir/name; names of nf bytes or more
 * and paths of PATH_MAX or more are skipped); the first one's name in first
 * (nf bytes), their names, comma-separated, in list (n bytes, cut short
 * with "...").  0, first and list empty, if dir cannot be read.
 */
size_t gfs_dir_matches(const char *dir, bool (*match)(const char *path, const char *name),
		       char *first, size_t nf, char *list, size_t n);

/*
 * gfs_buf: a growing byte buffer whose writers only record failure, so a
 * composer can append many pieces and check `oom` once at the end.  Zero
 * initialise; free p with free().
 */
typedef struct gfs_buf {
	uint8_t *p;
	size_t len;
	size_t cap;
	bool oom;
} gfs_buf;

/*
 * gfs_buf_put(): append n bytes of data.  The bytes stay NUL-terminated
 * (p[len] == 0), so text can be used as a C string.  On allocation failure,
 * or a size that would overflow, sets oom and ignores this and every later
 * append.
 */
void gfs_buf_put(gfs_buf *b, const void *data, size_t n);

/* Little-endian loads from a byte buffer (no alignment needed). */
static inline uint16_t gfs_le16(const uint8_t *p)
{
	return (uint16_t)(p[0] | (p[1] << 8));
}

static inline uint32_t gfs_le32(const uint8_t *p)
{
	return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) |
	       ((uint32_t)p[3] << 24);
}

static inline uint64_t gfs_le64(const uint8_t *p)
{
	return (uint64_t)gfs_le32(p) | ((uint64_t)gfs_le32(p + 4) << 32);
}

#endif
