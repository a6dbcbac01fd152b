/* SPDX-License-Identifier: Apache-2.0 */
/*
 * gatherfs — the mounted namespace: inode table, directories, attributes,
 * the tensors/ view, the index file and passed-through checkpoint files.
 */
#include "config.h"

#include <assert.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gatherfs/fs/fs.h"
#include "gatherfs/importers/hfcache.h"
#include "gatherfs/importers/import_plain.h"
#include "gatherfs/fs/perm.h"
#include "gatherfs/fs/tensorhash.h"
#include "gatherfs/views/shards.h"
#include "gatherfs/views/view_safetensors.h"
#include "gatherfs/views/view_torchzip.h"
#include "gatherfs/views/view_universal.h"

#define ZIP_STEM "pytorch_model"
#define ZIP_EXT ".bin"
#define ST_STEM "model"
#define ST_EXT ".safetensors"
#define JSON_NAME "layout.json"
#define TENSORS_NAME "tensors"
#define INDEX_NAME "INDEX"
#define OPTIM_NAME "optim"
/* gfs_node.entry of universal file i (gfs_uview index), and back: <= -2 */
#define UNI_ENTRY(i) (-2 - (int64_t)(i))
#define UNI_FILE(entry) ((size_t)(-2 - (entry)))
#define ADAPTER_NAME "adapter"
#define ADAPTER_ST "adapter_model.safetensors"
#define ADAPTER_CFG "adapter_config.json"
#define XATTR_USER "user."
#define XATTR_DTYPE "user.gatherfs.dtype"
#define XATTR_SHAPE "user.gatherfs.shape"
#define XATTR_NAME "user.gatherfs.name"
#define XATTR_SHA256 "user.gatherfs.sha256"
#define ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))

enum {
	/* node indices of the fixed entries (ino = index + 1); the root's
	 * virtual files follow, then the passed-through files, then tensors/ */
	N_ROOT, N_TENSORS, N_INDEX, N_FIXED,
	SHAPE_BUF = GFS_MAX_DIMS * 22 + 3,
	BLKSIZE = 1 << 20, /* st_blksize: invites large reads */
	NAME_MAX_BYTES = 255,                     /* what statfs() promises */
	CUT_SUFFIX = 18,                          /* "%~" and 16 hex digits */
	CUT_PREFIX = NAME_MAX_BYTES - CUT_SUFFIX, /* bytes kept of a long name */
	PATH_BYTES = 1024,                        /* a universal file's path, its NUL included */
};

/* A directory: children (node indices) in listing order, and sorted by name for lookup. */
typedef struct fs_dir {
	uint32_t *kids;
	uint32_t *sorted;
	size_t n;
} fs_dir;

/* A child and its name, while a directory is sorted (sort_dir()). */
struct fs_name {
	const char *name;
	uint32_t node;
};

/* Owner, group and permission bits of a node. */
typedef struct fs_attr {
	uid_t uid;
	gid_t gid;
	mode_t perm;
} fs_attr;

/* A passed-through file. */
typedef struct fs_pass {
	char *name;
	char *path;
	int fd;
	struct stat st;
	fs_attr attr;
} fs_pass;

/* A file of the optim/ and universal views, by its path under the root. */
typedef struct fs_xfile {
	const char *path; /* in fs->strs */
	const gfs_vfile *vf;
	int64_t entry; /* optim/<state>/<name>: its layout entry; else -1 */
} fs_xfile;

/* An extra node (a directory or file of those views), in creation order. */
typedef struct fs_xnode {
	const char *path; /* in fs->strs (a file's is its xfile's); the name is its last component */
	uint32_t parent;  /* node index of the parent directory */
	int32_t file;     /* index into xfiles; a directory: -1 - its index into xdirs */
} fs_xnode;

/* A virtual file at the root: a view of the layout. */
typedef struct fs_virt {
	char *name;
	const gfs_vfile *vf;
	bool zip; /* a torch zip view */
	fs_attr attr;
} fs_virt;

/* The common owner and group of some files, as merge_owner() folds them. */
typedef struct fs_owner {
	bool any;
	bool uid_mixed;
	bool gid_mixed;
	uid_t uid;
	gid_t gid;
} fs_owner;

enum { RF_MEMO = 8 };

/*
 * The files behind a node, while its attributes are derived: perm objects,
 * and whether the metadata inputs count (see fs.h).
 */
typedef struct fs_set {
	uint32_t *ids;
	size_t n;
	size_t cap;
	bool meta;
} fs_set;

/* Access derivation state, for the build only. */
typedef struct fs_access {
	gfs_perm *perm;
	uint32_t *src_ids;  /* perm object of each source */
	uint32_t *src_mark; /* per source: set.mark if already in the set */
	uint32_t mark;
	uint32_t *meta_ids; /* the metadata inputs (all sources if none recorded) */
	size_t nmeta;
	bool root_listed;   /* root_id is the checkpoint directory's listing */
	uint32_t root_id;
	fs_set set;
	bool meta_memo;     /* meta_bits valid for (meta_uid, meta_gid) */
	uid_t meta_uid;
	gid_t meta_gid;
	unsigned meta_bits;
	fs_owner meta_owner; /* merge_owner() over the metadata inputs */
	/* the attributes of the last files of tensors on regular flats, by
	 * flat and piece count (the same sources: the same attributes) */
	struct {
		const gfs_rflat *rf;
		size_t npieces;
		fs_attr attr;
	} rf_memo[RF_MEMO];
	size_t rf_next;
} fs_access;

/*
 * layout.json, written only when asked for: its size on the first stat,
 * its bytes a unit at a time on reads (gfs_layout_json_unit()).
 */
typedef struct fs_json {
	pthread_mutex_t mu;
	bool sized;
	gfs_err err;   /* of the sizing, once sized */
	uint64_t *end; /* per unit: offset one past its last byte */
	size_t nunits;
} fs_json;

struct gfs_fs {
	gfs_vctx ctx;
	gfs_vctx actx;     /* the adapter/ view's tensors */
	gfs_fs_opts opts;
	gfs_node *nodes;
	size_t nnodes;     /* stored; the made ones (vnode()) follow */
	size_t nvnodes;    /* the universal param folders and their files: (1 + per_param) each */
	size_t uzero;      /* with nvnodes: node index of their parent, <tag>_universal/zero */
	fs_dir root;
	fs_dir tensors;
	fs_dir adapter;    /* adapter/ (n == 0: none) */
	size_t nadapter;   /* nodes of adapter/ and its files */
	int adapter_cfg_fd; /* adapter/adapter_config.json, or -1 */
	fs_virt *virt;     /* the root's virtual files, in listing order */
	size_t nvirt;
	gfs_tzview **zips; /* torch zip views (they own their vfiles) */
	size_t nzips;
	gfs_vfile **owned; /* other vfiles to free */
	size_t nowned;
	size_t cap_owned;
	fs_pass *pass;
	size_t npass;
	gfs_uview *uview;
	gfs_arena strs;    /* tensors/ names, the paths of the optim/ and universal nodes */
	fs_xfile *xfiles;  /* files of the optim/ and universal views (during the build) */
	size_t nxfiles, cap_xfiles;
	size_t *xtops;     /* the first xfile of each distinct first path component */
	size_t nxtops, cap_xtops;
	fs_xnode *xnodes;  /* their nodes, from node index xfirst on */
	size_t nxnodes, cap_xnodes;
	size_t xfirst;
	fs_dir *xdirs;     /* the extra directories */
	size_t nxdirs;
	char **notes;
	size_t nnotes;
	const char *optim_absent;     /* why optim/ shows nothing (asked for), or NULL */
	const char *universal_absent; /* the same for the universal view */
	fs_access acc;     /* during the build */
	fs_attr root_attr, tensors_attr, index_attr;
	fs_attr xfile_attr, xdir_attr; /* of the optim/ and universal nodes */
	struct timespec mtime;
	fs_json *json;     /* layout.json (its node has no vfile), or NULL */
	gfs_vgen index_gen; /* the tensors' lines of tensors/INDEX */
	uint64_t *index_off; /* [ntensors + 1]: where tensor i's line starts in them */
	gfs_thash *thash;  /* user.gatherfs.sha256 of the tensor files */
};

static bool is_extra_top(const gfs_fs *fs, const char *name);
static int cmp_name(const void *a, const void *b);
static gfs_err add_note(gfs_fs *fs, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

/* ------------------------------------------------------------ tensor names */

/* escape_full(): the escaped key, whatever its length. */
static gfs_err escape_full(const char *name, char **out)
{
	static const char *const reserved[][2] = {
		{ ".", "%2E" }, { "..", "%2E%2E" }, { INDEX_NAME, "%49NDEX" },
	};
	char *s;

	for (size_t i = 0; i < ARRAY_LEN(reserved); i++) {
		if (strcmp(name, reserved[i][0]) == 0) {
			*out = gfs_strdup(reserved[i][1]);
			return *out ? GFS_OK : gfs_fail(GFS_ERR_NOMEM, "out of memory");
		}
	}
	s = malloc(3 * strlen(name) + 1);
	if (!s)
		return gfs_fail(GFS_ERR_NOMEM, "out of memory");
	(void)gfs_escape(name, strlen(name), GFS_ESC_CONTROL | GFS_ESC_PATH, s);
	*out = s;
	return GFS_OK;
}

/*
 * cut_point(): the length of the longest prefix of escaped name s (longer
 * than CUT_PREFIX) of at most CUT_PREFIX bytes that splits neither a %XX
 * escape nor a UTF-8 sequence.
 */
static size_t cut_point(const char *s)
{
	size_t k = 0;

	for (;;) {
		size_t unit = 1;

		if (s[k] == '%') {
			unit = 3;
		} else {
			while (((unsigned char)s[k + unit] & 0xC0) == 0x80)
				unit++;
		}
		if (k + unit > CUT_PREFIX)
			return k;
		k += unit;
	}
}

gfs_err gfs_fs_escape_name(const char *name, char **out)
{
	uint64_t h = 0xcbf29ce484222325ull;
	char *s = NULL;
	const gfs_err err = escape_full(name, &s);
	size_t k;

	if (err || strlen(s) <= NAME_MAX_BYTES) {
		*out = s;
		return err;
	}
	for (const unsigned char *c = (const unsigned char *)name; *c; c++)
		h = (h ^ *c) * 0x100000001b3ull;
	k = cut_point(s);
	(void)snprintf(s + k, CUT_SUFFIX + 1, "%%~%016llx", (unsigned long long)h);
	*out = s;
	return GFS_OK;
}

/* format_shape(): "[d0, d1, ...]" ("[]" for a scalar). */
static void format_shape(const gfs_tensor *t, char *buf)
{
	char *p = buf;

	*p++ = '[';
	for (uint32_t d = 0; d < t->ndim; d++)
		p += sprintf(p, "%s%llu", d ? ", " : "", (unsigned long long)t->shape[d]);
	*p++ = ']';
	*p = '\0';
	assert((size_t)(p - buf) < SHAPE_BUF);
}

/* ------------------------------------------------------------------ build */

/* own(): make fs responsible for freeing vf. */
static gfs_err own(gfs_fs *fs, gfs_vfile *vf)
{
	if (!gfs_grow((void **)&fs->owned, &fs->cap_owned, fs->nowned, sizeof(*fs->owned), 64)) {
		gfs_vfile_free(vf);
		return gfs_fail(GFS_ERR_NOMEM, "out of memory");
	}
	fs->owned[fs->nowned++] = vf;
	return GFS_OK;
}

/* own_vfile(): a new empty vfile owned by fs. */
static gfs_err own_vfile(gfs_fs *fs, gfs_vfile **vf)
{
	const gfs_err err = gfs_vfile_new(&fs->ctx, vf);

	return err ? err : own(fs, *vf);
}

/* tensor_node(): the node index of layout entry i under tensors/. */
static size_t tensor_node(const gfs_fs *fs, size_t i)
{
	return N_FIXED + fs->nvirt + fs->npass + i;
}

/* add_str(): append a NUL-terminated string to a MEM vfile. */
static gfs_err add_str(gfs_vfile *vf, const char *s)
{
	return gfs_vfile_add_mem(vf, s, strlen(s));
}

/* index_line(): line i (a tensor's) of tensors/INDEX appended to b (a gfs_vgen_item_fn). */
static gfs_err index_line(const void *ctx, size_t i, gfs_buf *b)
{
	const gfs_fs *fs = ctx;
	const gfs_layout *l = fs->ctx.layout;
	const gfs_tensor *t = gfs_layout_target(l, i);
	const gfs_node *n = &fs->nodes[tensor_node(fs, i)];
	char shape[SHAPE_BUF];
	char bytes[24];
	char *key = NULL;
	gfs_err err = escape_full(l->tensors[i].name, &key);
	const char *const fields[] = {
		n->name, "\t", gfs_dtype_name(gfs_dtype_out(t->dtype, fs->ctx.want)), "\t",
		shape, "\t", bytes, "\t", n->type == GFS_NODE_LNK ? n->link : "-", "\t",
		key, "\n",
	};

	format_shape(t, shape);
	snprintf(bytes, sizeof(bytes), "%llu",
		 (unsigned long long)gfs_tensor_out_nbytes(l, i, fs->ctx.want));
	for (size_t k = 0; k < ARRAY_LEN(fields) && !err; k++)
		gfs_buf_put(b, fields[k], strlen(fields[k]));
	free(key);
	if (!err && b->oom)
		err = gfs_fail(GFS_ERR_NOMEM, "out of memory");
	return err;
}

/*
 * index_gen(): bytes [off, off + len) of the tensors' lines of
 * tensors/INDEX, written when read (a gfs_vgen_fn; ctx: the fs).
 */
static gfs_err index_gen(void *ctx, uint64_t arg, uint64_t off, uint8_t *buf, size_t len)
{
	const gfs_fs *fs = ctx;
	const size_t n = fs->ctx.layout->ntensors;
	size_t done;
	gfs_err err;

	(void)arg;
	assert(off <= fs->index_off[n] && len <= fs->index_off[n] - off);
	err = gfs_vgen_items(fs->index_off, n, index_line, fs, off, buf, len, &done);
	assert(err || done == len);
	return err;
}

/* ------------------------------------------------------------- access */

__attribute__((format(printf, 2, 3)))
static void notice(const gfs_fs *fs, const char *fmt, ...)
{
	char line[PATH_MAX + 256];
	va_list ap;

	if (!fs->opts.notice)
		return;
	va_start(ap, fmt);
	(void)vsnprintf(line, sizeof(line), fmt, ap);
	va_end(ap);
	fs->opts.notice(line);
}

/* set_begin(): an empty set of files behind a node; meta: with the metadata inputs. */
static void set_begin(gfs_fs *fs, bool meta)
{
	fs->acc.set.n = 0;
	fs->acc.set.meta = meta;
	fs->acc.mark++;
}

static gfs_err set_add(gfs_fs *fs, uint32_t id)
{
	fs_set *s = &fs->acc.set;

	if (!gfs_grow((void **)&s->ids, &s->cap, s->n, sizeof(*s->ids), 16))
		return gfs_fail(GFS_ERR_NOMEM, "out of memory");
	s->ids[s->n++] = id;
	return GFS_OK;
}

/* set_add_source(): source src, once. */
static gfs_err set_add_source(gfs_fs *fs, uint32_t src)
{
	if (fs->acc.src_mark[src] == fs->acc.mark)
		return GFS_OK;
	fs->acc.src_mark[src] = fs->acc.mark;
	return set_add(fs, fs->acc.src_ids[src]);
}

/* set_add_entry(): the sources of layout entry i's bytes. */
static gfs_err set_add_entry(gfs_fs *fs, size_t i)
{
	const gfs_tensor *t = gfs_layout_target(fs->ctx.layout, i);
	gfs_err err = GFS_OK;

	for (size_t k = 0; k < t->npieces && !err; k++) {
		const gfs_piece pc = gfs_tensor_piece(t, k);

		if (pc.kind != GFS_PIECE_ZERO)
			err = set_add_source(fs, pc.src);
	}
	return err;
}

/* set_add_entries(): the sources of entries[0..n), or of every source if entries is NULL. */
static gfs_err set_add_entries(gfs_fs *fs, const size_t *entries, size_t n)
{
	const gfs_layout *l = fs->ctx.layout;
	gfs_err err = GFS_OK;

	if (!entries) {
		for (uint32_t k = 0; k < l->nsources && !err; k++)
			err = set_add_source(fs, k);
		return err;
	}
	for (size_t k = 0; k < n && !err; k++)
		err = set_add_entry(fs, entries[k]);
	return err;
}

/* merge_owner(): fold an object's owner and group into the common ones. */
static void merge_owner(const gfs_perm *p, uint32_t id, fs_owner *o)
{
	uid_t u;
	gid_t g;

	gfs_perm_owner(p, id, &u, &g);
	o->uid_mixed |= o->any && u != o->uid;
	o->gid_mixed |= o->any && g != o->gid;
	o->uid = u;
	o->gid = g;
	o->any = true;
}

/* meta_bits(): the classes of uid:gid that may read every metadata input. */
static unsigned meta_bits(gfs_fs *fs, uid_t uid, gid_t gid)
{
	fs_access *a = &fs->acc;
	unsigned bits = GFS_CLASS_ALL;

	if (a->meta_memo && a->meta_uid == uid && a->meta_gid == gid)
		return a->meta_bits;
	for (size_t k = 0; k < a->nmeta; k++)
		bits &= gfs_perm_bits(a->perm, a->meta_ids[k], uid, gid);
	a->meta_memo = true;
	a->meta_uid = uid;
	a->meta_gid = gid;
	a->meta_bits = bits;
	return bits;
}

/*
 * set_attr(): the attributes of a node exposing the set's files: their
 * common owner and group (else ours), and read (dir: read and search) for
 * each class that may read them all.
 */
static fs_attr set_attr(gfs_fs *fs, bool dir)
{
	fs_access *a = &fs->acc;
	const fs_set *s = &a->set;
	fs_owner o = s->meta ? a->meta_owner : (fs_owner){ 0 };
	uid_t uid;
	gid_t gid;
	unsigned bits;
	const mode_t r = dir ? 5 : 4;

	for (size_t k = 0; k < s->n; k++)
		merge_owner(a->perm, s->ids[k], &o);
	uid = !o.any || o.uid_mixed ? geteuid() : o.uid;
	gid = !o.any || o.gid_mixed ? getegid() : o.gid;
	bits = s->meta ? meta_bits(fs, uid, gid) : GFS_CLASS_ALL;
	for (size_t k = 0; k < s->n && bits; k++)
		bits &= gfs_perm_bits(a->perm, s->ids[k], uid, gid);
	return (fs_attr){
		.uid = uid, .gid = gid,
		.perm = ((bits & GFS_CLASS_OWNER) ? r << 6 : 0) |
			((bits & GFS_CLASS_GROUP) ? r << 3 : 0) | ((bits & GFS_CLASS_OTHER) ? r : 0),
	};
}

/* entries_attr(): a file showing entries[0..n) (all if NULL) and the metadata. */
static gfs_err entries_attr(gfs_fs *fs, const size_t *entries, size_t n, fs_attr *out)
{
	gfs_err err;

	set_begin(fs, true);
	err = set_add_entries(fs, entries, n);
	if (!err)
		*out = set_attr(fs, false);
	return err;
}

/* meta_attr(): a node showing metadata only. */
static fs_attr meta_attr(gfs_fs *fs, bool dir)
{
	set_begin(fs, true);
	return set_attr(fs, dir);
}

/*
 * access_begin(): the perm objects of the sources, the metadata inputs and
 * the checkpoint directory's listing.
 */
static gfs_err access_begin(gfs_fs *fs)
{
	const gfs_layout *l = fs->ctx.layout;
	fs_access *a = &fs->acc;
	gfs_err err = gfs_perm_new(geteuid(), &a->perm);

	if (err)
		return err;
	a->src_ids = gfs_calloc(l->nsources + 1, sizeof(*a->src_ids));
	a->src_mark = gfs_calloc(l->nsources + 1, sizeof(*a->src_mark));
	a->meta_ids = gfs_calloc((l->nmetafiles ? l->nmetafiles : l->nsources) + 1, sizeof(*a->meta_ids));
	if (!a->src_ids || !a->src_mark || !a->meta_ids)
		return gfs_fail(GFS_ERR_NOMEM, "out of memory");
	for (uint32_t i = 0; i < l->nsources && !err; i++)
		err = gfs_perm_add_fd(a->perm, gfs_srcset_fd(fs->ctx.src, i), l->sources[i].abspath,
				      &a->src_ids[i]);
	for (size_t i = 0; i < l->nmetafiles && !err; i++)
		err = gfs_perm_add_path(a->perm, l->metafiles[i], GFS_NEED_R, &a->meta_ids[a->nmeta++]);
	for (uint32_t i = 0; !l->nmetafiles && i < l->nsources; i++)
		a->meta_ids[a->nmeta++] = a->src_ids[i];
	if (!err && l->root_dir) {
		err = gfs_perm_add_path(a->perm, l->root_dir, GFS_NEED_R | GFS_NEED_X, &a->root_id);
		a->root_listed = !err;
	}
	for (size_t k = 0; !err && k < a->nmeta; k++)
		merge_owner(a->perm, a->meta_ids[k], &a->meta_owner);
	return err;
}

/*
 * tensor_attr(): the attributes of tensor i's file (not an alias): its
 * sources' with the metadata inputs'.  Those of a tensor on a regular flat
 * are those of the last one on the same flat with as many pieces, if
 * remembered.
 */
static gfs_err tensor_attr(gfs_fs *fs, size_t i, fs_attr *out)
{
	fs_access *a = &fs->acc;
	const gfs_tensor *t = &fs->ctx.layout->tensors[i];
	gfs_err err;

	for (size_t k = 0; t->rf && k < RF_MEMO; k++) {
		if (a->rf_memo[k].rf == t->rf && a->rf_memo[k].npieces == t->npieces) {
			*out = a->rf_memo[k].attr;
			return GFS_OK;
		}
	}
	set_begin(fs, true);
	err = set_add_entry(fs, i);
	if (err)
		return err;
	*out = set_attr(fs, false);
	if (t->rf) {
		a->rf_memo[a->rf_next].rf = t->rf;
		a->rf_memo[a->rf_next].npieces = t->npieces;
		a->rf_memo[a->rf_next].attr = *out;
		a->rf_next = (a->rf_next + 1) % RF_MEMO;
	}
	return GFS_OK;
}

/* access_end(): free the derivation state. */
static void access_end(gfs_fs *fs)
{
	fs_access *a = &fs->acc;

	gfs_perm_free(a->perm);
	free(a->src_ids);
	free(a->src_mark);
	free(a->meta_ids);
	free(a->set.ids);
	memset(a, 0, sizeof(*a));
}

/*
 * add_virt(): a root file named name (copied) with contents vf and
 * attributes attr; zip: a torch zip view.
 */
static gfs_err add_virt(gfs_fs *fs, const char *name, const gfs_vfile *vf, bool zip,
			fs_attr attr)
{
	fs_virt *v = gfs_reallocarray(fs->virt, fs->nvirt + 1, sizeof(*v));

	if (!v)
		return gfs_fail(GFS_ERR_NOMEM, "out of memory");
	fs->virt = v;
	v[fs->nvirt].name = gfs_strdup(name);
	if (!v[fs->nvirt].name)
		return gfs_fail(GFS_ERR_NOMEM, "out of memory");
	v[fs->nvirt].zip = zip;
	v[fs->nvirt].attr = attr;
	v[fs->nvirt++].vf = vf;
	return GFS_OK;
}

/* add_text(): a root file holding text (a newline added unless it ends in one), with attributes attr. */
static gfs_err add_text(gfs_fs *fs, const char *name, const char *text, fs_attr attr)
{
	gfs_vfile *vf = NULL;
	gfs_err err = own_vfile(fs, &vf);

	if (!err)
		err = add_str(vf, text);
	if (!err && (!text[0] || text[strlen(text) - 1] != '\n'))
		err = gfs_vfile_add_mem(vf, "\n", 1);
	if (!err)
		err = add_virt(fs, name, vf, false, attr);
	return err ? gfs_fail_prefix(err, "%s", name) : GFS_OK;
}

/* add_zip(): a torch zip of entries[0..n) (all if NULL) named name. */
static gfs_err add_zip(gfs_fs *fs, const char *name, const size_t *entries, size_t n)
{
	char prefix[256];
	gfs_tzview **z = gfs_reallocarray(fs->zips, fs->nzips + 1, sizeof(*z));
	fs_attr attr;
	gfs_err err;

	if (!z)
		return gfs_fail(GFS_ERR_NOMEM, "out of memory");
	fs->zips = z;
	err = entries_attr(fs, entries, n, &attr);
	if (err)
		return err;
	/* torch names the archive after the file, without its extension */
	snprintf(prefix, sizeof(prefix), "%.*s", (int)(strlen(name) - strlen(ZIP_EXT)), name);
	err = gfs_tzview_new(&fs->ctx, prefix, entries, n, &z[fs->nzips]);
	if (err)
		return gfs_fail_prefix(err, "%s", name);
	fs->nzips++;
	return add_virt(fs, name, gfs_tzview_vfile(z[fs->nzips - 1]), true, attr);
}

/* add_st(): a safetensors file of entries[0..n) (all if NULL) named name. */
static gfs_err add_st(gfs_fs *fs, const char *name, const size_t *entries, size_t n)
{
	gfs_vfile *vf = NULL;
	fs_attr attr;
	gfs_err err = entries_attr(fs, entries, n, &attr);

	if (!err)
		err = gfs_stview_new(&fs->ctx, entries, n, &vf);
	if (!err)
		err = own(fs, vf);
	if (!err)
		err = add_virt(fs, name, vf, false, attr);
	return err ? gfs_fail_prefix(err, "%s", name) : GFS_OK;
}

/*
 * add_format(): the single file stem+ext, or with a shard size the HF
 * shards stem-0000i-of-0000N+ext and their index stem+ext.index.json.
 */
static gfs_err add_format(gfs_fs *fs, const gfs_shard_plan *plan, const char *stem,
			  const char *ext, bool zip)
{
	char name[256];
	char *index = NULL;
	gfs_err err = GFS_OK;

	if (!plan) {
		snprintf(name, sizeof(name), "%s%s", stem, ext);
		return zip ? add_zip(fs, name, NULL, 0) : add_st(fs, name, NULL, 0);
	}
	for (size_t i = 0; !err && i < plan->nshards; i++) {
		char *shard = NULL;
		const gfs_shard *sh = &plan->shards[i];

		err = gfs_shard_name(plan, i, stem, ext, &shard);
		if (!err)
			err = zip ? add_zip(fs, shard, sh->entries, sh->n)
				  : add_st(fs, shard, sh->entries, sh->n);
		free(shard);
	}
	if (!err)
		err = gfs_shard_index_json(fs->ctx.layout, plan, stem, ext, zip, &index);
	if (!err) {
		snprintf(name, sizeof(name), "%s%s.index.json", stem, ext);
		err = add_text(fs, name, index, meta_attr(fs, false));
	}
	free(index);
	return err;
}

/* build_views(): the root's virtual files, in listing order. */
/* is_replaced(): a name the caller asks to show with other content (gfs_fs_opts.replace). */
static bool is_replaced(const gfs_fs *fs, const char *name)
{
	for (size_t i = 0; i < fs->opts.nreplace; i++)
		if (strcmp(name, fs->opts.replace[i].name) == 0)
			return true;
	return false;
}

/*
 * replaced_attr(): the attributes of a root file shown with other content
 * (gfs_fs_opts.replace): those of every source together, and no more
 * readable than the checkpoint's own file of that name.
 */
static fs_attr replaced_attr(const gfs_fs *fs, const char *name)
{
	const gfs_layout *l = fs->ctx.layout;
	fs_attr attr = fs->xfile_attr;
	char path[PATH_MAX];
	struct stat st;

	if (l->root_dir && (size_t)snprintf(path, sizeof(path), "%s/%s", l->root_dir, name) <
				   sizeof(path) && stat(path, &st) == 0)
		attr.perm &= st.st_mode & 0444;
	return attr;
}

static gfs_err build_views(gfs_fs *fs)
{
	const gfs_layout *l = fs->ctx.layout;
	gfs_shard_plan *plan = NULL;
	gfs_err err = GFS_OK;

	if (fs->opts.shard_size)
		err = gfs_shard_plan_new(l, fs->ctx.want, fs->opts.shard_size, &plan);
	if (!err && (fs->opts.views & GFS_VIEW_BIN))
		err = add_format(fs, plan, ZIP_STEM, ZIP_EXT, true);
	if (!err && (fs->opts.views & GFS_VIEW_SAFETENSORS))
		err = add_format(fs, plan, ST_STEM, ST_EXT, false);
	gfs_shard_plan_free(plan);
	for (size_t i = 0; !err && i < fs->opts.nreplace; i++)
		err = add_text(fs, fs->opts.replace[i].name, fs->opts.replace[i].text,
			       replaced_attr(fs, fs->opts.replace[i].name));
	for (size_t i = 0; !err && i < l->ntexts; i++)
		if (!is_replaced(fs, l->texts[i].name))
			err = add_text(fs, l->texts[i].name, l->texts[i].text, meta_attr(fs, false));
	if (!err && (fs->opts.views & GFS_VIEW_LAYOUT)) {
		fs_attr attr = { 0 };

		/* it lists every source's path, size and offsets */
		set_begin(fs, true);
		err = set_add_entries(fs, NULL, 0);
		if (!err)
			attr = set_attr(fs, false);
		if (!err && !(fs->json = calloc(1, sizeof(*fs->json))))
			err = gfs_fail(GFS_ERR_NOMEM, "out of memory");
		if (!err) {
			(void)pthread_mutex_init(&fs->json->mu, NULL);
			err = add_virt(fs, JSON_NAME, NULL, false, attr);
		}
	}
	return err;
}

/* build_fixed(): the root, tensors/, INDEX and the virtual files' nodes. */
static gfs_err build_fixed(gfs_fs *fs)
{
	const gfs_layout *l = fs->ctx.layout;
	gfs_vfile *index_vf = NULL;
	gfs_buf b = { 0 };
	gfs_err err;

	/* the tensors' lines are written when read: only where each starts is kept */
	fs->index_off = gfs_calloc(l->ntensors + 1, sizeof(*fs->index_off));
	err = fs->index_off ? GFS_OK : gfs_fail(GFS_ERR_NOMEM, "out of memory");
	for (size_t i = 0; i < l->ntensors && !err; i++) {
		b.len = 0;
		err = index_line(fs, i, &b);
		fs->index_off[i + 1] = fs->index_off[i] + b.len;
	}
	free(b.p);
	fs->index_gen = (gfs_vgen){ .fn = index_gen, .ctx = fs };
	if (!err)
		err = own_vfile(fs, &index_vf);
	if (!err)
		err = add_str(index_vf, "name\tdtype\tshape\tbytes\ttarget\tkey\n");
	if (!err)
		err = gfs_vfile_add_gen(index_vf, &fs->index_gen, 0, fs->index_off[l->ntensors]);
	if (err)
		return gfs_fail_prefix(err, TENSORS_NAME "/" INDEX_NAME);
	fs->nodes[N_ROOT] = (gfs_node){ .name = "", .type = GFS_NODE_DIR,
					.perm = fs->root_attr.perm, .uid = fs->root_attr.uid,
					.gid = fs->root_attr.gid };
	fs->nodes[N_TENSORS] = (gfs_node){ .name = TENSORS_NAME, .type = GFS_NODE_DIR,
					   .perm = fs->tensors_attr.perm,
					   .uid = fs->tensors_attr.uid, .gid = fs->tensors_attr.gid };
	fs->nodes[N_INDEX] = (gfs_node){ .name = INDEX_NAME, .type = GFS_NODE_REG,
					 .vf = index_vf, .perm = fs->index_attr.perm,
					 .uid = fs->index_attr.uid, .gid = fs->index_attr.gid };
	for (size_t i = 0; i < fs->nvirt; i++) {
		const fs_virt *v = &fs->virt[i];

		fs->nodes[N_FIXED + i] = (gfs_node){ .name = v->name, .type = GFS_NODE_REG,
						     .vf = v->vf, .zip_view = v->zip,
						     .perm = v->attr.perm, .uid = v->attr.uid,
						     .gid = v->attr.gid };
	}
	for (size_t i = N_ROOT; i < N_FIXED + fs->nvirt; i++) {
		fs->nodes[i].parent = i == N_INDEX ? N_TENSORS + 1 : GFS_FS_ROOT_INO;
		fs->nodes[i].entry = -1;
		fs->nodes[i].mtime = fs->mtime;
	}
	return GFS_OK;
}

/* is_shard_name(): name is stem-<digits>-of-<digits>ext. */
static bool is_shard_name(const char *name, const char *stem, const char *ext)
{
	const size_t n = strlen(stem), e = strlen(ext), len = strlen(name);
	const char *p = name + n;
	size_t d;

	if (len <= n + e || strncmp(name, stem, n) != 0 || strcmp(name + len - e, ext) != 0 ||
	    *p++ != '-')
		return false;
	d = strspn(p, "0123456789");
	if (d == 0 || strncmp(p + d, "-of-", 4) != 0)
		return false;
	p += d + 4;
	d = strspn(p, "0123456789");
	return d > 0 && p + d == name + len - e;
}

/* is_view_name(): a root entry name some view may take, whatever the options. */
static bool is_view_name(const char *name)
{
	static const char *const names[] = {
		ZIP_STEM ZIP_EXT, ST_STEM ST_EXT, ZIP_STEM ZIP_EXT ".index.json",
		ST_STEM ST_EXT ".index.json", JSON_NAME, TENSORS_NAME, ADAPTER_NAME,
	};

	for (size_t i = 0; i < ARRAY_LEN(names); i++)
		if (strcmp(name, names[i]) == 0)
			return true;
	return is_shard_name(name, ZIP_STEM, ZIP_EXT) || is_shard_name(name, ST_STEM, ST_EXT);
}

/*
 * is_hidden(): a name the caller asks to show with other content
 * (gfs_fs_opts.replace) or the layout generates (gfs_layout.texts).
 */
static bool is_hidden(const gfs_fs *fs, const char *name)
{
	for (size_t i = 0; i < fs->ctx.layout->ntexts; i++)
		if (strcmp(name, fs->ctx.layout->texts[i].name) == 0)
			return true;
	return is_replaced(fs, name);
}

/*
 * is_source(): dir/name is one of the layout's source files (the shards of a
 * DCP checkpoint live in its root): the views show their contents, so the
 * raw shards are not passed through.
 */
static bool is_source(const gfs_fs *fs, const char *dir, const char *name)
{
	const gfs_layout *l = fs->ctx.layout;
	const size_t dlen = strlen(dir);

	for (size_t i = 0; i < l->nsources; i++) {
		const char *p = l->sources[i].abspath;

		if (strncmp(p, dir, dlen) == 0 && p[dlen] == '/' && strcmp(p + dlen + 1, name) == 0)
			return true;
	}
	return false;
}

/*
 * is_dead_pointer(): name is a checkpoint file that points at files the
 * mount does not show, so that a loader given the mount would follow it
 * and fail: DeepSpeed's `latest` names a tag directory, which
 * load_checkpoint() would look for (`latest_universal` stays: the universal
 * view shows its own, naming its own directory, and DeepSpeed's
 * load_universal reads it); DCP's `.metadata` indexes the .distcp shards,
 * which are sources, not passed through.
 */
static bool is_dead_pointer(const gfs_fs *fs, const char *name)
{
	const char *const format = fs->ctx.layout->format;

	return (strcmp(format, "deepspeed") == 0 && strcmp(name, "latest") == 0) ||
	       (strcmp(format, "dcp") == 0 && strcmp(name, ".metadata") == 0);
}

static int cmp_pass(const void *a, const void *b)
{
	return strcmp(((const fs_pass *)a)->name, ((const fs_pass *)b)->name);
}

/*
 * open_beneath(): open name, a symbolic link in directory dfd (at the
 * canonical path dir), for reading if it resolves to a path beneath dir:
 * the resolved path is walked from dfd one component at a time with
 * O_NOFOLLOW, so a link swapped in meanwhile fails instead of being
 * followed.  @return the descriptor, or -1 with errno (EXDEV: it leads out).
 */
static int open_beneath(int dfd, const char *dir, const char *name)
{
	char link[PATH_MAX], real[PATH_MAX];
	const size_t dlen = strlen(dir);
	char *p, *slash;
	int fd;

	if ((size_t)snprintf(link, sizeof(link), "%s/%s", dir, name) >= sizeof(link)) {
		errno = ENAMETOOLONG;
		return -1;
	}
	if (!realpath(link, real))
		return -1;
	if (strcmp(real, dir) == 0) {
		errno = EISDIR;
		return -1;
	}
	if (strncmp(real, dir, dlen) != 0 || real[dlen] != '/' || dlen == 1) {
		errno = EXDEV;
		return -1;
	}
	fd = dup(dfd);
	for (p = real + dlen + 1; fd >= 0; p = slash + 1) {
		int next;

		slash = strchr(p, '/');
		if (slash)
			*slash = '\0';
		next = openat(fd, p, O_CLOEXEC | O_NOFOLLOW |
			      (slash ? O_PATH | O_DIRECTORY : O_RDONLY | O_NOCTTY | O_NONBLOCK));
		close(fd);
		fd = next;
		if (!slash)
			break;
	}
	return fd;
}

/*
 * open_pass(): open name in directory dfd (dir as given, real canonical)
 * as a passed-through file; *skip (after telling why, unless it is a
 * directory) if it is none.
 */
static gfs_err open_pass(const gfs_fs *fs, int dfd, const char *dir, const char *real,
			 const char *name, fs_pass *p, bool *skip)
{
	struct stat st;

	*skip = true;
	if (fstatat(dfd, name, &st, AT_SYMLINK_NOFOLLOW) != 0) {
		if (errno == ENOENT) /* gone since the listing */
			return GFS_OK;
		return gfs_fail(GFS_ERR_IO, "%s/%s: cannot stat: %s", dir, name, strerror(errno));
	}
	if (S_ISDIR(st.st_mode))
		return GFS_OK;
	if (!S_ISREG(st.st_mode) && !S_ISLNK(st.st_mode)) {
		notice(fs, "%s/%s: not shown: not a regular file", dir, name);
		return GFS_OK;
	}
	p->fd = S_ISREG(st.st_mode)
		? openat(dfd, name, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK | O_NOFOLLOW)
		: open_beneath(dfd, real, name);
	if (p->fd < 0 && errno == EXDEV && gfs_hf_is_snapshot(real)) {
		p->fd = gfs_hf_open_blob(dfd, real, name); /* a cache snapshot's link to a blob */
		if (p->fd < 0 && (errno == ELOOP || errno == ENOTDIR)) {
			notice(fs, "%s/%s: not shown: a symbolic link into blobs/ that goes on through another symbolic link (one hop only)",
			       dir, name);
			return GFS_OK;
		}
	}
	if (p->fd < 0) {
		if (errno == EXDEV)
			notice(fs, "%s/%s: not shown: a symbolic link that leaves the checkpoint directory",
			       dir, name);
		else if (errno == ENOENT)
			notice(fs, "%s/%s: not shown: a dangling symbolic link", dir, name);
		else if (errno == ELOOP || errno == ENOTDIR)
			notice(fs, "%s/%s: not shown: a symbolic link that loops or changed while resolved",
			       dir, name);
		else if (errno != EISDIR)
			return gfs_fail(GFS_ERR_IO, "%s/%s: cannot open: %s", dir, name,
					strerror(errno));
		return GFS_OK;
	}
	if (fstat(p->fd, &p->st) != 0) {
		const int e = errno;

		close(p->fd);
		return gfs_fail(GFS_ERR_IO, "%s/%s: cannot stat: %s", dir, name, strerror(e));
	}
	if (!S_ISREG(p->st.st_mode)) {
		if (!S_ISDIR(p->st.st_mode))
			notice(fs, "%s/%s: not shown: not a regular file", dir, name);
		close(p->fd);
		return GFS_OK;
	}
	*skip = false;
	p->name = gfs_strdup(name);
	p->path = malloc(strlen(dir) + strlen(name) + 2);
	if (!p->name || !p->path) {
		close(p->fd);
		free(p->name);
		free(p->path);
		return gfs_fail(GFS_ERR_NOMEM, "out of memory");
	}
	sprintf(p->path, "%s/%s", dir, name);
	return GFS_OK;
}

/*
 * pass_attr(): a passed-through file's attributes: its owner and group,
 * read for each class that may read it along its path, and its execute
 * bits where read is granted.
 */
static gfs_err pass_attr(gfs_fs *fs, fs_pass *p)
{
	uint32_t id;
	gfs_err err = gfs_perm_add_fd(fs->acc.perm, p->fd, p->path, &id);

	if (err)
		return err;
	set_begin(fs, false);
	err = set_add(fs, id);
	if (err)
		return err;
	p->attr = set_attr(fs, false);
	p->attr.perm |= p->st.st_mode & 0111 & (p->attr.perm >> 2);
	return GFS_OK;
}

/* scan_root(): open every regular file of the checkpoint root directory. */
static gfs_err scan_root(gfs_fs *fs, const char *dir)
{
	DIR *d = opendir(dir);
	char real[PATH_MAX];
	size_t cap = 0;
	gfs_err err = GFS_OK;

	if (!d)
		return gfs_fail(GFS_ERR_IO, "%s: cannot open directory: %s", dir, strerror(errno));
	if (!realpath(dir, real)) {
		err = gfs_fail(GFS_ERR_IO, "%s: cannot resolve: %s", dir, strerror(errno));
		closedir(d);
		return err;
	}
	for (;;) {
		const struct dirent *de;
		bool skip;

		errno = 0;
		de = readdir(d);
		if (!de) {
			if (errno)
				err = gfs_fail(GFS_ERR_IO, "%s: cannot list: %s", dir,
					       strerror(errno));
			break;
		}
		if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0 ||
		    is_source(fs, dir, de->d_name) || is_hidden(fs, de->d_name) ||
		    is_dead_pointer(fs, de->d_name))
			continue;
		if (is_extra_top(fs, de->d_name)) {
			err = add_note(fs, "%s/%s: hidden behind the %s view", dir, de->d_name,
				       strcmp(de->d_name, OPTIM_NAME) == 0 ? "optim" : "universal");
			if (err)
				break;
			continue;
		}
		if (is_view_name(de->d_name)) {
			if (de->d_type != DT_DIR)
				notice(fs, "%s/%s: not shown: the name belongs to a gatherfs view",
				       dir, de->d_name);
			continue;
		}
		/* plain model files are sources or shadowed by the views (import_plain.h) */
		if (gfs_plain_is_model_name(de->d_name))
			continue;
		if (!gfs_grow((void **)&fs->pass, &cap, fs->npass, sizeof(*fs->pass), 16)) {
			err = gfs_fail(GFS_ERR_NOMEM, "out of memory");
			break;
		}
		err = open_pass(fs, dirfd(d), dir, real, de->d_name, &fs->pass[fs->npass], &skip);
		if (!err && !skip) {
			err = pass_attr(fs, &fs->pass[fs->npass]);
			fs->npass++;
		}
		if (err)
			break;
	}
	closedir(d);
	if (!err && fs->npass)
		qsort(fs->pass, fs->npass, sizeof(*fs->pass), cmp_pass);
	return err;
}

/* build_pass(): nodes of the passed-through files. */
static gfs_err build_pass(gfs_fs *fs)
{
	for (size_t i = 0; i < fs->npass; i++) {
		const fs_pass *p = &fs->pass[i];
		gfs_vfile *vf = NULL;
		gfs_err err = own_vfile(fs, &vf);

		if (!err)
			err = gfs_vfile_add_fd(vf, p->fd, 0, (uint64_t)p->st.st_size, p->path);
		if (err)
			return gfs_fail_prefix(err, "%s", p->path);
		fs->nodes[N_FIXED + fs->nvirt + i] = (gfs_node){
			.parent = GFS_FS_ROOT_INO, .name = p->name, .type = GFS_NODE_REG,
			.vf = vf, .entry = -1, .perm = p->attr.perm, .uid = p->attr.uid,
			.gid = p->attr.gid, .mtime = p->st.st_mtim,
		};
	}
	return GFS_OK;
}

/*
 * escape_kept(): gfs_fs_escape_name() of name (a layout's name, which
 * outlives fs): name itself when escaping leaves it as it is, else a copy
 * in fs->strs.
 */
static gfs_err escape_kept(gfs_fs *fs, const char *name, const char **out)
{
	char *e = NULL;
	gfs_err err = gfs_fs_escape_name(name, &e);

	if (!err && strcmp(e, name) == 0)
		*out = name;
	else if (!err && !(*out = gfs_arena_strdup(&fs->strs, e)))
		err = gfs_fail(GFS_ERR_NOMEM, "out of memory");
	free(e);
	return err;
}

/* build_tensors(): one node per layout entry under tensors/. */
static gfs_err build_tensors(gfs_fs *fs)
{
	const gfs_layout *l = fs->ctx.layout;

	for (size_t i = 0; i < l->ntensors; i++) {
		const gfs_tensor *t = &l->tensors[i];
		gfs_node *n = &fs->nodes[tensor_node(fs, i)];
		const char *name = NULL, *link = NULL;
		gfs_err err = escape_kept(fs, t->name, &name);

		if (err)
			return err;
		*n = (gfs_node){ .parent = N_TENSORS + 1, .name = name,
				 .entry = (int64_t)i, .mtime = fs->mtime };
		if (t->alias_of >= 0) {
			err = escape_kept(fs, l->tensors[t->alias_of].name, &link);
			n->type = GFS_NODE_LNK;
			n->link = link;
			n->perm = 0777;
			n->uid = fs->tensors_attr.uid;
			n->gid = fs->tensors_attr.gid;
		} else {
			const uint64_t nbytes = gfs_tensor_out_nbytes(l, i, fs->ctx.want);
			const gfs_vfile *vf;
			gfs_vfile_buf vb;
			fs_attr attr = { 0 };

			err = tensor_attr(fs, i, &attr);
			if (!err) /* one tensor: no vfile kept (gfs_fs_vfile()) */
				err = gfs_vfile_one(&fs->ctx, i, nbytes, &vb, &vf);
			n->type = GFS_NODE_REG;
			n->perm = attr.perm;
			n->uid = attr.uid;
			n->gid = attr.gid;
		}
		if (err)
			return gfs_fail_prefix(err, "tensor %s", t->name);
	}
	return GFS_OK;
}

/* adapter_node(): the node index of adapter/ (k 0) and its files (k 1, 2). */
static size_t adapter_node(const gfs_fs *fs, size_t k)
{
	return N_FIXED + fs->nvirt + fs->npass + fs->ctx.layout->ntensors + k;
}

/*
 * open_adapter_cfg(): adapter_config.json of the checkpoint root for
 * adapter/, if there is one (fs->adapter_cfg_fd, else -1).
 */
static gfs_err open_adapter_cfg(gfs_fs *fs, const char *dir, struct stat *st)
{
	char path[4096];

	fs->adapter_cfg_fd = -1;
	if (!dir || snprintf(path, sizeof(path), "%s/%s", dir, ADAPTER_CFG) >= (int)sizeof(path))
		return GFS_OK;
	fs->adapter_cfg_fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
	if (fs->adapter_cfg_fd < 0) {
		if (errno == ENOENT)
			return GFS_OK;
		return gfs_fail(GFS_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
	}
	if (fstat(fs->adapter_cfg_fd, st) != 0 || !S_ISREG(st->st_mode)) {
		close(fs->adapter_cfg_fd);
		fs->adapter_cfg_fd = -1;
	}
	return GFS_OK;
}

/* build_adapter(): adapter/ with adapter_model.safetensors and adapter_config.json. */
static gfs_err build_adapter(gfs_fs *fs, const struct stat *cfg_st)
{
	gfs_vfile *st = NULL, *cfg = NULL;
	gfs_err err = gfs_stview_new(&fs->actx, NULL, 0, &st);
	const size_t dir = adapter_node(fs, 0);

	if (!err)
		err = own(fs, st);
	if (!err && fs->adapter_cfg_fd >= 0) {
		err = own_vfile(fs, &cfg);
		if (!err)
			err = gfs_vfile_add_fd(cfg, fs->adapter_cfg_fd, 0, (uint64_t)cfg_st->st_size,
					       ADAPTER_NAME "/" ADAPTER_CFG);
	}
	if (err)
		return gfs_fail_prefix(err, ADAPTER_NAME "/" ADAPTER_ST);
	/* as private as every source together (the adapter's files are among them) */
	fs->nodes[dir] = (gfs_node){ .parent = GFS_FS_ROOT_INO, .name = ADAPTER_NAME,
				     .type = GFS_NODE_DIR, .entry = -1, .perm = fs->xdir_attr.perm,
				     .uid = fs->xdir_attr.uid, .gid = fs->xdir_attr.gid,
				     .mtime = fs->mtime };
	fs->nodes[dir + 1] = (gfs_node){ .parent = (uint32_t)(dir + 1), .name = ADAPTER_ST,
					 .type = GFS_NODE_REG, .vf = st, .entry = -1,
					 .perm = fs->xfile_attr.perm,
					 .uid = fs->xfile_attr.uid, .gid = fs->xfile_attr.gid,
					 .mtime = fs->mtime };
	if (cfg)
		fs->nodes[dir + 2] = (gfs_node){ .parent = (uint32_t)(dir + 1), .name = ADAPTER_CFG,
						 .type = GFS_NODE_REG, .vf = cfg, .entry = -1,
						 .perm = cfg_st->st_mode & fs->xfile_attr.perm,
						 .uid = fs->xfile_attr.uid, .gid = fs->xfile_attr.gid,
						 .mtime = cfg_st->st_mtim };
	return GFS_OK;
}

static int cmp_name(const void *a, const void *b)
{
	return strcmp(((const struct fs_name *)a)->name, ((const struct fs_name *)b)->name);
}

/* ------------------------------------------------- optim/ and universal */

/* add_note(): record one line for gfs_fs_note(). */
static gfs_err add_note(gfs_fs *fs, const char *fmt, ...)
{
	char **n = gfs_reallocarray(fs->notes, fs->nnotes + 1, sizeof(*n));
	char line[1024];
	va_list ap;

	if (!n)
		return gfs_fail(GFS_ERR_NOMEM, "out of memory");
	fs->notes = n;
	va_start(ap, fmt);
	vsnprintf(line, sizeof(line), fmt, ap);
	va_end(ap);
	n[fs->nnotes] = gfs_strdup(line);
	if (!n[fs->nnotes])
		return gfs_fail(GFS_ERR_NOMEM, "out of memory");
	fs->nnotes++;
	return GFS_OK;
}

/* top_len(): the length of path's first component. */
static size_t top_len(const char *path)
{
	return strcspn(path, "/");
}

/* is_xtop(): the first component of an extra view's file is name[0..n). */
static bool is_xtop(const gfs_fs *fs, const char *name, size_t n)
{
	for (size_t i = 0; i < fs->nxtops; i++) {
		const char *p = fs->xfiles[fs->xtops[i]].path;

		if (top_len(p) == n && strncmp(p, name, n) == 0)
			return true;
	}
	return false;
}

/*
 * add_xfile(): a file of the extra views at path (copied); a new first
 * component goes in fs->xtops (a handful: optim, the universal view's), so
 * that is_extra_top() does not walk every file.
 */
static gfs_err add_xfile(gfs_fs *fs, const char *path, const gfs_vfile *vf, int64_t entry)
{
	const char *p = gfs_arena_strdup(&fs->strs, path);

	if (!p || !gfs_grow((void **)&fs->xfiles, &fs->cap_xfiles, fs->nxfiles,
			    sizeof(*fs->xfiles), 64))
		return gfs_fail(GFS_ERR_NOMEM, "out of memory");
	if (!is_xtop(fs, p, top_len(p))) {
		if (!gfs_grow((void **)&fs->xtops, &fs->cap_xtops, fs->nxtops, sizeof(*fs->xtops), 4))
			return gfs_fail(GFS_ERR_NOMEM, "out of memory");
		fs->xtops[fs->nxtops++] = fs->nxfiles;
	}
	fs->xfiles[fs->nxfiles++] = (fs_xfile){ .path = p, .vf = vf, .entry = entry };
	return GFS_OK;
}

/*
 * build_optim(): optim/<state>/<name> per optimizer-state entry and
 * optim/<state>.safetensors per state, states in first-seen order.
 */
static gfs_err build_optim(gfs_fs *fs)
{
	const gfs_layout *l = fs->ctx.layout;
	const size_t first = l->ntensors, n = gfs_layout_nentries(l);
	size_t *entries = gfs_calloc(l->noptim + 1, sizeof(*entries));
	bool *done = gfs_calloc(l->noptim + 1, sizeof(*done));
	gfs_err err = entries && done ? GFS_OK : gfs_fail(GFS_ERR_NOMEM, "out of memory");

	for (size_t i = first; !err && i < n; i++) {
		char *state = NULL, *name = NULL, *path = NULL;
		const gfs_vfile *vf;
		gfs_vfile_buf vb;

		err = gfs_fs_escape_name(l->tensors[i].state, &state);
		if (!err)
			err = gfs_fs_escape_name(l->tensors[i].name, &name);
		if (!err && !(path = malloc(strlen(state) + strlen(name) + sizeof(OPTIM_NAME) + 2)))
			err = gfs_fail(GFS_ERR_NOMEM, "out of memory");
		if (!err) {
			sprintf(path, OPTIM_NAME "/%s/%s", state, name);
			/* one tensor: no vfile kept (gfs_fs_vfile()) */
			err = gfs_vfile_one(&fs->ctx, i, gfs_tensor_out_nbytes(l, i, fs->ctx.want), &vb,
					    &vf);
		}
		if (!err)
			err = add_xfile(fs, path, NULL, (int64_t)i);
		free(state);
		free(name);
		free(path);
	}
	for (size_t i = first; !err && i < n; i++) {
		const char *st = l->tensors[i].state;
		char *state = NULL, *path = NULL;
		gfs_vfile *vf = NULL;
		size_t k = 0;

		if (done[i - first])
			continue;
		for (size_t j = i; j < n; j++) {
			if (strcmp(l->tensors[j].state, st) == 0) {
				entries[k++] = j;
				done[j - first] = true;
			}
		}
		err = gfs_fs_escape_name(st, &state);
		if (!err && !(path = malloc(strlen(state) + sizeof(OPTIM_NAME ST_EXT) + 2)))
			err = gfs_fail(GFS_ERR_NOMEM, "out of memory");
		if (!err) {
			sprintf(path, OPTIM_NAME "/%s" ST_EXT, state);
			err = gfs_stview_new(&fs->ctx, entries, k, &vf);
		}
		if (!err)
			err = own(fs, vf);
		if (!err)
			err = add_xfile(fs, path, vf, -1);
		if (err)
			err = gfs_fail_prefix(err, "%s", path ? path : OPTIM_NAME);
		free(state);
		free(path);
	}
	free(entries);
	free(done);
	return err;
}

/* build_universal(): the universal view's files, or a note saying why not. */
static gfs_err build_universal(gfs_fs *fs)
{
	const gfs_layout *l = fs->ctx.layout;
	gfs_err err = gfs_uview_new(l, fs->ctx.src, fs->ctx.crc_cache, &fs->uview);

	if (err == GFS_ERR_NOTFOUND || err == GFS_ERR_UNSUPPORTED) {
		fs->universal_absent = gfs_arena_strndup(&fs->strs, gfs_errmsg(),
							 strlen(gfs_errmsg()));
		if (!fs->universal_absent)
			return gfs_fail(GFS_ERR_NOMEM, "out of memory");
	}
	if (err == GFS_ERR_NOTFOUND)
		return GFS_OK;
	if (err == GFS_ERR_UNSUPPORTED)
		/* views asked for by name: the caller says why (gfs_fs_view_absent()) */
		return fs->opts.views != GFS_VIEW_ALL
			? GFS_OK
			: add_note(fs, "%s: no DeepSpeed universal checkpoint view: %s",
				   l->base_dir, fs->universal_absent);
	if (!err && gfs_uview_note(fs->uview))
		err = add_note(fs, "%s: %s", l->base_dir, gfs_uview_note(fs->uview));
	/* no vfile: composed on first use (reg_size(), gfs_fs_vfile()); the
	 * param folders and their files are not stored (vnode()) */
	for (size_t i = 0; !err && i < gfs_uview_nfixed(fs->uview); i++) {
		char path[PATH_BYTES];
		const size_t len = gfs_uview_path(fs->uview, i, path, sizeof(path));

		if (len >= sizeof(path))
			err = gfs_fail(GFS_ERR_UNSUPPORTED, "universal view: a path longer than %zu bytes (%.64s...)",
				       sizeof(path) - 1, path);
		if (!err)
			err = add_xfile(fs, path, NULL, UNI_ENTRY(i));
	}
	return err;
}

/* is_extra_top(): name is the first component of an extra view's file. */
static bool is_extra_top(const gfs_fs *fs, const char *name)
{
	return is_xtop(fs, name, strlen(name));
}

/*
 * xnode_add(): a new extra node under parent (node index): file f's, or
 * (f < 0) the directory path[0..len).
 */
static gfs_err xnode_add(gfs_fs *fs, const char *path, size_t len, size_t parent, int64_t file)
{
	const char *p = file >= 0 ? fs->xfiles[file].path : gfs_arena_strndup(&fs->strs, path, len);

	assert(file < 0 || strlen(p) == len);
	if (fs->nxnodes >= INT32_MAX || fs->xfirst + fs->nxnodes >= UINT32_MAX)
		return gfs_fail(GFS_ERR_LIMIT,
				"more than 2^31 - 1 files and directories in the optim/ and universal views");
	if (!p || !gfs_grow((void **)&fs->xnodes, &fs->cap_xnodes, fs->nxnodes,
			    sizeof(*fs->xnodes), 64))
		return gfs_fail(GFS_ERR_NOMEM, "out of memory");
	if (file < 0)
		file = -1 - (int64_t)fs->nxdirs++;
	fs->xnodes[fs->nxnodes++] = (fs_xnode){ .path = p, .parent = (uint32_t)parent,
						.file = (int32_t)file };
	return GFS_OK;
}

/* The extra directories by path while the nodes are planned: open addressing. */
typedef struct fs_xdirmap {
	uint32_t *slot; /* xnode index + 1; 0: empty */
	size_t cap;     /* a power of two */
	size_t n;
} fs_xdirmap;

/* path_hash(): FNV-1a of path[0..len). */
static uint64_t path_hash(const char *path, size_t len)
{
	uint64_t h = 0xcbf29ce484222325ull;

	for (size_t i = 0; i < len; i++)
		h = (h ^ (unsigned char)path[i]) * 0x100000001b3ull;
	return h;
}

/* xdir_slot(): the slot of directory path[0..len) in m: its node, or an empty one. */
static uint32_t *xdir_slot(const gfs_fs *fs, const fs_xdirmap *m, const char *path, size_t len)
{
	size_t k = (size_t)path_hash(path, len) & (m->cap - 1);

	for (;; k = (k + 1) & (m->cap - 1)) {
		const fs_xnode *x;

		if (!m->slot[k])
			return &m->slot[k];
		x = &fs->xnodes[m->slot[k] - 1];
		if (strncmp(x->path, path, len) == 0 && x->path[len] == '\0')
			return &m->slot[k];
	}
}

/* xdir_put(): remember the newest extra node, a directory, in m (grown to half full at most). */
static gfs_err xdir_put(const gfs_fs *fs, fs_xdirmap *m)
{
	const fs_xnode *x = &fs->xnodes[fs->nxnodes - 1];

	if (2 * (m->n + 1) > m->cap) {
		fs_xdirmap g = { .cap = m->cap ? 2 * m->cap : 64 };

		g.slot = gfs_calloc(g.cap, sizeof(*g.slot));
		if (!g.slot)
			return gfs_fail(GFS_ERR_NOMEM, "out of memory");
		for (size_t k = 0; k < m->cap; k++) {
			if (m->slot[k]) {
				const char *p = fs->xnodes[m->slot[k] - 1].path;

				*xdir_slot(fs, &g, p, strlen(p)) = m->slot[k];
			}
		}
		g.n = m->n;
		free(m->slot);
		*m = g;
	}
	*xdir_slot(fs, m, x->path, strlen(x->path)) = (uint32_t)fs->nxnodes;
	m->n++;
	return GFS_OK;
}

/*
 * plan_xnodes(): one node per directory and file of the extra views, in
 * file order (a directory before its contents).  Directories are found by
 * path in a hash table: O(1) per path component.
 */
static gfs_err plan_xnodes(gfs_fs *fs)
{
	fs_xdirmap m = { 0 };
	gfs_err err = GFS_OK;

	for (size_t f = 0; f < fs->nxfiles && !err; f++) {
		const char *path = fs->xfiles[f].path;
		size_t parent = N_ROOT;

		for (const char *s = strchr(path, '/'); s && !err; s = strchr(s + 1, '/')) {
			const size_t len = (size_t)(s - path);
			const uint32_t *hit = m.cap ? xdir_slot(fs, &m, path, len) : NULL;

			if (hit && *hit) {
				parent = fs->xfirst + *hit - 1;
				continue;
			}
			err = xnode_add(fs, path, len, parent, -1);
			if (!err)
				err = xdir_put(fs, &m);
			parent = fs->xfirst + fs->nxnodes - 1;
		}
		if (!err)
			err = xnode_add(fs, path, strlen(path), parent, (int64_t)f);
	}
	free(m.slot);
	if (!err && fs->cap_xnodes > fs->nxnodes && fs->nxnodes) {
		fs_xnode *x = gfs_reallocarray(fs->xnodes, fs->nxnodes, sizeof(*x));

		if (x) {
			fs->xnodes = x;
			fs->cap_xnodes = fs->nxnodes;
		}
	}
	return err;
}

/*
 * sort_dir(): d->sorted, d's children by name (d->kids set), and
 * GFS_ERR_UNSUPPORTED naming the first name two children share.
 */
static gfs_err sort_dir(const gfs_fs *fs, fs_dir *d)
{
	struct fs_name *by = gfs_calloc(d->n ? d->n : 1, sizeof(*by));

	if (!by)
		return gfs_fail(GFS_ERR_NOMEM, "out of memory");
	for (size_t i = 0; i < d->n; i++)
		by[i] = (struct fs_name){ fs->nodes[d->kids[i]].name, d->kids[i] };
	qsort(by, d->n, sizeof(*by), cmp_name);
	for (size_t i = 0; i < d->n; i++) {
		if (i > 0 && strcmp(by[i - 1].name, by[i].name) == 0) { /* only cut names can */
			const gfs_err err = gfs_fail(GFS_ERR_UNSUPPORTED,
						     "two entries are both named %s", by[i].name);

			free(by);
			return err;
		}
		d->sorted[i] = by[i].node;
	}
	free(by);
	return GFS_OK;
}

/* xdir(): the directory of extra node x (an index into xnodes), a directory. */
static fs_dir *xdir(const gfs_fs *fs, size_t x)
{
	assert(fs->xnodes[x].file < 0 && (size_t)(-1 - fs->xnodes[x].file) < fs->nxdirs);
	return &fs->xdirs[-1 - fs->xnodes[x].file];
}

/* build_xnodes(): fill the extra nodes and their directories. */
static gfs_err build_xnodes(gfs_fs *fs)
{
	size_t *count;

	fs->xdirs = gfs_calloc(fs->nxdirs + 1, sizeof(*fs->xdirs));
	count = gfs_calloc(fs->nxnodes + 1, sizeof(*count));
	if (!fs->xdirs || !count) {
		free(count);
		return gfs_fail(GFS_ERR_NOMEM, "out of memory");
	}
	for (size_t i = 0; i < fs->nxnodes; i++) {
		const fs_xnode *x = &fs->xnodes[i];
		const char *slash = strrchr(x->path, '/');
		gfs_node *n = &fs->nodes[fs->xfirst + i];

		*n = (gfs_node){ .parent = x->parent + 1, .name = slash ? slash + 1 : x->path,
				 .entry = -1, .mtime = fs->mtime };
		if (x->file < 0) {
			n->type = GFS_NODE_DIR;
			n->perm = fs->xdir_attr.perm;
			n->uid = fs->xdir_attr.uid;
			n->gid = fs->xdir_attr.gid;
		} else {
			n->type = GFS_NODE_REG;
			n->vf = fs->xfiles[x->file].vf;
			n->entry = fs->xfiles[x->file].entry;
			n->perm = fs->xfile_attr.perm;
			n->uid = fs->xfile_attr.uid;
			n->gid = fs->xfile_attr.gid;
		}
		if (x->parent != N_ROOT)
			count[x->parent - fs->xfirst]++;
	}
	for (size_t i = 0; i < fs->nxnodes; i++) {
		fs_dir *d;

		if (fs->xnodes[i].file >= 0)
			continue;
		d = xdir(fs, i);
		d->kids = gfs_calloc(count[i] + 1, sizeof(*d->kids));
		d->sorted = gfs_calloc(count[i] + 1, sizeof(*d->sorted));
		if (!d->kids || !d->sorted) {
			free(count);
			return gfs_fail(GFS_ERR_NOMEM, "out of memory");
		}
	}
	free(count);
	for (size_t i = 0; i < fs->nxnodes; i++) {
		const size_t parent = fs->xnodes[i].parent;
		fs_dir *d;

		if (parent == N_ROOT)
			continue;
		d = xdir(fs, parent - fs->xfirst);
		d->kids[d->n] = (uint32_t)(fs->xfirst + i);
		d->n++;
	}
	for (size_t i = 0; i < fs->nxdirs; i++) {
		const gfs_err err = sort_dir(fs, &fs->xdirs[i]);

		if (err)
			return err;
	}
	return GFS_OK;
}

/*
 * plan_vnodes(): the universal param folders and their files, made on
 * request past the stored nodes (vnode()), under the stored zero/ folder
 * (it holds optimizer_state.pt), whose stored names they must not take.
 */
static gfs_err plan_vnodes(gfs_fs *fs)
{
	const gfs_uview *u = fs->uview;
	const char *zero = gfs_uview_zero_dir(u);
	const size_t per = 1 + gfs_uview_per_param(u);
	const fs_dir *d;
	size_t x = 0, stem = 0;

	while (x < fs->nxnodes && strcmp(fs->xnodes[x].path, zero) != 0)
		x++;
	if (x == fs->nxnodes || fs->xnodes[x].file >= 0)
		return gfs_fail(GFS_ERR_UNSUPPORTED, "universal view: no folder %s", zero);
	if (gfs_uview_nparams(u) >= (UINT32_MAX - fs->nnodes) / per)
		return gfs_fail(GFS_ERR_LIMIT, "more than 2^32 - 2 files and directories");
	for (size_t s = 0; s < per - 1; s++)
		stem = strlen(gfs_uview_stem(u, s)) > stem ? strlen(gfs_uview_stem(u, s)) : stem;
	for (size_t p = 0; p < gfs_uview_nparams(u); p++)
		if (strlen(zero) + strlen(gfs_uview_param(u, p)) + stem + 2 >= PATH_BYTES)
			return gfs_fail(GFS_ERR_UNSUPPORTED,
					"universal view: a path longer than %d bytes (%s/%.64s...)",
					PATH_BYTES - 1, zero, gfs_uview_param(u, p));
	d = xdir(fs, x);
	for (size_t i = 0; i < d->n; i++)
		if (gfs_uview_find_param(u, fs->nodes[d->kids[i]].name) >= 0)
			return gfs_fail(GFS_ERR_UNSUPPORTED, "%s: two entries are both named %s",
					zero, fs->nodes[d->kids[i]].name);
	fs->uzero = fs->xfirst + x;
	fs->nvnodes = gfs_uview_nparams(u) * per;
	return GFS_OK;
}

/* build_dir(): directory d holding nodes first..first+n-1 after `fixed`. */
static gfs_err build_dir(gfs_fs *fs, fs_dir *d, const uint32_t *fixed, size_t nfixed,
			 size_t first, size_t n)
{
	d->n = nfixed + n;
	d->kids = gfs_calloc(d->n, sizeof(*d->kids));
	d->sorted = gfs_calloc(d->n, sizeof(*d->sorted));
	if (!d->kids || !d->sorted)
		return gfs_fail(GFS_ERR_NOMEM, "out of memory");
	for (size_t i = 0; i < d->n; i++)
		d->kids[i] = i < nfixed ? fixed[i] : (uint32_t)(first + i - nfixed);
	return sort_dir(fs, d);
}

void gfs_fs_free(gfs_fs *fs)
{
	if (!fs)
		return;
	access_end(fs);
	gfs_thash_free(fs->thash);
	for (size_t i = 0; i < fs->npass; i++) {
		close(fs->pass[i].fd);
		free(fs->pass[i].name);
		free(fs->pass[i].path);
	}
	for (size_t i = 0; i < fs->nowned; i++)
		gfs_vfile_free(fs->owned[i]);
	for (size_t i = 0; i < fs->nzips; i++)
		gfs_tzview_free(fs->zips[i]);
	for (size_t i = 0; i < fs->nvirt; i++)
		free(fs->virt[i].name);
	for (size_t i = 0; fs->xdirs && i < fs->nxdirs; i++) {
		free(fs->xdirs[i].kids);
		free(fs->xdirs[i].sorted);
	}
	gfs_arena_free(&fs->strs);
	for (size_t i = 0; i < fs->nnotes; i++)
		free(fs->notes[i]);
	free(fs->notes);
	free(fs->xfiles);
	free(fs->xtops);
	free(fs->xnodes);
	free(fs->xdirs);
	gfs_uview_free(fs->uview);
	free(fs->zips);
	free(fs->virt);
	free(fs->root.kids);
	free(fs->root.sorted);
	free(fs->tensors.kids);
	free(fs->tensors.sorted);
	free(fs->adapter.kids);
	free(fs->adapter.sorted);
	if (fs->adapter_cfg_fd >= 0)
		close(fs->adapter_cfg_fd);
	free(fs->owned);
	free(fs->index_off);
	free(fs->pass);
	free(fs->nodes);
	if (fs->json) {
		(void)pthread_mutex_destroy(&fs->json->mu);
		free(fs->json->end);
		free(fs->json);
	}
	free(fs);
}

/* build(): everything but the allocation of fs itself. */
static gfs_err build(gfs_fs *fs)
{
	static const uint32_t tensors_fixed[] = { N_INDEX };
	const gfs_layout *l = fs->ctx.layout;
	const char *dir = l->root_dir ? l->root_dir : l->base_dir;
	const bool tensors = fs->opts.views & GFS_VIEW_TENSORS;
	uint32_t *root_fixed = NULL;
	size_t nroot = 0;
	struct stat st, cfg_st;
	gfs_err err;

	if (stat(dir, &st) != 0)
		return gfs_fail(GFS_ERR_IO, "%s: cannot stat: %s", dir, strerror(errno));
	fs->mtime = st.st_mtim;
	err = access_begin(fs);
	if (err)
		return err;
	set_begin(fs, true);
	if (fs->acc.root_listed)
		err = set_add(fs, fs->acc.root_id);
	if (err)
		return err;
	fs->root_attr = set_attr(fs, true);
	fs->tensors_attr = meta_attr(fs, true);
	fs->index_attr = meta_attr(fs, false);
	/* optim/ and the universal view: as private as every source together */
	set_begin(fs, true);
	err = set_add_entries(fs, NULL, 0);
	if (err)
		return err;
	fs->xfile_attr = set_attr(fs, false);
	fs->xdir_attr = set_attr(fs, true);
	err = build_views(fs);
	if (!err && (fs->opts.views & GFS_VIEW_OPTIM))
		err = build_optim(fs);
	if ((fs->opts.views & GFS_VIEW_OPTIM) && l->noptim == 0)
		fs->optim_absent = "no optimizer state";
	if (!err && (fs->opts.views & GFS_VIEW_UNIVERSAL))
		err = build_universal(fs);
	if (!err && l->root_dir)
		err = scan_root(fs, l->root_dir);
	if (!err && fs->opts.adapter) {
		err = open_adapter_cfg(fs, fs->opts.adapter->root_dir, &cfg_st);
		fs->nadapter = fs->adapter_cfg_fd >= 0 ? 3 : 2;
	}
	fs->xfirst = N_FIXED + fs->nvirt + fs->npass + l->ntensors + fs->nadapter;
	if (!err)
		err = plan_xnodes(fs);
	if (!err && fs->xfirst + fs->nxnodes >= UINT32_MAX)
		err = gfs_fail(GFS_ERR_LIMIT, "more than 2^32 - 2 files and directories");
	if (err)
		return err;
	fs->nnodes = fs->xfirst + fs->nxnodes;
	fs->nodes = gfs_calloc(fs->nnodes, sizeof(*fs->nodes));
	root_fixed = gfs_calloc(fs->nvirt + 3 + fs->nxnodes, sizeof(*root_fixed));
	if (!fs->nodes || !root_fixed) {
		free(root_fixed);
		return gfs_fail(GFS_ERR_NOMEM, "out of memory");
	}
	for (size_t i = 0; i < fs->nvirt; i++)
		root_fixed[nroot++] = (uint32_t)(N_FIXED + i);
	if (tensors)
		root_fixed[nroot++] = N_TENSORS;
	if (fs->nadapter)
		root_fixed[nroot++] = (uint32_t)adapter_node(fs, 0);
	for (size_t i = 0; i < fs->nxnodes; i++)
		if (fs->xnodes[i].parent == N_ROOT)
			root_fixed[nroot++] = (uint32_t)(fs->xfirst + i);
	/* tensor names first: INDEX lists them */
	err = build_tensors(fs);
	if (!err && fs->nadapter)
		err = build_adapter(fs, &cfg_st);
	if (!err)
		err = build_xnodes(fs);
	if (!err)
		err = build_pass(fs);
	if (!err)
		err = build_fixed(fs);
	for (size_t i = 0; i < fs->nnodes; i++)
		fs->nodes[i].ino = (uint32_t)(i + 1);
	if (!err && fs->uview)
		err = plan_vnodes(fs);
	if (!err)
		err = build_dir(fs, &fs->root, root_fixed, nroot, N_FIXED + fs->nvirt, fs->npass);
	if (!err)
		err = build_dir(fs, &fs->tensors, tensors_fixed, ARRAY_LEN(tensors_fixed),
				tensor_node(fs, 0), tensors ? l->ntensors : 0);
	if (!err && fs->nadapter)
		err = build_dir(fs, &fs->adapter, NULL, 0, adapter_node(fs, 1), fs->nadapter - 1);
	for (size_t i = 0; i < fs->nowned; i++) /* all complete now */
		gfs_vfile_shrink(fs->owned[i]);
	free(fs->xfiles); /* the nodes have what the server needs */
	fs->xfiles = NULL;
	fs->nxfiles = fs->cap_xfiles = 0;
	free(fs->xtops);
	fs->xtops = NULL;
	fs->nxtops = fs->cap_xtops = 0;
	free(root_fixed);
	access_end(fs);
	return err;
}

static const struct {
	const char *name;
	unsigned bit;
} view_names[] = {
	{ "bin", GFS_VIEW_BIN }, { "safetensors", GFS_VIEW_SAFETENSORS },
	{ "tensors", GFS_VIEW_TENSORS }, { "layout", GFS_VIEW_LAYOUT },
	{ "optim", GFS_VIEW_OPTIM }, { "universal", GFS_VIEW_UNIVERSAL },
	{ "all", GFS_VIEW_ALL },
};

const char *gfs_view_name(unsigned view)
{
	for (size_t k = 0; k < ARRAY_LEN(view_names); k++)
		if (view_names[k].bit == view)
			return view_names[k].name;
	return NULL;
}

gfs_err gfs_views_parse(const char *s, unsigned *views)
{
	static const char *const all = "bin, safetensors, tensors, layout, optim, universal, all";
	unsigned v = 0;

	while (*s) {
		const size_t n = strcspn(s, ":+ ");
		size_t k = 0;

		while (k < ARRAY_LEN(view_names) &&
		       (strlen(view_names[k].name) != n || strncmp(s, view_names[k].name, n) != 0))
			k++;
		if (k == ARRAY_LEN(view_names))
			return gfs_fail(GFS_ERR_INVAL, "unknown view '%.*s' (views: %s)", (int)n, s,
					all);
		v |= view_names[k].bit;
		s += n;
		if (*s)
			s++;
	}
	if (!v)
		return gfs_fail(GFS_ERR_INVAL, "no view given");
	*views = v;
	return GFS_OK;
}

gfs_err gfs_fs_new(const gfs_layout *l, const gfs_srcset *src, const gfs_fs_opts *o,
		   gfs_fs **out)
{
	gfs_fs *fs = calloc(1, sizeof(*fs));
	gfs_err err;

	assert(l->finished);
	if (!fs)
		return gfs_fail(GFS_ERR_NOMEM, "out of memory");
	fs->ctx = (gfs_vctx){ .layout = l, .src = src, .want = o->want, .crc_cache = o->crc_cache };
	fs->actx = (gfs_vctx){ .layout = o->adapter, .src = o->adapter_src, .want = o->want };
	fs->adapter_cfg_fd = -1;
	fs->opts = *o;
	err = build(fs);
	if (!err)
		err = gfs_thash_new(fs->nnodes, &fs->thash);
	if (err) {
		gfs_fs_free(fs);
		return err;
	}
	*out = fs;
	return GFS_OK;
}

/* ----------------------------------------------------------------- access */

/*
 * vnode(): made node v (< fs->nvnodes) in buf: v = p * (1 + per_param) is
 * param p's folder, v + 1 + s its file of stem s, universal file
 * gfs_uview_nfixed() + p * per_param + s.  Inode number nnodes + v + 1.
 */
static const gfs_node *vnode(const gfs_fs *fs, size_t v, gfs_node *buf)
{
	const size_t per = gfs_uview_per_param(fs->uview);
	const size_t p = v / (1 + per), r = v % (1 + per);

	assert(v < fs->nvnodes);
	*buf = (gfs_node){ .ino = (uint32_t)(fs->nnodes + v + 1), .entry = -1, .mtime = fs->mtime };
	if (r == 0) {
		buf->parent = (uint32_t)(fs->uzero + 1);
		buf->name = gfs_uview_param(fs->uview, p);
		buf->type = GFS_NODE_DIR;
		buf->perm = fs->xdir_attr.perm;
		buf->uid = fs->xdir_attr.uid;
		buf->gid = fs->xdir_attr.gid;
	} else {
		buf->parent = (uint32_t)(fs->nnodes + v - r + 1);
		buf->name = gfs_uview_stem(fs->uview, r - 1);
		buf->entry = UNI_ENTRY(gfs_uview_nfixed(fs->uview) + p * per + r - 1);
		buf->type = GFS_NODE_REG;
		buf->perm = fs->xfile_attr.perm;
		buf->uid = fs->xfile_attr.uid;
		buf->gid = fs->xfile_attr.gid;
	}
	return buf;
}

/* is_vnode(): n was made by vnode(). */
static bool is_vnode(const gfs_fs *fs, const gfs_node *n)
{
	return n->ino > fs->nnodes;
}

const gfs_node *gfs_fs_node(const gfs_fs *fs, uint64_t ino, gfs_node *buf)
{
	if (ino >= 1 && ino <= fs->nnodes)
		return &fs->nodes[ino - 1];
	if (ino > fs->nnodes && ino - fs->nnodes - 1 < fs->nvnodes)
		return vnode(fs, (size_t)(ino - fs->nnodes - 1), buf);
	return NULL;
}

uint64_t gfs_fs_ino(const gfs_fs *fs, const gfs_node *n)
{
	assert(n->ino >= 1 && n->ino <= fs->nnodes + fs->nvnodes);
	return n->ino;
}

/* is_uzero(): dir is zero/ of the universal view, the param folders' parent. */
static bool is_uzero(const gfs_fs *fs, const gfs_node *dir)
{
	return fs->nvnodes && dir->ino == fs->uzero + 1;
}

/* dir_of(): the fs_dir of stored directory node dir. */
static const fs_dir *dir_of(const gfs_fs *fs, const gfs_node *dir)
{
	assert(dir->type == GFS_NODE_DIR && !is_vnode(fs, dir));
	if (fs->nadapter && gfs_fs_ino(fs, dir) == adapter_node(fs, 0) + 1)
		return &fs->adapter;
	if (gfs_fs_ino(fs, dir) > fs->xfirst)
		return xdir(fs, gfs_fs_ino(fs, dir) - 1 - fs->xfirst);
	return gfs_fs_ino(fs, dir) == N_TENSORS + 1 ? &fs->tensors : &fs->root;
}

size_t gfs_fs_nnotes(const gfs_fs *fs)
{
	return fs->nnotes;
}

const char *gfs_fs_note(const gfs_fs *fs, size_t i)
{
	assert(i < fs->nnotes);
	return fs->notes[i];
}

const char *gfs_fs_view_absent(const gfs_fs *fs, unsigned view)
{
	return view == GFS_VIEW_OPTIM ? fs->optim_absent
	       : view == GFS_VIEW_UNIVERSAL ? fs->universal_absent : NULL;
}

const gfs_node *gfs_fs_lookup(const gfs_fs *fs, const gfs_node *dir,
			      const char *name, gfs_node *buf)
{
	const fs_dir *d;
	size_t lo = 0, hi;
	int64_t k;

	if (is_vnode(fs, dir)) {
		k = gfs_uview_find_stem(fs->uview, name);
		return k < 0 ? NULL : vnode(fs, dir->ino - fs->nnodes + (size_t)k, buf);
	}
	d = dir_of(fs, dir);
	hi = d->n;

	while (lo < hi) {
		const size_t mid = lo + (hi - lo) / 2;
		const gfs_node *n = &fs->nodes[d->sorted[mid]];
		const int c = strcmp(name, n->name);

		if (c == 0)
			return n;
		if (c < 0)
			hi = mid;
		else
			lo = mid + 1;
	}
	k = is_uzero(fs, dir) ? gfs_uview_find_param(fs->uview, name) : -1;
	return k < 0 ? NULL : vnode(fs, (size_t)k * (1 + gfs_uview_per_param(fs->uview)), buf);
}

size_t gfs_fs_dir_count(const gfs_fs *fs, const gfs_node *dir)
{
	if (is_vnode(fs, dir))
		return gfs_uview_per_param(fs->uview);
	return dir_of(fs, dir)->n + (is_uzero(fs, dir) ? gfs_uview_nparams(fs->uview) : 0);
}

const gfs_node *gfs_fs_dir_entry(const gfs_fs *fs, const gfs_node *dir, size_t i,
				 gfs_node *buf)
{
	const fs_dir *d;

	assert(i < gfs_fs_dir_count(fs, dir));
	if (is_vnode(fs, dir))
		return vnode(fs, dir->ino - fs->nnodes + i, buf);
	d = dir_of(fs, dir);
	if (i < d->n)
		return &fs->nodes[d->kids[i]];
	/* zero/: the param folders after the stored entries */
	return vnode(fs, (i - d->n) * (1 + gfs_uview_per_param(fs->uview)), buf);
}

/* json_unit(): unit u of layout.json: the layout's JSON units, then a newline. */
static gfs_err json_unit(const gfs_fs *fs, size_t u, char **text, size_t *len)
{
	if (u < gfs_layout_json_nunits(fs->ctx.layout))
		return gfs_layout_json_unit(fs->ctx.layout, u, text, len);
	*text = gfs_strdup("\n");
	*len = 1;
	return *text ? GFS_OK : gfs_fail(GFS_ERR_NOMEM, "out of memory");
}

/*
 * json_size(): the size of layout.json, sizing it on the first call (the
 * pieces of each unit counted, not written: O(pieces) arithmetic, O(entries)
 * memory); 0 if that failed (json_read() then says why).
 */
static uint64_t json_size(const gfs_fs *fs)
{
	const gfs_layout *l = fs->ctx.layout;
	fs_json *j = fs->json;
	uint64_t size;

	(void)pthread_mutex_lock(&j->mu);
	if (!j->sized) {
		const size_t n = gfs_layout_json_nunits(l) + 1;
		uint64_t pos = 0;

		j->end = gfs_calloc(n, sizeof(*j->end));
		j->err = j->end ? GFS_OK : GFS_ERR_NOMEM;
		for (size_t u = 0; u < n && !j->err; u++) {
			uint64_t len = 1; /* the last unit: a newline */

			if (u < n - 1)
				j->err = gfs_layout_json_unit_size(l, u, &len);
			pos += len;
			if (!j->err)
				j->end[u] = pos;
		}
		j->nunits = n;
		j->sized = true;
	}
	size = j->err ? 0 : j->end[j->nunits - 1];
	(void)pthread_mutex_unlock(&j->mu);
	return size;
}

/* json_read(): bytes [off, off + len) of layout.json, clipped to its size. */
static gfs_err json_read(const gfs_fs *fs, uint64_t off, uint8_t *buf, size_t len,
			 size_t *got)
{
	const fs_json *j = fs->json;
	const uint64_t size = json_size(fs);
	size_t lo = 0, hi;
	uint64_t pos;

	*got = 0;
	if (j->err)
		return gfs_fail(j->err, JSON_NAME ": out of memory while writing it");
	if (off >= size)
		return GFS_OK;
	if (len > size - off)
		len = (size_t)(size - off);
	hi = j->nunits;
	while (lo < hi) { /* the first unit ending past off */
		const size_t mid = lo + (hi - lo) / 2;

		if (j->end[mid] <= off)
			lo = mid + 1;
		else
			hi = mid;
	}
	pos = lo ? j->end[lo - 1] : 0;
	for (size_t u = lo; *got < len; u++) {
		char *text = NULL;
		size_t tlen = 0;
		const gfs_err err = json_unit(fs, u, &text, &tlen);
		const uint64_t from = off + *got - pos;
		size_t k;

		if (err)
			return gfs_fail_prefix(err, JSON_NAME);
		assert(pos + tlen == j->end[u] && from < tlen);
		k = tlen - (size_t)from < len - *got ? tlen - (size_t)from : len - *got;
		memcpy(buf + *got, text + from, k);
		free(text);
		*got += k;
		pos += tlen;
	}
	return GFS_OK;
}

/* reg_size(): the size of regular file n (a universal file's: composed on first use). */
static gfs_err reg_size(const gfs_fs *fs, const gfs_node *n, uint64_t *size)
{
	*size = 0;
	if (n->vf)
		*size = gfs_vfile_size(n->vf);
	else if (n->entry >= 0)
		*size = gfs_tensor_out_nbytes(fs->ctx.layout, (size_t)n->entry, fs->ctx.want);
	else if (n->entry <= UNI_ENTRY(0))
		return gfs_uview_size(fs->uview, UNI_FILE(n->entry), size);
	else
		*size = json_size(fs);
	return GFS_OK;
}

const gfs_vfile *gfs_fs_vfile(const gfs_fs *fs, const gfs_node *n, gfs_vfile_buf *buf)
{
	const gfs_vfile *vf = NULL;

	assert(n->type == GFS_NODE_REG);
	if (n->entry <= UNI_ENTRY(0))
		return gfs_uview_vfile(fs->uview, UNI_FILE(n->entry), &vf) ? NULL : vf;
	if (n->vf || n->entry < 0)
		return n->vf;
	/* cannot fail: the build made the same vfile */
	(void)gfs_vfile_one(&fs->ctx, (size_t)n->entry,
			    gfs_tensor_out_nbytes(fs->ctx.layout, (size_t)n->entry, fs->ctx.want),
			    buf, &vf);
	assert(vf);
	return vf;
}

gfs_err gfs_fs_stat(const gfs_fs *fs, const gfs_node *n, struct stat *st)
{
	uint64_t size = 0;
	gfs_err err = GFS_OK;

	memset(st, 0, sizeof(*st));
	st->st_ino = gfs_fs_ino(fs, n);
	st->st_uid = n->uid;
	st->st_gid = n->gid;
	st->st_blksize = BLKSIZE;
	st->st_atim = st->st_mtim = st->st_ctim = n->mtime;
	switch (n->type) {
	case GFS_NODE_DIR:
		st->st_mode = S_IFDIR | n->perm;
		st->st_nlink = gfs_fs_ino(fs, n) == GFS_FS_ROOT_INO ? 3 + (fs->nadapter ? 1 : 0) : 2;
		break;
	case GFS_NODE_REG:
		st->st_mode = S_IFREG | n->perm;
		st->st_nlink = 1;
		err = reg_size(fs, n, &size);
		st->st_size = (off_t)size;
		break;
	case GFS_NODE_LNK:
		st->st_mode = S_IFLNK | n->perm;
		st->st_nlink = 1;
		st->st_size = (off_t)strlen(n->link);
		break;
	}
	st->st_blocks = (st->st_size + 511) / 512;
	return err;
}

void gfs_fs_statfs(const gfs_fs *fs, struct statvfs *sv)
{
	uint64_t bytes = 0;

	for (size_t i = 0; i < fs->nnodes + fs->nvnodes; i++) {
		gfs_node buf;
		const gfs_node *n = gfs_fs_node(fs, i + 1, &buf);
		uint64_t size = 0;

		/* a universal file that cannot be composed counts 0 (its stat says why) */
		if (n->type == GFS_NODE_REG && !reg_size(fs, n, &size))
			bytes += size;
	}
	memset(sv, 0, sizeof(*sv));
	sv->f_bsize = BLKSIZE;
	sv->f_frsize = 4096;
	sv->f_blocks = (fsblkcnt_t)((bytes + 4095) / 4096);
	sv->f_files = (fsfilcnt_t)(fs->nnodes + fs->nvnodes);
	sv->f_namemax = 255;
	sv->f_flag = ST_RDONLY;
}

gfs_err gfs_fs_read(const gfs_fs *fs, const gfs_node *n, uint64_t off,
		    void *buf, size_t len, size_t *got)
{
	gfs_vfile_buf vb;
	const gfs_vfile *vf = NULL;
	gfs_err err;

	if (n->entry <= UNI_ENTRY(0))
		err = gfs_uview_vfile(fs->uview, UNI_FILE(n->entry), &vf); /* its error names the file */
	else
		err = (vf = gfs_fs_vfile(fs, n, &vb)) ? GFS_OK : json_read(fs, off, buf, len, got);
	if (err || !vf)
		return err;
	err = gfs_vfile_read(vf, off, buf, len, got);
	if (err && n->entry <= UNI_ENTRY(0)) {
		char path[PATH_BYTES];

		(void)gfs_uview_path(fs->uview, UNI_FILE(n->entry), path, sizeof(path));
		return gfs_fail_prefix(err, "%s", path);
	}
	if (err && gfs_fs_ino(fs, n) > fs->xfirst)
		return gfs_fail_prefix(err, "%s", fs->xnodes[gfs_fs_ino(fs, n) - 1 - fs->xfirst].path);
	if (err)
		return gfs_fail_prefix(err, "%s%s",
				       n->parent == GFS_FS_ROOT_INO ? "" : TENSORS_NAME "/", n->name);
	return GFS_OK;
}

/* reply_attr(): copy value v to buf following the getxattr size protocol. */
static gfs_err reply_attr(const char *v, size_t vlen, char *buf, size_t size,
			  size_t *len)
{
	*len = vlen;
	if (size == 0)
		return GFS_OK;
	if (size < vlen)
		return gfs_fail(GFS_ERR_LIMIT, "attribute value longer than %zu bytes", size);
	memcpy(buf, v, vlen);
	return GFS_OK;
}

/* has_xattrs(): tensor files carry attributes; links, dirs and others not. */
static bool has_xattrs(const gfs_node *n)
{
	return n->entry >= 0 && n->type == GFS_NODE_REG;
}

gfs_err gfs_fs_getxattr(const gfs_fs *fs, const gfs_node *n, const char *name,
			char *buf, size_t size, size_t *len)
{
	const gfs_layout *l = fs->ctx.layout;
	const gfs_tensor *t;
	char shape[SHAPE_BUF];

	/* no security labels, no ACLs: say so, and ls -l stops asking for them
	 * (coreutils remembers a file system that does not support them) */
	if (strncmp(name, XATTR_USER, sizeof(XATTR_USER) - 1) != 0)
		return gfs_fail(GFS_ERR_UNSUPPORTED, "%s: attribute %s: only user.* is supported",
				n->name, name);
	if (!has_xattrs(n))
		return gfs_fail(GFS_ERR_NOTFOUND, "%s: no attribute %s", n->name, name);
	t = gfs_layout_target(l, (size_t)n->entry);
	if (strcmp(name, XATTR_DTYPE) == 0) {
		const char *v = gfs_dtype_name(gfs_dtype_out(t->dtype, fs->ctx.want));

		return reply_attr(v, strlen(v), buf, size, len);
	}
	if (strcmp(name, XATTR_SHAPE) == 0) {
		format_shape(t, shape);
		return reply_attr(shape, strlen(shape), buf, size, len);
	}
	if (strcmp(name, XATTR_NAME) == 0) {
		const char *v = l->tensors[n->entry].name;

		return reply_attr(v, strlen(v), buf, size, len);
	}
	if (strcmp(name, XATTR_SHA256) == 0) {
		char hex[65];
		const gfs_err err = gfs_thash_get(fs->thash, fs, n, hex);

		return err ? err : reply_attr(hex, 64, buf, size, len);
	}
	return gfs_fail(GFS_ERR_NOTFOUND, "%s: no attribute %s", n->name, name);
}

gfs_err gfs_fs_listxattr(const gfs_fs *fs, const gfs_node *n, char *buf,
			 size_t size, size_t *len)
{
	static const char names[] = XATTR_DTYPE "\0" XATTR_SHAPE "\0" XATTR_NAME "\0" XATTR_SHA256;

	(void)fs;
	if (!has_xattrs(n)) {
		*len = 0;
		return GFS_OK;
	}
	return reply_attr(names, sizeof(names), buf, size, len);
}
