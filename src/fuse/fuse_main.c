/* SPDX-License-Identifier: Apache-2.0 */
/*
 * gatherfs — mount a sharded checkpoint as whole files (FUSE front end).
 *
 *   gatherfs [-o options] CHECKPOINT MOUNTPOINT
 *
 * Everything that can fail because of the checkpoint (import, opening the
 * sources, composing the views) happens before the mount and before
 * daemonizing, so errors reach the terminal and leave no mount behind.
 * Also runs as the fstab type fuse.gatherfs through mount.fuse3.
 */
#include "config.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#ifdef __GLIBC__
#include <malloc.h>
#endif
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <syslog.h>
#include <unistd.h>

#include "fuse_ll.h"
#include "gatherfs/fs/hfconfig.h"
#include "gatherfs/importers/import.h"
#include "gatherfs/importers/import_plain.h"
#include "gatherfs/server/declcheck.h"
#include "gatherfs/server/integrity.h"
#include "gatherfs/importers/fp8.h"
#include "gatherfs/importers/lora.h"
#include "gatherfs/server/crccache.h"
#include "gatherfs/views/shards.h"

/* Options of our own, and fstab words to drop. */
typedef struct gfs_cli {
	char *source;
	char *dtype;
	char *tag;
	char *format;
	char *prefix;
	char *naming;
	char *hf_config;
	char *tp_split;
	char *views;
	char *shard_size;
	unsigned max_read;
	int nosplice;
	int bin_cache;
	int tensors_direct;
	int nocrccache;
	int verify;
	char *verify_mode;
	char *crc_cache;
	char *crc_cache_max;
	char *prefetch;
	unsigned readahead_kb;
	bool max_threads_given;
	char *lora, *merge, *base, *lora_tied;
	char *dequant;
} gfs_cli;

enum { KEY_MAX_THREADS, KEY_MAX_IDLE_THREADS, KEY_MAX_READ, KEY_READAHEAD_KB };

/* Bounds of the numeric options (-o max_idle_threads also takes -1: no bound). */
enum {
	MAX_THREADS = 1024,
	MAX_READ_MIN = 4096,
	MAX_READ_MAX = 1 << 20, /* the kernel's 256 pages: it cuts requests there */
};

#define STR_(x) #x
#define STR(x) STR_(x)
#define DEFAULT_MOUNT_OPTS \
	"ro,default_permissions,subtype=gatherfs,max_read=" STR(GFS_LL_MAX_READ)
#define READAHEAD_UNSET UINT_MAX

static const struct fuse_opt cli_opts[] = {
	{ "dtype=%s", offsetof(gfs_cli, dtype), 0 },
	{ "tag=%s", offsetof(gfs_cli, tag), 0 },
	{ "nosplice", offsetof(gfs_cli, nosplice), 1 },
	{ "bin_cache", offsetof(gfs_cli, bin_cache), 1 },
	{ "tensors_direct", offsetof(gfs_cli, tensors_direct), 1 },
	{ "nocrccache", offsetof(gfs_cli, nocrccache), 1 },
	{ "verify", offsetof(gfs_cli, verify), 1 },
	{ "verify=%s", offsetof(gfs_cli, verify_mode), 0 },
	{ "crc_cache=%s", offsetof(gfs_cli, crc_cache), 0 },
	{ "crc_cache_max=%s", offsetof(gfs_cli, crc_cache_max), 0 },
	{ "prefetch=%s", offsetof(gfs_cli, prefetch), 0 },
	{ "format=%s", offsetof(gfs_cli, format), 0 },
	{ "prefix=%s", offsetof(gfs_cli, prefix), 0 },
	{ "naming=%s", offsetof(gfs_cli, naming), 0 },
	{ "hf_config=%s", offsetof(gfs_cli, hf_config), 0 },
	{ "tp_split=%s", offsetof(gfs_cli, tp_split), 0 },
	{ "views=%s", offsetof(gfs_cli, views), 0 },
	{ "shard_size=%s", offsetof(gfs_cli, shard_size), 0 },
	{ "lora=%s", offsetof(gfs_cli, lora), 0 },
	{ "merge=%s", offsetof(gfs_cli, merge), 0 },
	{ "base=%s", offsetof(gfs_cli, base), 0 },
	{ "lora_tied=%s", offsetof(gfs_cli, lora_tied), 0 },
	{ "dequant=%s", offsetof(gfs_cli, dequant), 0 },
	FUSE_OPT_KEY("max_threads=", KEY_MAX_THREADS),
	FUSE_OPT_KEY("max_idle_threads=", KEY_MAX_IDLE_THREADS),
	FUSE_OPT_KEY("max_read=", KEY_MAX_READ),
	FUSE_OPT_KEY("readahead_kb=", KEY_READAHEAD_KB),
	/* Words mount(8) and fstab pass along: the mount is always read-only. */
	FUSE_OPT_KEY("rw", FUSE_OPT_KEY_DISCARD),
	FUSE_OPT_KEY("ro", FUSE_OPT_KEY_DISCARD),
	FUSE_OPT_KEY("defaults", FUSE_OPT_KEY_DISCARD),
	FUSE_OPT_KEY("auto", FUSE_OPT_KEY_DISCARD),
	FUSE_OPT_KEY("noauto", FUSE_OPT_KEY_DISCARD),
	FUSE_OPT_KEY("user", FUSE_OPT_KEY_DISCARD),
	FUSE_OPT_KEY("nouser", FUSE_OPT_KEY_DISCARD),
	FUSE_OPT_KEY("users", FUSE_OPT_KEY_DISCARD),
	FUSE_OPT_KEY("_netdev", FUSE_OPT_KEY_DISCARD),
	FUSE_OPT_KEY("nofail", FUSE_OPT_KEY_DISCARD),
	FUSE_OPT_END
};

/*
 * opt_uint(): the value of the option arg ("NAME=VALUE") as a decimal
 * integer from lo to hi, in *out if not NULL; else false after one line
 * naming the option and the range (unit: what it counts, may be "").
 */
static bool opt_uint(const char *arg, unsigned lo, unsigned hi, const char *unit, unsigned *out)
{
	const char *v = strchr(arg, '=') + 1;
	char *end;
	unsigned long n;

	errno = 0;
	n = strtoul(v, &end, 10);
	if (*v < '0' || *v > '9' || *end || errno || n < lo || n > hi) {
		fprintf(stderr, "gatherfs: -o %s: expected an integer from %u to %u%s\n", arg, lo, hi,
			unit);
		return false;
	}
	if (out)
		*out = (unsigned)n;
	return true;
}

/*
 * mountpoint_missing(): MOUNTPOINT mp does not exist: one line saying so
 * (before fuse_parse_cmdline(), whose "bad mount point" says less).
 */
static bool mountpoint_missing(const char *mp)
{
	struct stat st;

	if (stat(mp, &st) == 0 || errno != ENOENT)
		return false;
	fprintf(stderr, "gatherfs: %s: no such directory (create it first)\n", mp);
	return true;
}

static int cli_proc(void *data, const char *arg, int key, struct fuse_args *outargs)
{
	gfs_cli *cli = data;

	(void)outargs;
	switch (key) {
	case FUSE_OPT_KEY_NONOPT:
		if (cli->source) /* the mountpoint: for fuse_parse_cmdline(), if it exists */
			return mountpoint_missing(arg) ? -1 : 1;
		cli->source = strdup(arg);
		return cli->source ? 0 : -1;
	case FUSE_OPT_KEY_OPT:
		return strncmp(arg, "x-", 2) == 0 ? 0 : 1; /* x-*: fstab comments */
	case KEY_MAX_THREADS: /* checked here, parsed again by libfuse */
		cli->max_threads_given = true;
		return opt_uint(arg, 1, MAX_THREADS, " (worker threads)", NULL) ? 1 : -1;
	case KEY_MAX_IDLE_THREADS:
		return strcmp(arg, "max_idle_threads=-1") == 0 ||
		       opt_uint(arg, 0, MAX_THREADS, " (idle worker threads), or -1 (no bound)", NULL)
		       ? 1 : -1;
	case KEY_MAX_READ:
		/* init() must repeat the mount's value; libfuse checks they agree */
		return opt_uint(arg, MAX_READ_MIN, MAX_READ_MAX, " (bytes)", &cli->max_read) ? 1 : -1;
	case KEY_READAHEAD_KB:
		return opt_uint(arg, 0, GFS_LL_READAHEAD_KB_MAX,
				" (KiB; the mount offers the kernel 64 MiB at most)", &cli->readahead_kb)
		       ? 0 : -1;
	default:
		return 1;
	}
}

static void usage(const char *prog)
{
	printf("usage: %s [options] CHECKPOINT MOUNTPOINT\n\n"
	       "Mounts a checkpoint read-only as whole model files: pytorch_model.bin,\n"
	       "model.safetensors, tensors/, layout.json and the checkpoint's own files.\n"
	       "Formats (detected; -o format= forces one):\n", prog);
	fputs(gfs_import_formats, stdout);
	fputs("See gatherfs(1).\n\n"
	      "gatherfs options:\n"
	      "    -o dtype=bf16|fp16|fp32  present floating-point tensors in this dtype\n"
	      "                             (default: as stored)\n"
	      "    -o tag=TAG               DeepSpeed tag to mount (default: from `latest`);\n"
	      "                             zero3: the tag the save must carry;\n"
	      "                             HF cache repository: its snapshot (refs/main);\n"
	      "                             Megatron-LM save: iter_NNNNNNN or release;\n"
	      "                             verl save: its role directory (actor, critic)\n"
	      "    -o format=FMT            input format: dcp, deepspeed, plain, layout,\n"
	      "                             zero3, megatron, rankdict or auto (default: auto;\n"
	      "                             `.metadata` means dcp, zero3-rank-R.json zero3,\n"
	      "                             model_world_size_W_rank_R.pt rankdict,\n"
	      "                             latest_checkpointed_iteration.txt or mp_rank_00*\n"
	      "                             megatron, DeepSpeed files\n"
	      "                             deepspeed, model.safetensors or pytorch_model.bin\n"
	      "                             (or their index) plain)\n"
	      "    -o prefix=P              DCP, plain: keep the keys starting with P,\n"
	      "                             without P\n"
	      "                             (e.g. prefix=model. for accelerate checkpoints)\n"
	      "    -o naming=N              Megatron: hf (Hugging Face names: Llama, Qwen2,\n"
	      "                             Mixtral, Qwen3, Qwen3-MoE, Qwen2-MoE,\n"
	      "                             DeepSeek-V3), megatron (Megatron's own),\n"
	      "                             megatron-local or megatron-te (Megatron's, the\n"
	      "                             norms in one spelling) or auto (default: hf\n"
	      "                             when the architecture is known)\n"
	      "    -o hf_config=DIR         Megatron: the model's config.json in DIR gives\n"
	      "                             the architecture and vocabulary; served as is\n"
	      "    -o tp_split=FILE         DeepSpeed tensor parallelism: the JSON FILE maps\n"
	      "                             param-name patterns to the dimension (0, 1) the\n"
	      "                             ranks' slices join on, or \"replicated\" (instead\n"
	      "                             of universal_checkpoint_info)\n"
	      "    -o views=V1+V2...        views to show, from bin, safetensors, tensors,\n"
	      "                             layout, optim (optimizer state), universal\n"
	      "                             (DeepSpeed universal checkpoint) (default: all;\n"
	      "                             refused if the checkpoint has none of them)\n"
	      "    -o shard_size=SIZE       show Hugging Face shards of at most SIZE (e.g. 5G,\n"
	      "                             500MB, 2GiB) with their index files instead of\n"
	      "                             single pytorch_model.bin / model.safetensors\n"
	      "    -o lora=DIR              merge the PEFT LoRA adapter in DIR (adapter_config.json\n"
	      "                             + adapter_model.safetensors or .bin) onto the model\n"
	      "    -o merge=lora            merge the adapter of a PEFT-wrapped checkpoint (its\n"
	      "                             adapter_config.json next to it) into the model\n"
	      "    -o base=DIR              with merge=lora: the base model, for a checkpoint\n"
	      "                             that holds only the adapter\n"
	      "    -o lora_tied=peft        a targeted tied embedding changes its tied head too,\n"
	      "                             as PEFT's merge does (default: untied, the head\n"
	      "                             keeps the unmerged embedding)\n"
	      "    -o dequant=bf16|fp16|fp32 an FP8 checkpoint (quantization_config: fp8\n"
	      "                             blocks, compressed-tensors float-quantized) as the\n"
	      "                             model it quantizes: each weight float32(q) times\n"
	      "                             its block's scale, rounded once; scales left out\n"
	      "    -o max_threads=N         worker threads, 1 to 1024 (default: 2 per CPU,\n"
	      "                             10 to 64)\n"
	      "    -o nosplice              copy read data through the daemon instead of\n"
	      "                             splicing it from the sources\n"
	      "    -o bin_cache             read pytorch_model.bin through the page cache\n"
	      "                             (default: direct I/O; needed to map it shared)\n"
	      "    -o tensors_direct        read tensors/ and optim/ files with direct I/O\n"
	      "                             (default: the page cache; with it they cannot\n"
	      "                             be mapped shared)\n"
	      "    -o readahead_kb=N        kernel read-ahead window of the mount, at most\n"
	      "                             65536 (root only; default 512, 4096 for network\n"
	      "                             sources; 0: leave as is)\n"
	      "    -o prefetch=SIZE         memory for reading ahead of sequential readers of\n"
	      "                             pytorch_model.bin on slow storage (default 64M,\n"
	      "                             at most 1G; 0: no read-ahead)\n"
	      "    -o crc_cache=DIR         keep pytorch_model.bin CRC-32s in DIR (default:\n"
	      "                             $XDG_CACHE_HOME/gatherfs or ~/.cache/gatherfs)\n"
	      "    -o crc_cache_max=SIZE    bound of the CRC cache (e.g. 64Mi, 500K; default\n"
	      "                             64Mi): least recently used entries go first\n"
	      "    -o nocrccache            no persistent CRC cache (not with crc_cache=)\n"
	      "    -o verify=read           (default) check each source record against its\n"
	      "                             stored CRC-32 before serving its first byte\n"
	      "    -o verify[=mount]        check every source record before mounting;\n"
	      "                             refuse a corrupt checkpoint\n"
	      "    -o verify=off            serve source bytes unchecked (unsafe)\n\n"
	      "Each file is owned by the common owner of the files it shows and readable\n"
	      "only by those who could read all of them (see SECURITY in gatherfs(1)).\n\n",
	      stdout);
}

/*
 * prefetch_budget(): the read-ahead memory of -o prefetch=SIZE (NULL: the
 * default) in *out, 0 for none; false after a line on stderr if SIZE is
 * not 0 nor between one chunk (1 MiB) and 1 GiB.
 */
static bool prefetch_budget(const char *size, uint64_t *out)
{
	*out = size ? 0 : GFS_PF_DEFAULT;
	if (!size || strcmp(size, "0") == 0)
		return true;
	if (gfs_parse_size(size, out) != GFS_OK) {
		fprintf(stderr, "gatherfs: -o prefetch=%s: %s\n", size, gfs_errmsg());
		return false;
	}
	if (*out != 0 && (*out < GFS_PF_CHUNK || *out > GFS_PF_MAX)) {
		fprintf(stderr, "gatherfs: -o prefetch=%s: expected 0 (no read-ahead) or 1M to 1G\n",
			size);
		return false;
	}
	return true;
}

/*
 * crc_cache_opts(): the bound of the CRC cache (-o crc_cache_max=SIZE, else
 * the default) in c->max; false after one line if SIZE is bad or out of
 * range, or if -o nocrccache comes with -o crc_cache= or crc_cache_max=.
 */
static bool crc_cache_opts(const gfs_cli *cli, gfs_crccache *c)
{
	if (cli->nocrccache && (cli->crc_cache || cli->crc_cache_max)) {
		fprintf(stderr, "gatherfs: -o nocrccache contradicts -o %s: keep no CRC cache, or keep one\n",
			cli->crc_cache ? "crc_cache=" : "crc_cache_max=");
		return false;
	}
	c->max = GFS_CRCCACHE_DEFAULT_MAX;
	if (!cli->crc_cache_max)
		return true;
	if (gfs_parse_size(cli->crc_cache_max, &c->max) != GFS_OK) {
		fprintf(stderr, "gatherfs: -o crc_cache_max=%s: %s\n", cli->crc_cache_max, gfs_errmsg());
		return false;
	}
	if (c->max < GFS_CRCCACHE_MIN || c->max > GFS_CRCCACHE_MAX) {
		fprintf(stderr, "gatherfs: -o crc_cache_max=%s: expected 1KiB to 1TiB\n",
			cli->crc_cache_max);
		return false;
	}
	return true;
}

/*
 * views_apply(): with -o views=arg (the bits views) naming views, whether
 * any of them shows files for this checkpoint; those that show none are
 * named, with why, in one line on stderr: a warning if others show files,
 * else the refusal.  Default (all): true, silently.
 */
static bool views_apply(const gfs_fs *fs, const char *arg, unsigned views)
{
	char why[1024] = "";
	size_t n = 0;
	unsigned absent = 0;

	if (!arg || views == GFS_VIEW_ALL)
		return true;
	for (unsigned bit = 1; bit < GFS_VIEW_ALL; bit <<= 1) {
		const char *const w = (views & bit) ? gfs_fs_view_absent(fs, bit) : NULL;

		if (!w)
			continue;
		absent |= bit;
		if (n < sizeof(why))
			n += (size_t)snprintf(why + n, sizeof(why) - n, "%s%s: %s", n ? "; " : "",
					      gfs_view_name(bit), w);
	}
	if (absent == views)
		fprintf(stderr, "gatherfs: -o views=%s: no such view for this checkpoint (%s): not mounting\n",
			arg, why);
	else if (absent)
		fprintf(stderr, "gatherfs: -o views=%s: warning: not shown (%s)\n", arg, why);
	return absent != views;
}

/*
 * notice(): a line for the user (gfs_notice_fn: a checkpoint file left out
 * of the mount, a large first check), to stderr or syslog.
 */
static void notice(const char *line)
{
	fuse_log(FUSE_LOG_NOTICE, "gatherfs: %s\n", line);
}

/* When source records are checked (-o verify=MODE). */
typedef enum verify_mode { VERIFY_READ, VERIFY_MOUNT, VERIFY_OFF } verify_mode;

/*
 * parse_verify(): the mode of -o verify (bare: mount) and -o verify=MODE
 * (mode NULL: not given) in *out; false after a line on stderr.
 */
static bool parse_verify(int bare, const char *mode, verify_mode *out)
{
	*out = bare ? VERIFY_MOUNT : VERIFY_READ;
	if (!mode)
		return true;
	if (strcmp(mode, "read") == 0)
		*out = VERIFY_READ;
	else if (strcmp(mode, "mount") == 0)
		*out = VERIFY_MOUNT;
	else if (strcmp(mode, "off") == 0)
		*out = VERIFY_OFF;
	else {
		fprintf(stderr, "gatherfs: -o verify=%s: expected read, mount or off\n", mode);
		return false;
	}
	if (bare && *out != VERIFY_MOUNT) {
		fprintf(stderr, "gatherfs: -o verify and -o verify=%s contradict each other\n", mode);
		return false;
	}
	return true;
}

/*
 * note_unsummed(): one line on stderr naming the sources whose tensor
 * bytes no stored checksum covers (with -o verify=mount: not checked).
 */
static void note_unsummed(const gfs_layout *l)
{
	gfs_unsummed u;
	const gfs_source *src;
	size_t nfiles = 0;

	if (!gfs_unsummed_init(&u, l))
		return;
	if (u.bytes) {
		fprintf(stderr, "gatherfs: -o verify=mount: %llu bytes of %zu tensors have no stored checksum and could not be checked:",
			(unsigned long long)u.bytes, u.ntensors);
		while ((src = gfs_unsummed_next(&u)) != NULL)
			if (nfiles++ < 8)
				fprintf(stderr, " %s", src->abspath);
		if (nfiles > 8)
			fprintf(stderr, " (and %zu more files)", nfiles - 8);
		fputc('\n', stderr);
	}
	gfs_unsummed_free(&u);
}

/*
 * verify_sources(): -o verify=MODE on the open sources: mount: every
 * source record against its stored CRC-32, and the layout's declarations
 * against the data (declcheck.h), now; read: on first use; off: never (a
 * warning).
 */
static gfs_err verify_sources(const gfs_layout *l, gfs_srcset *s, verify_mode mode)
{
	gfs_err err;

	gfs_srcset_set_verify(s, mode != VERIFY_OFF, notice);
	if (mode == VERIFY_OFF) {
		fputs("gatherfs: -o verify=off: source bytes are served without checking their stored CRC-32 (unsafe: corruption is served as data)\n",
		      stderr);
		return GFS_OK;
	}
	if (mode != VERIFY_MOUNT)
		return GFS_OK;
	err = gfs_integrity_require(l, s, NULL, 0, 0);
	if (!err && l->decls.what)
		err = gfs_srcset_decls_require(s);
	if (err)
		return gfs_fail_prefix(err, "-o verify: not mounting");
	note_unsummed(l);
	return GFS_OK;
}

/*
 * cmdline_help(): libfuse's fuse_cmdline_help() without its -o max_threads
 * line, whose default is not ours (see usage()).
 */
static void cmdline_help(void)
{
	printf("    -h   --help            print help\n"
	       "    -V   --version         print version\n"
	       "    -d   -o debug          enable debug output (implies -f)\n"
	       "    -f                     foreground operation\n"
	       "    -s                     disable multi-threaded operation\n"
	       "    -o clone_fd            use separate fuse device fd for each thread\n"
	       "                           (may improve performance)\n"
	       "    -o max_idle_threads    the maximum number of idle worker threads\n"
	       "                           allowed (default: -1)\n");
}

/*
 * mountpoint_ok(): MOUNTPOINT must be an empty directory on which nothing
 * is mounted (autofs excepted: systemd's automount mounts us on its own
 * mount point); else one line saying why.  /dev/fd/N (a mount made by
 * mount.fuse3 -o drop_privileges) passes.
 */
static bool mountpoint_ok(const char *mp)
{
	struct stat st;
	char type[64];
	DIR *d;
	const struct dirent *de;
	bool empty = true;

	if (strncmp(mp, "/dev/fd/", 8) == 0)
		return true;
	if (mountpoint_missing(mp))
		return false;
	if (stat(mp, &st) != 0) {
		fprintf(stderr, "gatherfs: %s: %s\n", mp, strerror(errno));
		return false;
	}
	if (!S_ISDIR(st.st_mode)) {
		fprintf(stderr, "gatherfs: %s: not a directory: the mount point must be an empty directory\n",
			mp);
		return false;
	}
	if (gfs_ll_mount_type(mp, type, sizeof(type))) {
		if (strcmp(type, "autofs") == 0)
			return true;
		fprintf(stderr, "gatherfs: %s: already a mount point (%s): unmount it or choose another directory\n",
			mp, type);
		return false;
	}
	d = opendir(mp);
	if (!d) {
		fprintf(stderr, "gatherfs: %s: cannot list: %s\n", mp, strerror(errno));
		return false;
	}
	while (empty && (de = readdir(d)))
		empty = strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0;
	closedir(d);
	if (!empty)
		fprintf(stderr, "gatherfs: %s: not empty: the mount would hide its files; choose an empty directory\n",
			mp);
	return empty;
}

/*
 * crc_cache_dir(): make the directory given with -o crc_cache= (and its
 * parents, mode 0700) if missing, check that it is a writable directory,
 * and return its absolute path in *abs (the daemon leaves the working
 * directory); else one line saying why.
 */
static bool crc_cache_dir(const char *dir, char **abs)
{
	char *p = strdup(dir);
	struct stat st;

	if (!p) {
		fprintf(stderr, "gatherfs: out of memory\n");
		return false;
	}
	for (char *s = strchr(p + 1, '/'); s; s = strchr(s + 1, '/')) {
		*s = '\0';
		(void)mkdir(p, 0700);
		*s = '/';
	}
	free(p);
	if (mkdir(dir, 0700) != 0 && errno != EEXIST) {
		fprintf(stderr, "gatherfs: -o crc_cache=%s: cannot create: %s\n", dir, strerror(errno));
		return false;
	}
	if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode)) {
		fprintf(stderr, "gatherfs: -o crc_cache=%s: not a directory\n", dir);
		return false;
	}
	if (access(dir, W_OK | X_OK) != 0) {
		fprintf(stderr, "gatherfs: -o crc_cache=%s: not writable: %s\n", dir, strerror(errno));
		return false;
	}
	*abs = realpath(dir, NULL);
	if (!*abs)
		fprintf(stderr, "gatherfs: -o crc_cache=%s: %s\n", dir, strerror(errno));
	return *abs != NULL;
}

/* dequant_apply(): replace *layout by its FP8-dequantized model in dtype out. */
static gfs_err dequant_apply(gfs_layout **layout, gfs_dtype out)
{
	gfs_layout *d;
	const gfs_err err = gfs_fp8_dequant(*layout, out, &d);

	if (err)
		return err;
	gfs_layout_free(*layout);
	*layout = d;
	return GFS_OK;
}

/* dequant_config(): *text (or the root config.json) made the dequantized model's. */
static gfs_err dequant_config(const gfs_layout *l, gfs_dtype out, char **text)
{
	char *t;
	const gfs_err err = gfs_fp8_config(l, *text, out, &t);

	if (err)
		return err;
	free(*text);
	*text = t;
	return GFS_OK;
}

/* want_dtype(): parse -o dtype= (or -o dequant=); GFS_DT_INVALID (with *ok) if not given. */
static gfs_dtype want_dtype(const char *s, bool *ok)
{
	const gfs_dtype dt = s ? gfs_dtype_parse(s) : GFS_DT_INVALID;

	*ok = !s || dt == GFS_DT_BF16 || dt == GFS_DT_F16 || dt == GFS_DT_F32;
	return dt;
}

/* default_threads(): two workers per CPU, within [10, 64]. */
static unsigned default_threads(void)
{
	const long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
	const long n = ncpu > 0 ? 2 * ncpu : 10;

	return n < 10 ? 10 : n > 64 ? 64 : (unsigned)n;
}

/*
 * add_mount_opts(): our defaults, placed first so that the user's -o fsname=
 * etc. override them (ro cannot be overridden: rw is dropped).  The fsname
 * is the checkpoint's absolute path (if it does not resolve, the import
 * reports why).
 */
static int add_mount_opts(struct fuse_args *args, const char *source)
{
	char *real = realpath(source, NULL);
	const char *name = real ? real : source;
	char *opts = NULL;
	char *fsname = malloc(strlen(name) + sizeof("fsname="));
	int res = -1;

	if (fsname) {
		sprintf(fsname, "fsname=%s", name);
		if (fuse_opt_add_opt(&opts, DEFAULT_MOUNT_OPTS) == 0 &&
		    fuse_opt_add_opt_escaped(&opts, fsname) == 0 &&
		    fuse_opt_insert_arg(args, 1, "-o") == 0 &&
		    fuse_opt_insert_arg(args, 2, opts) == 0)
			res = 0;
	}
	free(fsname);
	free(opts);
	free(real);
	return res;
}

/* keep_stdio(): make fds 0-2 exist, so fuse_daemonize() clobbers no source fd. */
static void keep_stdio(void)
{
	int fd;

	do {
		fd = open("/dev/null", O_RDWR);
	} while (fd >= 0 && fd <= 2);
	if (fd > 2)
		close(fd);
}

/*
 * Descriptors the daemon opens after the checkpoint's: /dev/fuse, the
 * daemonize pipe, the syslog socket, and slack.
 */
enum { GFS_FD_RESERVE = 8 };

/* raise_nofile(): lift the soft RLIMIT_NOFILE to the hard limit. */
static void raise_nofile(void)
{
	struct rlimit rl;

	if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != rl.rlim_max) {
		rl.rlim_cur = rl.rlim_max;
		(void)setrlimit(RLIMIT_NOFILE, &rl);
	}
}

/* open_fds(): descriptors open now (from /proc/self/fd), or -1 if unknown. */
static long open_fds(void)
{
	DIR *d = opendir("/proc/self/fd");
	const struct dirent *de;
	long n = -1; /* the directory's own descriptor */

	if (!d)
		return -1;
	while ((de = readdir(d)))
		if (de->d_name[0] != '.')
			n++;
	closedir(d);
	return n;
}

/*
 * nofile_ok(): true if RLIMIT_NOFILE leaves room for the descriptors the
 * daemon still needs (reserve) next to the ones open now (the checkpoint's
 * files, kept open for the life of the mount); else print one line saying
 * so.  Checked before mounting: running out later would fail the mount
 * half-way, or every open of a file of the mount.
 */
static bool nofile_ok(unsigned reserve)
{
	struct rlimit rl;
	const long used = open_fds();

	if (used < 0 || getrlimit(RLIMIT_NOFILE, &rl) != 0 || rl.rlim_cur == RLIM_INFINITY ||
	    (rlim_t)used + reserve <= rl.rlim_cur)
		return true;
	fprintf(stderr,
		"gatherfs: the open file limit is %llu, the checkpoint's files and the mount need %llu: raise it (ulimit -n)\n",
		(unsigned long long)rl.rlim_cur, (unsigned long long)used + reserve);
	return false;
}

/* note_hidden(): say which plain model files of the checkpoint dir the mount hides. */
static void note_hidden(const gfs_layout *l)
{
	char *note = NULL;

	if (gfs_plain_hidden_note(l, &note) == GFS_OK && note)
		fprintf(stderr, "gatherfs: %s\n", note);
	free(note);
}

/* note_saved_adapter(): say when a PEFT checkpoint's saved adapter file is empty. */
static void note_saved_adapter(const gfs_layout *l)
{
	char *note = NULL;

	if (gfs_lora_saved_note(l, &note) == GFS_OK && note)
		fprintf(stderr, "gatherfs: %s\n", note);
	free(note);
}

__attribute__((format(printf, 2, 0)))
static void log_syslog(enum fuse_log_level level, const char *fmt, va_list ap)
{
	vsyslog((int)level, fmt, ap);
}

/*
 * adapter_view(): for a PEFT-wrapped checkpoint, the layout of its adapter
 * (the adapter/ view) with its sources open; nothing for other sources.
 */
static gfs_err adapter_view(const gfs_layout *l, gfs_layout **out, gfs_srcset **src)
{
	gfs_err err = gfs_lora_adapter(l, out);

	if (err == GFS_ERR_NOTFOUND)
		return GFS_OK;
	if (!err)
		err = gfs_srcset_open(*out, src);
	return err;
}

int main(int argc, char *argv[])
{
	struct fuse_args args = FUSE_ARGS_INIT(argc, argv);
	struct fuse_cmdline_opts opts = { 0 };
	gfs_cli cli = { .max_read = GFS_LL_MAX_READ, .readahead_kb = READAHEAD_UNSET };
	char *crc_abs = NULL;
	gfs_mount m = { 0 };
	gfs_import_opts iopts = { 0 };
	gfs_layout *layout = NULL;
	gfs_srcset *src = NULL;
	unsigned ra_kb;
	gfs_fs *fs = NULL;
	struct fuse_session *se;
	struct fuse_loop_config *cfg;
	gfs_fs_opts fso = { .views = GFS_VIEW_ALL };
	gfs_lora_cli lora_cli;
	gfs_layout *adapter = NULL;
	gfs_srcset *adapter_src = NULL;
	gfs_fs_file untied_cfg = { .name = "config.json" };
	char *cfg_text = NULL;
	size_t cfg_len = 0;
	gfs_err err;
	bool dtype_ok, dequant_ok, untied = false, cfg_rewritten = false;
	gfs_dtype dequant;
	uint64_t prefetch;
	verify_mode vmode;
	gfs_crccache crc = { 0 };
	int ret = 1;

	keep_stdio();
	if (fuse_opt_parse(&args, &cli, cli_opts, cli_proc) != 0)
		goto out_args;
	if (cli.source && add_mount_opts(&args, cli.source) != 0) {
		fprintf(stderr, "gatherfs: out of memory\n");
		goto out_args;
	}
	if (fuse_parse_cmdline(&args, &opts) != 0)
		goto out_args;
	if (opts.show_help) {
		usage(argv[0]);
		printf("FUSE options:\n");
		cmdline_help();
		fuse_lowlevel_help();
		ret = 0;
		goto out_args;
	}
	if (opts.show_version) {
		printf("gatherfs %s\n", PACKAGE_VERSION);
		printf("FUSE library version %s\n", fuse_pkgversion());
		/* fuse_lowlevel_version() runs fusermount3, which writes to our
		 * stdout: our lines first. */
		fflush(stdout);
		fuse_lowlevel_version();
		ret = 0;
		goto out_args;
	}
	if (!cli.source || !opts.mountpoint) {
		fprintf(stderr, "usage: %s [options] CHECKPOINT MOUNTPOINT (see --help)\n",
			argv[0]);
		goto out_args;
	}
	if (gfs_zstd_cache_check() != GFS_OK) {
		fprintf(stderr, "gatherfs: %s\n", gfs_errmsg());
		goto out_args;
	}
	if (!prefetch_budget(cli.prefetch, &prefetch) || !crc_cache_opts(&cli, &crc) ||
	    !parse_verify(cli.verify, cli.verify_mode, &vmode))
		goto out_args;
	if (!mountpoint_ok(opts.mountpoint))
		goto out_args;
	fso.want = want_dtype(cli.dtype, &dtype_ok);
	dequant = want_dtype(cli.dequant, &dequant_ok);
	if (cli.crc_cache) {
		if (!crc_cache_dir(cli.crc_cache, &crc_abs))
			goto out_args;
		free(cli.crc_cache);
		cli.crc_cache = crc_abs;
	}
	if (!cli.nocrccache && !cli.crc_cache)
		cli.crc_cache = gfs_ll_crc_cache_dir();
	crc.dir = cli.crc_cache;
	fso.crc_cache = cli.nocrccache || !crc.dir ? NULL : &crc;
	fso.notice = notice;
	if (!dtype_ok || !dequant_ok) {
		fprintf(stderr, "gatherfs: -o %s=%s: expected bf16, fp16 or fp32\n",
			dtype_ok ? "dequant" : "dtype", dtype_ok ? cli.dequant : cli.dtype);
		goto out_args;
	}
	if ((cli.views && gfs_views_parse(cli.views, &fso.views) != GFS_OK) ||
	    (cli.shard_size && gfs_parse_size(cli.shard_size, &fso.shard_size) != GFS_OK)) {
		fprintf(stderr, "gatherfs: %s\n", gfs_errmsg());
		goto out_args;
	}
	if (!cli.max_threads_given)
		opts.max_threads = default_threads();

	iopts.tag = cli.tag;
	iopts.format = cli.format;
	iopts.prefix = cli.prefix;
	iopts.naming = cli.naming;
	iopts.hf_config = cli.hf_config;
	iopts.tp_split = cli.tp_split;
	raise_nofile();
	lora_cli = (gfs_lora_cli){ .lora = cli.lora, .merge = cli.merge, .base = cli.base,
				   .tied = cli.lora_tied };
	err = gfs_import(cli.source, &iopts, &layout);
	if (!err)
		note_saved_adapter(layout);
	if (!err)
		err = adapter_view(layout, &adapter, &adapter_src);
	if (!err && dequant != GFS_DT_INVALID)
		err = dequant_apply(&layout, dequant);
	if (!err)
		err = gfs_lora_apply(&lora_cli, &layout, &untied);
	/* config.json made to agree with the tensors served (untied head, dtype) */
	if (!err && (untied || fso.want != GFS_DT_INVALID))
		err = gfs_config_served(layout, "config.json", fso.want, untied, &cfg_text,
					&cfg_len, &cfg_rewritten);
	if (!err && !cfg_rewritten) {
		free(cfg_text);
		cfg_text = NULL;
	}
	if (!err && dequant != GFS_DT_INVALID)
		err = dequant_config(layout, dequant, &cfg_text);
	if (!err)
		err = gfs_fp8_check_dtype(layout, fso.want);
	if (!err)
		err = gfs_srcset_open(layout, &src);
	if (!err)
		err = verify_sources(layout, src, vmode);
	if (!err && adapter_src)
		gfs_srcset_set_verify(adapter_src, vmode != VERIFY_OFF, notice);
	if (!err) {
		fso.adapter = adapter;
		fso.adapter_src = adapter_src;
		untied_cfg.text = cfg_text;
		fso.replace = &untied_cfg;
		fso.nreplace = cfg_text ? 1 : 0;
		err = gfs_fs_new(layout, src, &fso, &fs);
	}
	if (err) {
		const bool emfile = strstr(gfs_errmsg(), strerror(EMFILE)) &&
				    !strstr(gfs_errmsg(), "ulimit");

		fprintf(stderr, "gatherfs: %s%s\n", gfs_errmsg(),
			emfile ? " (raise the open file limit: ulimit -n)" : "");
		goto out_fs;
	}
#ifdef __GLIBC__
	/* the import's pickles and zip directories are freed: give their pages back */
	(void)malloc_trim(0);
#endif
	if (!views_apply(fs, cli.views, fso.views))
		goto out_fs;
	if (layout->note)
		fprintf(stderr, "gatherfs: note: %s\n", layout->note);
	if (!nofile_ok(GFS_FD_RESERVE + (opts.clone_fd ? opts.max_threads : 0)))
		goto out_fs;
	note_hidden(layout);
	m.fs = fs;
	m.src = src;
	m.max_read = cli.max_read;
	m.nosplice = cli.nosplice != 0;
	m.bin_cache = cli.bin_cache != 0;
	m.tensors_direct = cli.tensors_direct != 0;
	m.conn_opts = fuse_parse_conn_info_opts(&args);
	if (!m.conn_opts)
		goto out_fs;
	if (prefetch && gfs_prefetch_new(prefetch, &m.prefetch) != GFS_OK) {
		fprintf(stderr, "gatherfs: %s\n", gfs_errmsg());
		goto out_fs;
	}

	se = fuse_session_new(&args, &gfs_ll_ops, sizeof(gfs_ll_ops), &m);
	if (!se)
		goto out_fs;
	if (fuse_set_signal_handlers(se) != 0)
		goto out_session;
	if (fuse_session_mount(se, opts.mountpoint) != 0)
		goto out_signals;
	if (gfs_ll_custom_io(se, &m) != 0)
		goto out_unmount;
	ra_kb = cli.readahead_kb;
	if (ra_kb == READAHEAD_UNSET)
		ra_kb = gfs_srcset_remote(src) ? GFS_LL_READAHEAD_KB_REMOTE : GFS_LL_READAHEAD_KB;
	if (!gfs_ll_set_readahead(opts.mountpoint, ra_kb) &&
	    cli.readahead_kb != READAHEAD_UNSET)
		fprintf(stderr, "gatherfs: -o readahead_kb=%u: cannot set the read-ahead window (only root may): the kernel's 128 KiB stays\n",
			cli.readahead_kb);
	/* what the views left out, once the mount stands (stderr still open) */
	for (size_t i = 0; i < gfs_fs_nnotes(fs); i++)
		fprintf(stderr, "gatherfs: %s\n", gfs_fs_note(fs, i));
	if (fuse_daemonize(opts.foreground) != 0)
		goto out_unmount;
	if (!opts.foreground) {
		openlog("gatherfs", LOG_PID, LOG_DAEMON);
		fuse_set_log_func(log_syslog);
	}
	if (opts.singlethread) {
		ret = fuse_session_loop(se);
	} else {
		cfg = fuse_loop_cfg_create();
		if (!cfg) {
			fuse_log(FUSE_LOG_ERR, "gatherfs: out of memory\n");
			goto out_unmount;
		}
		fuse_loop_cfg_set_clone_fd(cfg, (unsigned)opts.clone_fd);
		fuse_loop_cfg_set_max_threads(cfg, opts.max_threads);
		if (opts.max_idle_threads != UINT_MAX) /* given: discouraged, honoured */
			fuse_loop_cfg_set_idle_threads(cfg, opts.max_idle_threads);
		ret = fuse_session_loop_mt(se, cfg);
		fuse_loop_cfg_destroy(cfg);
	}
	if (m.prefetch) {
		const gfs_prefetch_stats st = gfs_prefetch_stats_get(m.prefetch);

		if (st.streams > 0)
			fuse_log(FUSE_LOG_INFO,
				 "gatherfs: read-ahead: %" PRIu64 " sequential readers, %" PRIu64
				 " bytes prefetched, %" PRIu64 " bytes served from them\n",
				 st.streams, st.filled, st.served);
	}
	if (gfs_srcset_parallel_spans(src) > 0)
		fuse_log(FUSE_LOG_INFO,
			 "gatherfs: parallel reads: %" PRIu64
			 " reads of tensor bytes had their pieces read in parallel (sources off the page cache)\n",
			 gfs_srcset_parallel_spans(src));
	/* The loop returns the signal that ended it: that is a clean stop. */
	ret = ret != 0 && ret != SIGTERM && ret != SIGINT && ret != SIGHUP;
out_unmount:
	fuse_session_unmount(se);
out_signals:
	fuse_remove_signal_handlers(se);
out_session:
	fuse_session_destroy(se);
out_fs:
	gfs_prefetch_free(m.prefetch);
	free(m.conn_opts);
	gfs_fs_free(fs);
	gfs_srcset_close(src);
	gfs_srcset_close(adapter_src);
	gfs_layout_free(adapter);
	free(cfg_text);
	gfs_layout_free(layout);
out_args:
	free(opts.mountpoint);
	free(cli.source);
	free(cli.dtype);
	free(cli.lora);
	free(cli.merge);
	free(cli.base);
	free(cli.lora_tied);
	free(cli.dequant);
	free(cli.tag);
	free(cli.format);
	free(cli.prefix);
	free(cli.naming);
	free(cli.hf_config);
	free(cli.tp_split);
	free(cli.views);
	free(cli.shard_size);
	free(cli.crc_cache);
	free(cli.verify_mode);
	free(cli.crc_cache_max);
	free(cli.prefetch);
	fuse_opt_free_args(&args);
	return ret;
}
