/*
 * shardidx_i.h — shardidx internals shared by its .c files.
 *
 * The index is a flat array of 32-byte records (struct shardidx__rec) plus a
 * NUL-terminated string table and three small side tables (sparse maps,
 * hardlinks, samples). Records are in breadth-first order: the top-level
 * entries first, then for each directory in index order its children, sorted
 * by name (bytewise, shorter first on a common prefix). So every directory's
 * children are one contiguous, sorted range (binary-searchable), a parent
 * always has a smaller index than its children (no cycles), and a WebDataset
 * sample is a contiguous run.
 *
 * Record fields by type:
 *   DIR      off = first_child | (number of child directories << 32),
 *            size = number of children
 *   SYMLINK  off = offset of the target in the string table, size = its length
 *   REG      off = stream offset of the data (not sparse) or index into the
 *            sparse table (SHARDIDX_F_SPARSE), size = logical size
 * Hardlinks (SHARDIDX_F_HARDLINK) carry the same off/size/flags as their
 * canonical entry; the link table (sorted by entry) maps them to the canon,
 * and maps each canon (SHARDIDX__F_LINKED) to its nlink.
 *
 * These structs are the file's sections byte for byte on a little-endian
 * host (the _Static_asserts below), so an index loaded in place
 * (shardidx_load_in_place) points recs, names, sparse, segs and links into
 * the caller's buffer — a mapped file — and copies nothing.
 */
#ifndef SHARDIDX_I_H
#define SHARDIDX_I_H

#include <stdint.h>
#include <stdatomic.h>
#include <stddef.h>

#include "shardidx.h"

#define SHARDIDX__F_PUBLIC 0x0f
#define SHARDIDX__F_LINKED 0x40 /* REG that hardlinks point to */

#define SHARDIDX__NAME_MAX 255

struct shardidx__rec {
	uint64_t off;
	uint64_t size;
	uint32_t name_off;
	uint32_t parent;
	uint32_t mtime;
	uint16_t mode;
	uint8_t type;
	uint8_t flags;
};
_Static_assert(sizeof(struct shardidx__rec) == 32, "record must stay 32 bytes");
_Static_assert(offsetof(struct shardidx__rec, name_off) == 16 &&
		   offsetof(struct shardidx__rec, mtime) == 24 &&
		   offsetof(struct shardidx__rec, mode) == 28 &&
		   offsetof(struct shardidx__rec, type) == 30 &&
		   offsetof(struct shardidx__rec, flags) == 31,
	       "a record is laid out as in the file");

/* One sparse entry: its data segments are segs[first_seg, first_seg+nseg). */
struct shardidx__sparse {
	uint32_t first_seg;
	uint32_t nseg;
	uint64_t data_off; /* stream offset where the stored data begins */
};
_Static_assert(sizeof(struct shardidx__sparse) == 16 &&
		   offsetof(struct shardidx__sparse, data_off) == 8,
	       "a sparse row is laid out as in the file");

/* A stored data segment of a sparse entry; everything between is a hole. */
struct shardidx__seg {
	uint64_t logical;
	uint64_t stream_off;
	uint64_t len;
};
_Static_assert(sizeof(struct shardidx__seg) == 24, "a segment is laid out as in the file");

/* Hardlink table row: for a HARDLINK entry val = canon; for a LINKED entry
 * val = nlink. Sorted by entry, unique. */
struct shardidx__link {
	uint32_t entry;
	uint32_t val;
};
_Static_assert(sizeof(struct shardidx__link) == 8, "a link row is laid out as in the file");

/* 1 when the file's sections can be read in place on this host. */
#define SHARDIDX__IN_PLACE_HOST (__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__)

struct shardidx {
	/* Built or decoded: heap arrays, freed with the index. Loaded in place
	 * (in_place != 0): they point into the caller's read-only buffer and
	 * nothing writes through them; release(release_arg) gives the buffer
	 * back when the index is freed. */
	struct shardidx__rec *recs;
	uint32_t nrecs;
	uint32_t root_n; /* top-level entries are [0, root_n) */
	char *names;
	uint32_t names_len;
	struct shardidx__sparse *sparse;
	uint32_t nsparse;
	struct shardidx__seg *segs;
	uint32_t nsegs;
	struct shardidx__link *links;
	uint32_t nlinks;
	/* first entry of each sample: built on first use (shardidx_sample_get),
	 * never saved, so an index costs 32 bytes per entry plus names unless
	 * samples are asked for; published once with a compare-and-swap */
	uint32_t *_Atomic samples;
	uint32_t nsamples; /* counted when the index is built or loaded */
	/* Version 3 (compact, shardidx_compact.c): recs is NULL, the entries
	 * are front-coded blocks read in place from the caller's buffer: the
	 * block heads (u32 each), the block bytes, and the directory rows
	 * (u32 entry, first_child, nchild, nsub each); names holds only the
	 * symlink targets. tables_heap: sparse, segs and links are heap
	 * copies (a misaligned buffer, a big-endian host). */
	int compact;
	int tables_heap;
	const unsigned char *heads;
	uint32_t nblocks;
	const unsigned char *blob;
	uint64_t blob_len;
	const unsigned char *dirs;
	uint32_t ndirs;
	int in_place;
	uint64_t id;	/* compact: this load's number (never reused in the process), which
			 * keys the per-thread cursors of shardidx_entry_get; 0: flat */
	size_t buf_len; /* in place: bytes of the buffer read in place */
	void (*release)(void *arg);
	void *release_arg;

	uint64_t stream_size;
	uint64_t end_off;
	int damage;
	uint64_t damage_off;
	uint32_t skipped;
	/* shardidx_skipped_first: a heap copy (a loaded one too: the file
	 * may be rewritten in place), NULL when skipped is 0 */
	char *skip_first;
	uint64_t file_sum; /* loaded: the checksum in its file's header; built: 0 */
};

/* One member as the tar parser hands it to the tree (shardidx_tree.c). */
enum shardidx__kind {
	SHARDIDX__K_REG = 1,
	SHARDIDX__K_DIR,
	SHARDIDX__K_SYMLINK,
	SHARDIDX__K_HARDLINK, /* link names the target path */
};

struct shardidx__member {
	const char *path; /* raw stored name (not normalized), path_len bytes */
	size_t path_len;
	const char *link; /* SYMLINK target / HARDLINK target path */
	size_t link_len;
	int kind; /* enum shardidx__kind */
	uint16_t mode;
	uint32_t mtime;			  /* already clamped */
	uint64_t data_off;		  /* REG: stream offset of the stored data */
	uint64_t size;			  /* REG: logical size */
	uint64_t stored;		  /* REG: bytes stored in the stream */
	const struct shardidx__seg *segs; /* sparse: data segments */
	uint32_t nseg;
	int sparse;
};

struct shardidx__tree;

/* shardidx_tree.c */
struct shardidx__tree *shardidx__tree_new(void);
void shardidx__tree_free(struct shardidx__tree *t);
/* 0: added; 1: left out (name rules, a hardlink without target...); 2: added,
 * and an earlier file or symlink its path needs as a directory hidden
 * (*why says so); -ENOMEM */
int shardidx__tree_add(struct shardidx__tree *t, const struct shardidx__member *m,
		       const char **why);
/* Build the immutable index into *ix (zeroed by the caller). */
int shardidx__tree_finish(struct shardidx__tree *t, uint64_t stream_size, struct shardidx *ix);

/* One decoded entry (shardidx_compact.c): the record and its base name.
 * name points into the index (flat) or into namebuf (compact). A cursor
 * read sequentially decodes each entry once; a seek backwards or into
 * another block decodes from the start of the entry's block (at most
 * SHARDIDX__BLOCK entries). */
#define SHARDIDX__BLOCK 16

struct shardidx__cur {
	const struct shardidx *ix;
	uint32_t i; /* entry in rec, or SHARDIDX_NONE */
	struct shardidx__rec rec;
	const char *name;
	size_t name_len;
	/* compact: the decoder's state within the current block */
	const unsigned char *p, *pend;
	uint32_t mode, mtime;
	uint64_t pred;
	/* compact: the child range [par_lo, par_hi) whose parent par the last
	 * parent search found (empty: none), so entries read in order through
	 * a directory (a listing) search the rows once a directory */
	uint32_t par_lo, par_hi, par;
	int fin; /* compact: rec's parent and directory row are set and checked */
	char namebuf[SHARDIDX__NAME_MAX + 1];
};

/* shardidx_compact.c */
/* Entries this thread decoded from compact blocks (shardidx_decodes). */
extern _Thread_local uint64_t shardidx__ndecoded;
void shardidx__cur_init(struct shardidx__cur *c, const struct shardidx *ix);
/* Decode entry i into c: 0, or -EINVAL (out of range, or bytes that do not
 * decode: only while validating). Compact: nothing when c holds i already,
 * the entries after c's up to i when i lies further on in c's block, else
 * from the head of i's block. */
int shardidx__cur_seek(struct shardidx__cur *c, uint32_t i);
/* The directory row of entry i (compact): 1 and first/n/nsub when i is a
 * directory, 0 when it is none, -1 when the row's child range lies outside
 * the entries (a file rewritten in place after load: checked at use). */
int shardidx__dir_row(const struct shardidx *ix, uint32_t i, uint32_t *first, uint32_t *n,
		      uint32_t *nsub);
/* The directory whose child range holds entry i (compact), SHARDIDX_NONE
 * for a top-level entry (a value >= i when the rows were rewritten after
 * load: the caller checks it at use). */
uint32_t shardidx__parent_of(const struct shardidx *ix, uint32_t i);
/* Child of [lo, hi) named name[0..len) (compact): its entry, or -ENOENT.
 * Scans one block from entry i on with take(ix, i), a cursor of ix (left
 * on the entry found). */
int shardidx__lookup_compact(const struct shardidx *ix, uint32_t lo, uint32_t hi, const char *name,
			     size_t len,
			     struct shardidx__cur *(*take)(const struct shardidx *ix, uint32_t i));
int shardidx__save_compact(const struct shardidx *ix, const void *ident, size_t identlen,
			   void **buf, size_t *len);
/* Sections of a version-3 file in b[0..len) (header already checked) into
 * ix, validated: 0, -EBADMSG or -ENOMEM. */
int shardidx__load_compact(struct shardidx *ix, const unsigned char *b, size_t len);
uint64_t shardidx__file_sum(const unsigned char *p, size_t len);
/* What the version-2 and version-3 writers (shardidx_save.c,
 * shardidx_compact.c) write alike, into a zeroed buffer out: the header's
 * fields but the checksum (the magic, version, header size, total size,
 * the counts, the stream's state and the nsect sections' offsets and
 * lengths; names_len is the names section's), then the identity at
 * ident_off and the sparse, segment and link rows at their offsets. */
struct shardidx__head {
	uint32_t version, hdr_size, names_len;
	uint64_t total;
	const uint64_t *sec_off, *sec_len;
	int nsect;
	uint64_t ident_off, sparse_off, segs_off, links_off;
};
void shardidx__put_common(unsigned char *out, const struct shardidx *ix,
			  const struct shardidx__head *h, const void *ident, size_t identlen);
int shardidx__name_ok(const char *s, size_t l);
int shardidx__reg_ok(const struct shardidx *ix, const struct shardidx__rec *rc,
		     const uint64_t *sp_end, uint32_t *nflagged);
int shardidx__sparse_ok(const struct shardidx *ix, uint64_t *sp_end);
int shardidx__decode_tables(struct shardidx *ix, const unsigned char *sp, const unsigned char *sg,
			    const unsigned char *lk);

/* shardidx_index.c */
/* A sparse row's segments inside the segment table. */
static inline int shardidx__sparse_row_ok(const struct shardidx *ix, uint32_t first_seg,
					  uint32_t nseg)
{
	return first_seg <= ix->nsegs && nseg <= ix->nsegs - first_seg;
}

/* An index read in place reads a file that may be rewritten in place
 * after load checked it (the cache's file: a cut is the SIGBUS guard's).
 * So every offset or length decoded from it is checked where it is used,
 * a compare against the table's length: record r of entry i, as a cursor
 * decoded it, points inside the index (a name of 1-255 bytes inside the
 * names of a flat index, its parent before it, a directory's children
 * inside the entries, a symlink's target inside the strings and
 * NUL-terminated at its size, a sparse row inside the rows and its
 * segments inside theirs). 1 when it does; else the reader answers
 * -EBADMSG (the index is damaged: its caller's "index changed" check,
 * fs_view_shard.c's index_miss, finds the file's change and reloads).
 * Inline: it runs at every decode. */
static inline int shardidx__rec_in_bounds(const struct shardidx *ix, uint32_t i,
					  const struct shardidx__rec *r)
{
	if (r->parent != SHARDIDX_NONE && r->parent >= i)
		return 0;
	switch (r->type) {
	case SHARDIDX_DIR:
		return (uint32_t)r->off <= ix->nrecs && r->size <= ix->nrecs - (uint32_t)r->off;
	case SHARDIDX_SYMLINK:
		return r->off < ix->names_len && r->size < ix->names_len - r->off &&
		       ix->names[r->off + r->size] == 0;
	case SHARDIDX_REG:
		if (!(r->flags & SHARDIDX_F_SPARSE))
			return 1;
		return r->off < ix->nsparse &&
		       shardidx__sparse_row_ok(ix, ix->sparse[r->off].first_seg,
					       ix->sparse[r->off].nseg);
	default:
		return 0;
	}
}

/* Name of flat record r inside the names table: its length into *len, or
 * NULL when it runs outside (checked at use as above). */
const char *shardidx__flat_name(const struct shardidx *ix, const struct shardidx__rec *r,
				size_t *len);
int shardidx__name_cmp(const char *a, size_t alen, const char *b, size_t blen);
size_t shardidx__key_len(const char *name);
/* Count the samples into ix->nsamples. */
void shardidx__count_samples(struct shardidx *ix);
const struct shardidx__link *shardidx__link_find(const struct shardidx *ix, uint32_t entry);
size_t shardidx__mem_bytes(const struct shardidx *ix);

/* ---- the tar parser (shardidx_build.c and the files it lists) ---------------- */

#define BLK		 512u
#define XDATA_MAX	 (16u << 20) /* largest L/K/x/g member we buffer */
#define SPARSE_MAX_PAIRS (1u << 22)
#define SIZE_MAX_STORED	 (1ull << 62)

enum state {
	ST_HDR,	  /* reading a header block */
	ST_XDATA, /* reading the data of an L/K/x/g member */
	ST_SPEXT, /* reading an old GNU extended sparse header */
	ST_SPMAP, /* reading the GNU sparse 1.0 map */
	ST_END,
	ST_DAMAGED,
};

struct sbuf {
	char *p;
	size_t len;
	int set;
};

struct pax {
	struct sbuf path, linkpath, sp_name;
	int has_size, has_mtime, has_realsize;
	uint64_t size, realsize;
	int64_t mtime;
	int sp_major, sp_minor; /* -1: absent */
	int sp_pairs;		/* 0.0 / 0.1 map seen */
};

struct shardidx_builder {
	uint64_t pos; /* want() */
	uint64_t fed_end;
	uint64_t end_off;
	uint64_t grp_off; /* first header of the current member */
	int state;
	int err;

	unsigned char blk[BLK];
	size_t bfill;

	/* ST_XDATA */
	char *x;
	size_t xlen, xcap, xneed;
	int xtype;
	uint64_t xnext;

	/* pending for the next member */
	struct sbuf longname, longlink;
	struct pax px, gx;

	/* member being assembled */
	struct sbuf mname, mlink;
	int mkind;
	uint16_t mmode;
	uint32_t mmtime;
	uint64_t mdata;	  /* data area start */
	uint64_t mstored; /* data area length (size field / pax size) */
	uint64_t mrealsize;
	int msparse;
	uint64_t *sp; /* (offset, numbytes) pairs */
	size_t nsp, csp;
	struct shardidx__seg *segs;
	size_t csegs;

	/* ST_SPMAP */
	char line[32];
	size_t linelen;
	uint64_t map_count; /* UINT64_MAX until read */
	uint64_t map_blocks;

	struct shardidx__tree *tree;
	uint32_t skipped;
	char msg[160];
	/* The first member left out, as shardidx_builder_skipped says it */
	char skip[SHARDIDX_SKIPPED_MAX + 1];
	/* Fields read past (a malformed pax mtime): how many; the first one
	 * as shardidx_builder_note says it; the current member's first one,
	 * until shardidx__member_done names the member in note. */
	uint32_t nignored;
	char note[400];
	char mnote[160];
};

/* shardidx_build.c */
int shardidx__damage(struct shardidx_builder *b, int err, uint64_t off, const char *what);
int shardidx__member_done(struct shardidx_builder *b, uint64_t data_start);

/* shardidx_field.c */
int shardidx__sbuf_set(struct sbuf *s, const char *p, size_t len);
void shardidx__sbuf_clear(struct sbuf *s);
uint64_t shardidx__round_blk(uint64_t n);
uint32_t shardidx__clamp_mtime(int64_t t);
int shardidx__num_field(const unsigned char *f, size_t len, int64_t *out);
int shardidx__cksum_ok(const unsigned char *h);
int shardidx__is_zero_block(const unsigned char *h);
int shardidx__parse_u64(const char *s, size_t len, uint64_t *out);
int shardidx__parse_time(const char *s, size_t len, int64_t *out, size_t *used);

/* shardidx_pax.c */
void shardidx__pax_clear(struct pax *p);
__attribute__((format(printf, 3, 4))) void shardidx__ignored(struct shardidx_builder *b, int global,
							     const char *fmt, ...);
int shardidx__member_names(struct shardidx_builder *b, const unsigned char *h, int posix);
int shardidx__xdata_start(struct shardidx_builder *b, unsigned char type, int64_t size,
			  uint64_t hoff);
int shardidx__on_xdata(struct shardidx_builder *b);

/* shardidx_sparse.c */
int shardidx__sp_push(struct shardidx_builder *b, uint64_t off, uint64_t nb);
int shardidx__sparse_segments(struct shardidx_builder *b, uint64_t data_start, uint64_t avail,
			      uint32_t *nseg);
int shardidx__member_sparse(struct shardidx_builder *b, const unsigned char *h, int gnu,
			    uint64_t hoff);
int shardidx__on_spext(struct shardidx_builder *b);
int shardidx__on_spmap(struct shardidx_builder *b);

#endif
