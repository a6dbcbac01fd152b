/*
 * gatherfs — the mounted namespace: inode table, directories, attributes,
 * the tensors/ view, the index file and passed-through checkpoint files.
 */
#include "config.h"

#include <assert.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gatherfs/fs.h"
#include "gatherfs/import_plain.h"
#include "gatherfs/shards.h"
#include "gatherfs/view_safetensors.h"
#include "gatherfs/view_torchzip.h"

#define ZIP_STEM "pytorch_model"
#define ZIP_EXT ".bin"
#define ST_STEM "model"
#define ST_EXT ".safetensors"
#define JSON_NAME "layout.json"
#define TENSORS_NAME "tensors"
#define INDEX_NAME "INDEX"
#define ADAPTER_NAME "adapter"
#define ADAPTER_ST "adapter_model.safetensors"
#define ADAPTER_CFG "adapter_config.json"
#define XATTR_DTYPE "user.gatherfs.dtype"
#define XATTR_SHAPE "user.gatherfs.shape"
#define XATTR_NAME "user.gatherfs.name"
#define ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))

enum {
	/* node indices of the fixed entries (ino = index + 1); the root's
	 * virtual files follow, then the passed-through files, then tensors/ */
	N_ROOT, N_TENSORS, N_INDEX, N_FIXED,
	SHAPE_BUF = GFS_MAX_DIMS * 22 + 3,
	BLKSIZE = 1 << 20, /* st_blksize: invites large reads */
};

/* A directory: children in listing order, and sorted by name for lookup. */
typedef struct fs_dir {
	uint32_t *kids;
	struct fs_name {
		const char *name;
		uint32_t node;
	} *sorted;
	size_t n;
} fs_dir;

/* A passed-through file. */
typedef struct fs_pass {
	char *name;
	char *path;
	int fd;
	struct stat st;
} fs_pass;

/* A virtual file at the root: a view of the layout. */
typedef struct fs_virt {
	char *name;
	const gfs_vfile *vf;
	bool zip; /* a torch zip view */
} fs_virt;

struct gfs_fs {
	gfs_vctx ctx;
	gfs_vctx actx;     /* the adapter/ view's tensors */
	gfs_fs_opts opts;
	gfs_node *nodes;
	size_t nnodes;
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
	char **tnames;     /* tensors/ entry names, per layout entry */
	char **tlinks;     /* alias link targets, per layout entry (NULL if none) */
	uid_t uid;
	gid_t gid;
	struct timespec mtime;
};

/* ------------------------------------------------------------ tensor names */

gfs_err gfs_fs_escape_name(const char *name, char **out)
{
	static const char hex[] = "0123456789ABCDEF";
	static const char *const reserved[][2] = {
		{ ".", "%2E" }, { "..", "%2E%2E" }, { INDEX_NAME, "%49NDEX" },
	};
	char *s, *p;

	for (size_t i = 0; i < ARRAY_LEN(reserved); i++) {
		if (strcmp(name, reserved[i][0]) == 0) {
			*out = gfs_strdup(reserved[i][1]);
			return *out ? GFS_OK : gfs_fail(GFS_ERR_NOMEM, "out of memory");
		}
	}
	s = malloc(3 * strlen(name) + 1);
	if (!s)
		return gfs_fail(GFS_ERR_NOMEM, "out of memory");
	p = s;
	for (const unsigned char *c = (const unsigned char *)name; *c; c++) {
		if (*c == '%' || *c == '/' || *c < 0x20 || *c == 0x7f) {
			*p++ = '%';
			*p++ = hex[*c >> 4];
			*p++ = hex[*c & 15];
		} else {
			*p++ = (char)*c;
		}
	}
	*p = '\0';
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

/* index_line(): one line of tensors/INDEX. */
static gfs_err index_line(gfs_fs *fs, gfs_vfile *vf, size_t i)
{
	const gfs_layout *l = fs->ctx.layout;
	const gfs_tensor *t = gfs_layout_target(l, i);
	const gfs_node *n = &fs->nodes[tensor_node(fs, i)];
	char shape[SHAPE_BUF];
	char bytes[24];
	const char *const fields[] = {
		n->name, "\t", gfs_dtype_name(gfs_dtype_out(t->dtype, fs->ctx.want)), "\t",
		shape, "\t", bytes, "\t", n->type == GFS_NODE_LNK ? n->link : "-", "\n",
	};
	gfs_err err = GFS_OK;

	format_shape(t, shape);
	snprintf(bytes, sizeof(bytes), "%llu",
		 (unsigned long long)gfs_tensor_out_nbytes(l, i, fs->ctx.want));
	for (size_t k = 0; k < ARRAY_LEN(fields) && !err; k++)
		err = add_str(vf, fields[k]);
	return err;
}

/* add_virt(): a root file named name (copied) with contents vf; zip: a torch zip view. */
static gfs_err add_virt(gfs_fs *fs, const char *name, const gfs_vfile *vf, bool zip)
{
	fs_virt *v = gfs_reallocarray(fs->virt, fs->nvirt + 1, sizeof(*v));

	if (!v)
		return gfs_fail(GFS_ERR_NOMEM, "out of memory");
	fs->virt = v;
	v[fs->nvirt].name = gfs_strdup(name);
	if (!v[fs->nvirt].name)
		return gfs_fail(GFS_ERR_NOMEM, "out of memory");
	v[fs->nvirt].zip = zip;
	v[fs->nvirt++].vf = vf;
	return GFS_OK;
}

/* add_text(): a root file holding text. */
static gfs_err add_text(gfs_fs *fs, const char *name, const char *text)
{
	gfs_vfile *vf = NULL;
	gfs_err err = own_vfile(fs, &vf);

	if (!err)
		err = add_str(vf, text);
	if (!err)
		err = gfs_vfile_add_mem(vf, "\n", 1);
	if (!err)
		err = add_virt(fs, name, vf, false);
	return err ? gfs_fail_prefix(err, "%s", name) : GFS_OK;
}

/* add_zip(): a torch zip of entries[0..n) (all if NULL) named name. */
static gfs_err add_zip(gfs_fs *fs, const char *name, const size_t *entries, size_t n)
{
	char prefix[256];
	gfs_tzview **z = gfs_reallocarray(fs->zips, fs->nzips + 1, sizeof(*z));
	gfs_err err;

	if (!z)
		return gfs_fail(GFS_ERR_NOMEM, "out of memory");
	fs->zips = z;
	/* torch names the archive after the file, without its extension */
	snprintf(prefix, sizeof(prefix), "%.*s", (int)(strlen(name) - strlen(ZIP_EXT)), name);
	err = gfs_tzview_new(&fs->ctx, prefix, entries, n, &z[fs->nzips]);
	if (err)
		return gfs_fail_prefix(err, "%s", name);
	fs->nzips++;
	return add_virt(fs, name, gfs_tzview_vfile(z[fs->nzips - 1]), true);
}

/* add_st(): a safetensors file of entries[0..n) (all if NULL) named name. */
static gfs_err add_st(gfs_fs *fs, const char *name, const size_t *entries, size_t n)
{
	gfs_vfile *vf = NULL;
	gfs_err err = gfs_stview_new(&fs->ctx, entries, n, &vf);

	if (!err)
		err = own(fs, vf);
	if (!err)
		err = add_virt(fs, name, vf, false);
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
		err = add_text(fs, name, index);
	}
	free(index);
	return err;
}

/* build_views(): the root's virtual files, in listing order. */
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
		err = add_text(fs, fs->opts.replace[i].name, fs->opts.replace[i].text);
	if (!err && (fs->opts.views & GFS_VIEW_LAYOUT)) {
		char *json = NULL;

		err = gfs_layout_to_json(l, &json);
		if (!err)
			err = add_text(fs, JSON_NAME, json);
		free(json);
	}
	return err;
}

/* build_fixed(): the root, tensors/, INDEX and the virtual files' nodes. */
static gfs_err build_fixed(gfs_fs *fs)
{
	const gfs_layout *l = fs->ctx.layout;
	gfs_vfile *index_vf = NULL;
	gfs_err err;

	err = own_vfile(fs, &index_vf);
	if (!err)
		err = add_str(index_vf, "name\tdtype\tshape\tbytes\ttarget\n");
	for (size_t i = 0; i < l->ntensors && !err; i++)
		err = index_line(fs, index_vf, i);
	if (err)
		return gfs_fail_prefix(err, TENSORS_NAME "/" INDEX_NAME);
	fs->nodes[N_ROOT] = (gfs_node){ .name = "", .type = GFS_NODE_DIR, .perm = 0555 };
	fs->nodes[N_TENSORS] = (gfs_node){ .name = TENSORS_NAME, .type = GFS_NODE_DIR,
					   .perm = 0555 };
	fs->nodes[N_INDEX] = (gfs_node){ .name = INDEX_NAME, .type = GFS_NODE_REG,
					 .vf = index_vf, .perm = 0444 };
	for (size_t i = 0; i < fs->nvirt; i++)
		fs->nodes[N_FIXED + i] = (gfs_node){ .name = fs->virt[i].name, .type = GFS_NODE_REG,
						     .vf = fs->virt[i].vf, .zip_view = fs->virt[i].zip,
						     .perm = 0444 };
	for (size_t i = N_ROOT; i < N_FIXED + fs->nvirt; i++) {
		fs->nodes[i].parent = i == N_INDEX ? N_TENSORS + 1 : GFS_FS_ROOT_INO;
		fs->nodes[i].entry = -1;
		fs->nodes[i].mtime = fs->mtime;
	}
	return GFS_OK;
}

/* is_virtual_name(): a root entry name taken by a virtual file. */
static bool is_virtual_name(const gfs_fs *fs, const char *name)
{
	if ((fs->opts.views & GFS_VIEW_TENSORS) && strcmp(name, TENSORS_NAME) == 0)
		return true;
	if (fs->opts.adapter && strcmp(name, ADAPTER_NAME) == 0)
		return true;
	for (size_t i = 0; i < fs->nvirt; i++)
		if (strcmp(name, fs->virt[i].name) == 0)
			return true;
	return false;
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

static int cmp_pass(const void *a, const void *b)
{
	return strcmp(((const fs_pass *)a)->name, ((const fs_pass *)b)->name);
}

/* open_pass(): open name in directory dfd; *skip if it is no regular file. */
static gfs_err open_pass(int dfd, const char *dir, const char *name, fs_pass *p,
			 bool *skip)
{
	struct stat st;

	*skip = false;
	if (fstatat(dfd, name, &st, 0) != 0) {
		if (errno == ENOENT) { /* a dangling symlink */
			*skip = true;
			return GFS_OK;
		}
		return gfs_fail(GFS_ERR_IO, "%s/%s: cannot stat: %s", dir, name, strerror(errno));
	}
	if (!S_ISREG(st.st_mode)) {
		*skip = true;
		return GFS_OK;
	}
	p->fd = openat(dfd, name, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
	if (p->fd < 0)
		return gfs_fail(GFS_ERR_IO, "%s/%s: cannot open: %s", dir, name, strerror(errno));
	p->name = gfs_strdup(name);
	p->path = malloc(strlen(dir) + strlen(name) + 2);
	if (!p->name || !p->path) {
		close(p->fd);
		free(p->name);
		free(p->path);
		return gfs_fail(GFS_ERR_NOMEM, "out of memory");
	}
	sprintf(p->path, "%s/%s", dir, name);
	if (fstat(p->fd, &p->st) != 0 || !S_ISREG(p->st.st_mode)) {
		close(p->fd);
		free(p->name);
		free(p->path);
		*skip = true; /* replaced since the fstatat() */
	}
	return GFS_OK;
}

/* scan_root(): open every regular file of the checkpoint root directory. */
static gfs_err scan_root(gfs_fs *fs, const char *dir)
{
	DIR *d = opendir(dir);
	size_t cap = 0;
	gfs_err err = GFS_OK;

	if (!d)
		return gfs_fail(GFS_ERR_IO, "%s: cannot open directory: %s", dir, strerror(errno));
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
		/* plain model files are sources or shadowed by the views (import_plain.h) */
		if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0 ||
		    is_virtual_name(fs, de->d_name) || is_source(fs, dir, de->d_name) ||
		    gfs_plain_is_model_name(de->d_name))
			continue;
		if (!gfs_grow((void **)&fs->pass, &cap, fs->npass, sizeof(*fs->pass), 16)) {
			err = gfs_fail(GFS_ERR_NOMEM, "out of memory");
			break;
		}
		err = open_pass(dirfd(d), dir, de->d_name, &fs->pass[fs->npass], &skip);
		if (err)
			break;
		if (!skip)
			fs->npass++;
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
			.vf = vf, .entry = -1, .perm = p->st.st_mode & 0555,
			.mtime = p->st.st_mtim,
		};
	}
	return GFS_OK;
}

/* build_tensors(): one node per layout entry under tensors/. */
static gfs_err build_tensors(gfs_fs *fs)
{
	const gfs_layout *l = fs->ctx.layout;
	char **names = fs->tnames, **links = fs->tlinks;

	for (size_t i = 0; i < l->ntensors; i++) {
		const gfs_tensor *t = &l->tensors[i];
		gfs_node *n = &fs->nodes[tensor_node(fs, i)];
		gfs_err err = gfs_fs_escape_name(t->name, &names[i]);

		if (err)
			return err;
		*n = (gfs_node){ .parent = N_TENSORS + 1, .name = names[i],
				 .entry = (int64_t)i, .mtime = fs->mtime };
		if (t->alias_of >= 0) {
			err = gfs_fs_escape_name(l->tensors[t->alias_of].name, &links[i]);
			n->type = GFS_NODE_LNK;
			n->link = links[i];
			n->perm = 0777;
		} else {
			const uint64_t nbytes = gfs_tensor_out_nbytes(l, i, fs->ctx.want);
			gfs_vfile *vf = NULL;

			err = own_vfile(fs, &vf);
			if (!err)
				err = gfs_vfile_add_tensor(vf, i, 0, nbytes);
			n->type = GFS_NODE_REG;
			n->vf = vf;
			n->perm = 0444;
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
	fs->nodes[dir] = (gfs_node){ .parent = GFS_FS_ROOT_INO, .name = ADAPTER_NAME,
				     .type = GFS_NODE_DIR, .entry = -1, .perm = 0555,
				     .mtime = fs->mtime };
	fs->nodes[dir + 1] = (gfs_node){ .parent = dir + 1, .name = ADAPTER_ST, .type = GFS_NODE_REG,
					 .vf = st, .entry = -1, .perm = 0444, .mtime = fs->mtime };
	if (cfg)
		fs->nodes[dir + 2] = (gfs_node){ .parent = dir + 1, .name = ADAPTER_CFG,
						 .type = GFS_NODE_REG, .vf = cfg, .entry = -1,
						 .perm = cfg_st->st_mode & 0555, .mtime = cfg_st->st_mtim };
	return GFS_OK;
}

static int cmp_name(const void *a, const void *b)
{
	return strcmp(((const struct fs_name *)a)->name, ((const struct fs_name *)b)->name);
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
	for (size_t i = 0; i < d->n; i++) {
		d->kids[i] = i < nfixed ? fixed[i] : (uint32_t)(first + i - nfixed);
		d->sorted[i] = (struct fs_name){ fs->nodes[d->kids[i]].name, d->kids[i] };
	}
	qsort(d->sorted, d->n, sizeof(*d->sorted), cmp_name);
	return GFS_OK;
}

void gfs_fs_free(gfs_fs *fs)
{
	if (!fs)
		return;
	for (size_t i = 0; fs->tnames && fs->tlinks && i < fs->ctx.layout->ntensors; i++) {
		free(fs->tnames[i]);
		free(fs->tlinks[i]);
	}
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
	free(fs->tnames);
	free(fs->tlinks);
	free(fs->owned);
	free(fs->pass);
	free(fs->nodes);
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
	fs->uid = st.st_uid;
	fs->gid = st.st_gid;
	fs->mtime = st.st_mtim;
	err = build_views(fs);
	if (!err && l->root_dir)
		err = scan_root(fs, l->root_dir);
	if (!err && fs->opts.adapter) {
		err = open_adapter_cfg(fs, fs->opts.adapter->root_dir, &cfg_st);
		fs->nadapter = fs->adapter_cfg_fd >= 0 ? 3 : 2;
	}
	if (err)
		return err;
	fs->nnodes = N_FIXED + fs->nvirt + fs->npass + l->ntensors + fs->nadapter;
	fs->nodes = gfs_calloc(fs->nnodes, sizeof(*fs->nodes));
	fs->tnames = gfs_calloc(l->ntensors, sizeof(*fs->tnames));
	fs->tlinks = gfs_calloc(l->ntensors, sizeof(*fs->tlinks));
	root_fixed = gfs_calloc(fs->nvirt + 2, sizeof(*root_fixed));
	if (!fs->nodes || !fs->tnames || !fs->tlinks || !root_fixed) {
		free(root_fixed);
		return gfs_fail(GFS_ERR_NOMEM, "out of memory");
	}
	for (size_t i = 0; i < fs->nvirt; i++)
		root_fixed[nroot++] = (uint32_t)(N_FIXED + i);
	if (tensors)
		root_fixed[nroot++] = N_TENSORS;
	if (fs->nadapter)
		root_fixed[nroot++] = (uint32_t)adapter_node(fs, 0);
	/* tensor names first: INDEX lists them */
	err = build_tensors(fs);
	if (!err && fs->nadapter)
		err = build_adapter(fs, &cfg_st);
	if (!err)
		err = build_pass(fs);
	if (!err)
		err = build_fixed(fs);
	if (!err)
		err = build_dir(fs, &fs->root, root_fixed, nroot, N_FIXED + fs->nvirt, fs->npass);
	if (!err)
		err = build_dir(fs, &fs->tensors, tensors_fixed, ARRAY_LEN(tensors_fixed),
				tensor_node(fs, 0), tensors ? l->ntensors : 0);
	if (!err && fs->nadapter)
		err = build_dir(fs, &fs->adapter, NULL, 0, adapter_node(fs, 1), fs->nadapter - 1);
	for (size_t i = 0; i < fs->nnodes; i++)
		fs->nodes[i].ino = i + 1;
	free(root_fixed);
	return err;
}

gfs_err gfs_views_parse(const char *s, unsigned *views)
{
	static const struct {
		const char *name;
		unsigned bit;
	} names[] = {
		{ "bin", GFS_VIEW_BIN }, { "safetensors", GFS_VIEW_SAFETENSORS },
		{ "tensors", GFS_VIEW_TENSORS }, { "layout", GFS_VIEW_LAYOUT },
		{ "all", GFS_VIEW_ALL },
	};
	unsigned v = 0;

	while (*s) {
		const size_t n = strcspn(s, ":+ ");
		size_t k = 0;

		while (k < ARRAY_LEN(names) &&
		       (strlen(names[k].name) != n || strncmp(s, names[k].name, n) != 0))
			k++;
		if (k == ARRAY_LEN(names))
			return gfs_fail(GFS_ERR_INVAL,
					"unknown view '%.*s' (views: bin, safetensors, tensors, layout, all)",
					(int)n, s);
		v |= names[k].bit;
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
	if (err) {
		gfs_fs_free(fs);
		return err;
	}
	*out = fs;
	return GFS_OK;
}

/* ----------------------------------------------------------------- access */

const gfs_node *gfs_fs_node(const gfs_fs *fs, uint64_t ino)
{
	return ino >= 1 && ino <= fs->nnodes ? &fs->nodes[ino - 1] : NULL;
}

/* dir_of(): the fs_dir of directory node dir. */
static const fs_dir *dir_of(const gfs_fs *fs, const gfs_node *dir)
{
	assert(dir->type == GFS_NODE_DIR);
	if (fs->nadapter && dir->ino == adapter_node(fs, 0) + 1)
		return &fs->adapter;
	return dir->ino == N_TENSORS + 1 ? &fs->tensors : &fs->root;
}

const gfs_node *gfs_fs_lookup(const gfs_fs *fs, const gfs_node *dir,
			      const char *name)
{
	const fs_dir *d = dir_of(fs, dir);
	const struct fs_name key = { name, 0 };
	const struct fs_name *hit = bsearch(&key, d->sorted, d->n, sizeof(*d->sorted),
					    cmp_name);

	return hit ? &fs->nodes[hit->node] : NULL;
}

size_t gfs_fs_dir_count(const gfs_fs *fs, const gfs_node *dir)
{
	return dir_of(fs, dir)->n;
}

const gfs_node *gfs_fs_dir_entry(const gfs_fs *fs, const gfs_node *dir, size_t i)
{
	const fs_dir *d = dir_of(fs, dir);

	assert(i < d->n);
	return &fs->nodes[d->kids[i]];
}

void gfs_fs_stat(const gfs_fs *fs, const gfs_node *n, struct stat *st)
{
	memset(st, 0, sizeof(*st));
	st->st_ino = n->ino;
	st->st_uid = fs->uid;
	st->st_gid = fs->gid;
	st->st_blksize = BLKSIZE;
	st->st_atim = st->st_mtim = st->st_ctim = n->mtime;
	switch (n->type) {
	case GFS_NODE_DIR:
		st->st_mode = S_IFDIR | n->perm;
		st->st_nlink = n->ino == GFS_FS_ROOT_INO ? 3 + (fs->nadapter ? 1 : 0) : 2;
		break;
	case GFS_NODE_REG:
		st->st_mode = S_IFREG | n->perm;
		st->st_nlink = 1;
		st->st_size = (off_t)gfs_vfile_size(n->vf);
		break;
	case GFS_NODE_LNK:
		st->st_mode = S_IFLNK | n->perm;
		st->st_nlink = 1;
		st->st_size = (off_t)strlen(n->link);
		break;
	}
	st->st_blocks = (st->st_size + 511) / 512;
}

void gfs_fs_statfs(const gfs_fs *fs, struct statvfs *sv)
{
	uint64_t bytes = 0;

	for (size_t i = 0; i < fs->nnodes; i++)
		if (fs->nodes[i].type == GFS_NODE_REG)
			bytes += gfs_vfile_size(fs->nodes[i].vf);
	memset(sv, 0, sizeof(*sv));
	sv->f_bsize = BLKSIZE;
	sv->f_frsize = 4096;
	sv->f_blocks = (fsblkcnt_t)((bytes + 4095) / 4096);
	sv->f_files = (fsfilcnt_t)fs->nnodes;
	sv->f_namemax = 255;
	sv->f_flag = ST_RDONLY;
}

gfs_err gfs_fs_read(const gfs_fs *fs, const gfs_node *n, uint64_t off,
		    void *buf, size_t len, size_t *got)
{
	gfs_err err;

	(void)fs;
	assert(n->type == GFS_NODE_REG);
	err = gfs_vfile_read(n->vf, off, buf, len, got);
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
	return gfs_fail(GFS_ERR_NOTFOUND, "%s: no attribute %s", n->name, name);
}

gfs_err gfs_fs_listxattr(const gfs_fs *fs, const gfs_node *n, char *buf,
			 size_t size, size_t *len)
{
	static const char names[] = XATTR_DTYPE "\0" XATTR_SHAPE "\0" XATTR_NAME;

	(void)fs;
	if (!has_xattrs(n)) {
		*len = 0;
		return GFS_OK;
	}
	return reply_attr(names, sizeof(names), buf, size, len);
}
