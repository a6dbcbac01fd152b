/* SPDX-License-Identifier: Apache-2.0 */
/*
 * gatherfs — unit tests for the DCP metadata reader (src/readers/dcpmeta.c).
 *
 * The real DCP fixtures' .metadata ($top_srcdir/tests/data/dcp/) are read
 * with it and with the generic pickle reader, and every entry, chunk and
 * storage item must agree; then bad inputs (unknown globals and opcodes,
 * truncation, memo misuse, out-of-range ints, the memory and depth
 * limits, wrong shapes) must each fail with one line naming the file.
 * The fast path for DCP's small dataclasses must give what the generic VM
 * gives (records, string and tuple ids, errors) on the fixtures and on
 * mutations of them: a byte changed at every other offset, and
 * truncations; so must the prescan split over two threads, on a pickle of
 * many small frames (tests/data/pickles/dcp_frames.metadata: bench/gen_dcp.py
 * --layers 1 --ws 3, pickled by pickle._Pickler with 256-byte frames).
 */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gatherfs/readers/dcpmeta.h"
#include "gatherfs/readers/pickle.h"
#include "tap.h"

#define PK(lit) (const uint8_t *)(lit), sizeof(lit) - 1

static uint8_t *slurp(const char *path, size_t *len)
{
	FILE *f = fopen(path, "rb");
	uint8_t *b = NULL;
	long n;

	if (!f)
		return NULL;
	if (fseek(f, 0, SEEK_END) == 0 && (n = ftell(f)) > 0 && fseek(f, 0, SEEK_SET) == 0) {
		b = malloc((size_t)n);
		if (b && fread(b, 1, (size_t)n, f) != (size_t)n) {
			free(b);
			b = NULL;
		}
		*len = (size_t)n;
	}
	fclose(f);
	return b;
}

/* fields(): a dataclass OBJECT's field dict (generic reader). */
static const gfs_pv *fields(const gfs_pv *v)
{
	const gfs_pv *st = v && v->kind == GFS_PV_OBJECT ? v->u.obj.state : NULL;

	if (st && st->kind == GFS_PV_TUPLE && gfs_pv_seq_len(st) == 2)
		st = gfs_pv_seq_at(st, gfs_pv_seq_at(st, 0)->kind == GFS_PV_DICT ? 0 : 1);
	return st && st->kind == GFS_PV_DICT ? st : NULL;
}

/* same_ints(): the generic TUPLE t holds the ints of tuple id. */
static bool same_ints(const gfs_dcpmeta *m, uint32_t id, const gfs_pv *t)
{
	uint32_t n = 0;
	const int64_t *v = gfs_dcpmeta_ints(m, id, &n);

	if (!t || t->kind != GFS_PV_TUPLE)
		return !v;
	if (!v || n != gfs_pv_seq_len(t))
		return false;
	for (uint32_t i = 0; i < n; i++) {
		int64_t x;

		if (!gfs_pv_int(gfs_pv_seq_at(t, i), &x) || x != v[i])
			return false;
	}
	return true;
}

static bool same_str(const gfs_dcpmeta *m, uint32_t id, const gfs_pv *s)
{
	const char *a = gfs_dcpmeta_str(m, id), *b = gfs_pv_str(s);

	return a && b && strcmp(a, b) == 0;
}

/* agree(): the DCP reader's records match the generic reader's tree. */
static void agree(const char *name, const uint8_t *buf, size_t len)
{
	gfs_dcpmeta *m = NULL;
	gfs_pickle *p = NULL;
	const gfs_pv *meta, *sdm, *sd;
	size_t bad = 0, nch = 0;

	if (!tap_ok(gfs_dcpmeta_load(buf, len, name, 0, &m) == GFS_OK, "%s: loads (%s)", name,
		    gfs_errmsg()) ||
	    !tap_ok(gfs_pickle_load(buf, len, name, NULL, &p) == GFS_OK, "%s: generic load", name)) {
		gfs_dcpmeta_free(m);
		gfs_pickle_free(p);
		return;
	}
	meta = fields(gfs_pickle_root(p));
	sdm = gfs_pv_dict_get(meta, "state_dict_metadata");
	sd = gfs_pv_dict_get(meta, "storage_data");
	tap_ok(sdm && sd && m->nentries == sdm->u.dict.len && m->nitems == sd->u.dict.len &&
	       m->nentries > 0, "%s: %zu entries, %zu items", name, m->nentries, m->nitems);
	tap_ok(same_str(m, m->version, gfs_pv_dict_get(meta, "version")), "%s: version %s", name,
	       gfs_dcpmeta_str(m, m->version));
	for (size_t i = 0; sdm && i < m->nentries && i < sdm->u.dict.len; i++) {
		const gfs_dcp_entry *e = &m->entries[i];
		const gfs_pv *tf = fields(sdm->u.dict.items[i].value);
		const gfs_pv *chunks = gfs_pv_dict_get(tf, "chunks");
		const gfs_pv *props = gfs_pv_dict_get(tf, "properties");
		const gfs_pv *pst = props ? props->u.obj.state : NULL;
		const gfs_pv *dt = pst && pst->kind == GFS_PV_TUPLE ? gfs_pv_seq_at(pst, 0) : NULL;
		const gfs_dcp_tensor *t;

		if (!same_str(m, e->fqn, sdm->u.dict.items[i].key) || e->kind != GFS_DCP_TENSOR) {
			bad++;
			continue;
		}
		t = &m->tensors[e->tensor];
		if (!dt || dt->kind != GFS_PV_GLOBAL || !gfs_dcpmeta_str(m, t->dtype) ||
		    strcmp(dt->u.global.name, gfs_dcpmeta_str(m, t->dtype)) != 0 ||
		    !same_ints(m, t->size, gfs_pv_dict_get(tf, "size")) || !t->has_chunks ||
		    t->nchunks != gfs_pv_seq_len(chunks)) {
			bad++;
			continue;
		}
		for (size_t k = 0; k < t->nchunks; k++) {
			const gfs_pv *cf = fields(gfs_pv_seq_at(chunks, k));

			nch++;
			if (!same_ints(m, m->chunks[t->first + k].offsets, gfs_pv_dict_get(cf, "offsets")) ||
			    !same_ints(m, m->chunks[t->first + k].sizes, gfs_pv_dict_get(cf, "sizes")))
				bad++;
		}
	}
	tap_ok(bad == 0 && nch == m->nchunks, "%s: every tensor and its %zu chunks agree", name,
	       nch);
	bad = 0;
	for (size_t i = 0; sd && i < m->nitems && i < sd->u.dict.len; i++) {
		const gfs_dcp_item *it = &m->items[i];
		const gfs_pv *k = fields(sd->u.dict.items[i].key);
		const gfs_pv *v = fields(sd->u.dict.items[i].value);
		const gfs_pv *td = gfs_pv_dict_get(v, "transform_descriptors");
		int64_t off = -1, ln = -1;

		(void)gfs_pv_int(gfs_pv_dict_get(v, "offset"), &off);
		(void)gfs_pv_int(gfs_pv_dict_get(v, "length"), &ln);
		if (!same_str(m, it->fqn, gfs_pv_dict_get(k, "fqn")) ||
		    !same_ints(m, it->offset, gfs_pv_dict_get(k, "offset")) ||
		    !same_str(m, it->rel, gfs_pv_dict_get(v, "relative_path")) ||
		    (uint64_t)off != it->off || (uint64_t)ln != it->len ||
		    it->ntd != (td && td->kind != GFS_PV_NONE ? gfs_pv_seq_len(td) : 0) ||
		    (it->ntd && !same_str(m, it->td0, gfs_pv_seq_at(td, 0))))
			bad++;
	}
	tap_ok(bad == 0, "%s: every storage item agrees", name);
	gfs_dcpmeta_free(m);
	gfs_pickle_free(p);
}

/* The split_min the fast loads use (0: the default, 4 MiB). */
static size_t split;

/*
 * fast_agrees(): loading buf without the fast paths, with them after the
 * prescan, and with them without the prescan (lazy) gives the same
 * records and ids, or the same error; *nfast counts the fast path's
 * objects (with the prescan), *nsplit the loads whose prescan was split,
 * *nlazy the lazy loads that needed no prescan.
 */
static bool fast_agrees(const uint8_t *buf, size_t len, size_t *nfast, size_t *nsplit,
			size_t *nlazy)
{
	static int nshown;
	gfs_dcpmeta *a = NULL, *b = NULL, *c = NULL;
	gfs_err ea, eb, ec;
	char msg[GFS_ERRMSG_MAX], msgc[GFS_ERRMSG_MAX];
	bool same;

	gfs_dcpmeta_set_fast(true, split, false);
	ea = gfs_dcpmeta_load(buf, len, "m.metadata", 0, &a);
	snprintf(msg, sizeof(msg), "%s", gfs_errmsg());
	gfs_dcpmeta_set_fast(true, 0, true);
	ec = gfs_dcpmeta_load(buf, len, "m.metadata", 0, &c);
	snprintf(msgc, sizeof(msgc), "%s", gfs_errmsg());
	gfs_dcpmeta_set_fast(false, 0, false);
	eb = gfs_dcpmeta_load(buf, len, "m.metadata", 0, &b);
	gfs_dcpmeta_set_fast(true, 0, true);
	same = ea == eb && ec == eb &&
	       (ea ? strcmp(msg, gfs_errmsg()) == 0 && strcmp(msgc, gfs_errmsg()) == 0
		   : gfs_dcpmeta_same(a, b) && gfs_dcpmeta_same(c, b) && b->nfast == 0 && !b->split_scan &&
			     !b->lazy && !a->lazy);
	if (!same && nshown++ < 3)
		fprintf(stderr, "# fast: %s\n# lazy: %s\n# generic: %s\n", ea ? msg : "ok",
			ec ? msgc : "ok", eb ? gfs_errmsg() : "ok");
	*nfast += a ? a->nfast : 0;
	*nsplit += a && a->split_scan;
	*nlazy += c && c->lazy;
	gfs_dcpmeta_free(a);
	gfs_dcpmeta_free(b);
	gfs_dcpmeta_free(c);
	return same;
}

/*
 * fast_mutants(): fast_agrees() on buf, on one byte changed at every
 * other offset (from first: 0 or 1), and cut short at every 5th.
 */
static void fast_mutants(const char *name, const uint8_t *buf, size_t len, size_t from)
{
	static const uint8_t repl[] = { 0x94, 'h', 'j', 'K', 'M', 'J', 'N', ')', 0x85, 0x86, 'R',
					'u', 'b', '(', 0x8c, 0x00, 0xff };
	uint8_t *mut = malloc(len ? len : 1);
	size_t nfast = 0, mfast = 0, bad = 0, first = SIZE_MAX, nmut = 0, ntrunc = 0;
	size_t nsplit = 0, msplit = 0, nlazy = 0, mlazy = 0;

	if (!tap_ok(mut != NULL, "%s: memory", name))
		return;
	if (!fast_agrees(buf, len, &nfast, &nsplit, &nlazy))
		nfast = 0;
	tap_ok(nfast > 0 && nsplit == (split ? 1 : 0) && nlazy == 1,
	       "%s: the fast path reads %zu objects, as the generic VM does (prescan split: %zu, no prescan: %zu)",
	       name, nfast, nsplit, nlazy);
	for (size_t i = from; i < len; i += 2) {
		memcpy(mut, buf, len);
		mut[i] = repl[i % sizeof(repl)] != buf[i] ? repl[i % sizeof(repl)] : buf[i] ^ 1;
		nmut++;
		ntrunc += i % 5 < 2;
		if (!fast_agrees(mut, len, &mfast, &msplit, &mlazy) ||
		    (i % 5 < 2 && !fast_agrees(buf, i, &mfast, &msplit, &mlazy))) {
			bad++;
			first = first < i ? first : i;
		}
	}
	tap_ok(bad == 0 && mfast > 0 && (msplit > 0) == (split > 0) && mlazy > 0,
	       "%s: %zu mutants and %zu truncations agree (%zu bad, first at %zu; %zu fast objects, %zu split prescans, %zu loads without one)",
	       name, nmut, ntrunc, bad, first, mfast, msplit, mlazy);
	free(mut);
}

/* fails(): loading buf must fail with want, one line starting "bad.metadata: " holding substr. */
static void fails(const char *desc, const uint8_t *buf, size_t len, size_t max_bytes,
		  gfs_err want, const char *substr)
{
	gfs_dcpmeta *m = (gfs_dcpmeta *)&m;
	const gfs_err err = gfs_dcpmeta_load(buf, len, "bad.metadata", max_bytes, &m);
	const char *msg = gfs_errmsg();

	tap_ok(err == want && !m && strncmp(msg, "bad.metadata: ", 14) == 0 && !strchr(msg, '\n') &&
	       strstr(msg, substr), "%s: %s", desc, msg);
	if (err == GFS_OK)
		gfs_dcpmeta_free(m);
}

int main(void)
{
	static const char *const fixtures[] = { "fsdp2_ws2", "fsdp2_ws2_zstd", "shard1_ws3" };
	const char *top = getenv("top_srcdir") ? getenv("top_srcdir") : ".";
	uint8_t *deep, *good = NULL;
	size_t good_len = 0;

	for (size_t i = 0; i < sizeof(fixtures) / sizeof(fixtures[0]); i++) {
		char path[4096];
		size_t len = 0;
		uint8_t *buf;

		snprintf(path, sizeof(path), "%s/tests/data/dcp/%s/checkpoint/.metadata", top,
			 fixtures[i]);
		buf = slurp(path, &len);
		if (!tap_ok(buf != NULL, "read %s", path))
			continue;
		agree(fixtures[i], buf, len);
		fast_mutants(fixtures[i], buf, len, i % 2);
		if (!good) {
			good = buf;
			good_len = len;
		} else {
			free(buf);
		}
	}
	{
		char path[4096];
		size_t len = 0;
		uint8_t *buf;

		snprintf(path, sizeof(path), "%s/tests/data/pickles/dcp_frames.metadata", top);
		buf = slurp(path, &len);
		if (tap_ok(buf != NULL, "read %s", path)) {
			agree("dcp_frames", buf, len);
			split = 1;
			fast_mutants("dcp_frames", buf, len, 0);
			split = 0;
		}
		free(buf);
	}
	if (good) {
		fails("the memory limit", good, good_len, 4096, GFS_ERR_LIMIT, "limit of 4096 bytes");
		fails("cut short", good, good_len / 2, 0, GFS_ERR_FORMAT, "truncated");
	}
	free(good);

	fails("not a Metadata", PK("\x80\x05N."), 0, GFS_ERR_FORMAT, "no Metadata object");
	fails("a global outside the whitelist", PK("\x80\x02" "cos\nsystem\n."), 0,
	      GFS_ERR_UNSUPPORTED, "global os.system is not used by DCP metadata");
	fails("STACK_GLOBAL outside the whitelist",
	      PK("\x80\x05\x8c\x08" "builtins\x8c\x04" "eval\x93."), 0, GFS_ERR_UNSUPPORTED,
	      "global builtins.eval");
	fails("a text opcode", PK("I1\n."), 0, GFS_ERR_UNSUPPORTED, "opcode 0x49");
	fails("no STOP", PK("\x80\x05N"), 0, GFS_ERR_FORMAT, "truncated");
	fails("a string past the end", PK("\x80\x05X\x10\x00\x00\x00" "ab."), 0, GFS_ERR_FORMAT,
	      "truncated");
	fails("an undefined memo entry", PK("\x80\x05K\x01\x94h\x05."), 0, GFS_ERR_FORMAT,
	      "memo entry 5 is undefined");
	fails("a memo index past the pickle", PK("\x80\x05j\xff\xff\xff\x00."), 0, GFS_ERR_FORMAT,
	      "beyond the pickle's length");
	fails("a 9-byte int", PK("\x80\x05\x8a\x09" "123456789."), 0, GFS_ERR_UNSUPPORTED,
	      "integer of 9 bytes");
	fails("an int past 2^59", PK("\x80\x05\x8a\x08\x00\x00\x00\x00\x00\x00\x00\x10."), 0,
	      GFS_ERR_UNSUPPORTED, "out of range");
	fails("APPEND to None", PK("\x80\x05NNa."), 0, GFS_ERR_FORMAT,
	      "APPEND into something else than a list");
	fails("SETITEMS with an odd count", PK("\x80\x05}(K\x01u."), 0, GFS_ERR_FORMAT,
	      "odd number");
	fails("REDUCE of None", PK("\x80\x05N)R."), 0, GFS_ERR_FORMAT, "not a global");
	fails("torch.Size(None)", PK("\x80\x02" "ctorch\nSize\nN\x85R."), 0, GFS_ERR_FORMAT,
	      "torch.Size of something else than ints");
	fails("POP on an empty stack", PK("\x80\x05" "0."), 0, GFS_ERR_FORMAT, "no MARK");
	fails("a protocol past 5", PK("\x80\x06N."), 0, GFS_ERR_UNSUPPORTED, "protocol 6");
	deep = malloc(70002);
	if (deep) {
		memset(deep, '(', 70001);
		deep[70001] = '.';
		fails("70,001 MARKs", deep, 70002, 0, GFS_ERR_LIMIT, "stack deeper than");
		free(deep);
	}
	{
		gfs_dcpmeta *m = NULL;
		const gfs_err err = gfs_dcpmeta_load(
			PK("\x80\x02" "ctorch.distributed.checkpoint.metadata\nMetadata\n)\x81}("
			   "X\x13\x00\x00\x00" "state_dict_metadata}X\x0c\x00\x00\x00" "storage_data}ub."),
			"empty.metadata", 0, &m);

		tap_ok(err == GFS_OK && m && m->nentries == 0 && m->nitems == 0 && m->chunks &&
		       m->tensors && m->version == GFS_DCP_NONE,
		       "a Metadata with empty dicts: no entries, arrays not NULL (%s)", gfs_errmsg());
		gfs_dcpmeta_free(m);
	}
	fails("an empty tuple", PK("\x80\x05)."), 0, GFS_ERR_FORMAT, "no Metadata object");
	fails("Metadata without dicts",
	      PK("\x80\x02" "ctorch.distributed.checkpoint.metadata\nMetadata\n)\x81}b."), 0,
	      GFS_ERR_FORMAT, "lacks a state_dict_metadata or storage_data dict");
	return tap_done();
}
