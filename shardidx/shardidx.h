/*
 * shardidx — tar bytes to a compact, immutable index of a shard's members.
 *
 * Design: a push parser (struct shardidx_builder) is fed the bytes of one tar
 * stream and tells the caller, through shardidx_builder_want(), which stream
 * offset it needs next. A caller that streams the shard sequentially simply
 * skips the bytes before want(); a caller with random access (a local file)
 * seeks there and reads only headers. The result is an immutable
 * struct shardidx: every member, its exact data location in the (decoded)
 * tar stream, the directory tree, and the WebDataset samples.
 *
 * Non-goals: this module does no I/O of its own (no files, no sockets), does
 * not decompress (the caller feeds decoded tar bytes), and does not extract.
 *
 * Name rules (docs/design.md section 3): leading '/' and './' are dropped, '.'
 * components are dropped, repeated '/' collapse; a name with a '..'
 * component, an empty name, or a component longer than 255 bytes is left
 * out and counted (shardidx_info.skipped). Device nodes and FIFOs are left
 * out and counted too. A name stored twice shows the later copy (tar's
 * rule). Directories implied by a member's path exist even without an
 * entry of their own; a directory needed by children wins over a
 * non-directory stored under the same path, before or after them (that
 * file or symlink is counted in shardidx_info.skipped; GNU tar keeps it
 * and fails to extract the members under it).
 *
 * Threads: a builder belongs to one thread. A finished struct shardidx is
 * immutable and may be read from any number of threads without locks.
 *
 * Errors: functions return 0 or a negative errno. -EBADMSG: the bytes are
 * not a valid tar header / index file; -EPROTO: an index file of another
 * version; -ESTALE: an index file made for another object identity;
 * -ENOMEM; -EINVAL: bad arguments; -EIO: the bytes asked for are not in the
 * stream (truncated shard).
 */
#ifndef SHARDIDX_H
#define SHARDIDX_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* Parent of top-level entries; also "no such entry". */
#define SHARDIDX_NONE UINT32_MAX

enum shardidx_type {
	SHARDIDX_REG = 1, /* regular file (also hardlinks, see canon) */
	SHARDIDX_DIR = 2,
	SHARDIDX_SYMLINK = 3,
};

enum shardidx_flag {
	SHARDIDX_F_SPARSE = 1 << 0,    /* data has holes; use shardidx_map */
	SHARDIDX_F_TRUNCATED = 1 << 1, /* data runs past the end of the stream */
	SHARDIDX_F_IMPLICIT = 1 << 2,  /* directory implied by a path, no own entry */
	SHARDIDX_F_HARDLINK = 1 << 3,  /* stored as a hardlink to entry 'canon' */
};

struct shardidx;
struct shardidx_builder;

#define SHARDIDX_NAME_MAX 255 /* bytes of a base name at most */

/* A decoded view of one entry. link stays valid while the index lives;
 * name is a copy (a compact index stores names front-coded, not whole). */
struct shardidx_entry {
	const char *link;     /* SYMLINK: stored target (NUL-terminated); else NULL */
	uint32_t parent;      /* index of the parent directory, or SHARDIDX_NONE */
	uint32_t canon;	      /* entry whose inode this one shares (itself unless hardlink) */
	uint32_t first_child; /* DIR: index of the first child (children are contiguous) */
	uint32_t nchild;      /* DIR: number of children */
	uint32_t nlink;	      /* REG: 1 + hardlinks to it; DIR: 2 + subdirectories */
	uint8_t type;	      /* enum shardidx_type */
	uint8_t flags;	      /* enum shardidx_flag */
	uint16_t mode;	      /* permission bits only (07777) */
	int64_t mtime;	      /* seconds since the epoch, as stored (clamped to 0..2^32-1) */
	uint64_t size;	      /* REG: logical size; SYMLINK: target length; DIR: 0 */
	uint64_t data_off;    /* REG, not sparse: stream offset of byte 0 of the data */
	char name[SHARDIDX_NAME_MAX + 1]; /* base name, NUL-terminated, never empty, no '/' */
};

/* One piece of a regular entry's data: either stored bytes or a hole of zeros. */
struct shardidx_extent {
	uint64_t logical;    /* offset within the member */
	uint64_t stream_off; /* offset within the tar stream (unused for holes) */
	uint64_t len;
	int hole; /* 1: a sparse hole, reads as zeros (they are the member's bytes) */
};

struct shardidx_info {
	uint32_t nentries;     /* entries in the index, directories included */
	uint32_t nsamples;     /* WebDataset samples */
	uint64_t stream_size;  /* bytes of tar stream available when the index was built */
	uint64_t end_off;      /* offset just past the last parsed header or data */
	int damage;	       /* 0, or negative errno: parsing stopped at damage_off */
	uint64_t damage_off;   /* stream offset of the damage */
	uint32_t skipped;      /* members left out (hostile names, devices, fifos, ...) */
	size_t mem_bytes;      /* bytes of heap the index holds (its arrays unless read in place,
				* the sample table once built) */
	size_t in_place_bytes; /* bytes of the buffer it reads in place (0: none) */
};

/* ---- building ---------------------------------------------------------- */

struct shardidx_builder *shardidx_builder_new(void);
void shardidx_builder_free(struct shardidx_builder *b); /* accepts NULL */

/* Stream offset of the next byte the parser needs. Bytes before it are
 * member data it does not need (the caller may skip or seek over them). */
uint64_t shardidx_builder_want(const struct shardidx_builder *b);

/* Feed stream bytes that start exactly at shardidx_builder_want(b). All of
 * buf is consumed (header bytes are parsed or buffered, data bytes skipped).
 * Returns 0: wants more; 1: end of archive seen, no more input needed;
 * negative errno: the stream is damaged at want() (parsing stopped; entries
 * before the damage are kept; further feeds return the same error). */
int shardidx_builder_feed(struct shardidx_builder *b, const void *buf, size_t len);

/* Finish: stream_size is the number of stream bytes that exist (the caller
 * hit EOF there, or knows the object size). An archive that ends before its
 * end-of-archive marker is recorded as damage (-EIO) at the point it ends;
 * entries whose data runs past stream_size get SHARDIDX_F_TRUNCATED.
 * Consumes b (frees it) whatever the result. */
int shardidx_builder_finish(struct shardidx_builder *b, uint64_t stream_size,
			    struct shardidx **out);

/* Last human-readable message about damage or skipped members, or "". */
const char *shardidx_builder_message(const struct shardidx_builder *b);

/* The first member left out (counted in shardidx_info.skipped): its
 * name as stored (its first 200 bytes and "..." when longer) and why, e.g. "'../a.jpg': member
 * at offset 1536 left out: name with a '..' component"; "" when none was.
 * *count (if not NULL): the members left out so far. Valid until the
 * builder is freed. */
const char *shardidx_builder_skipped(const struct shardidx_builder *b, uint32_t *count);

/* The first member left out of ix, in the words shardidx_builder_skipped
 * gave while it was built, byte for byte (the name as stored: any byte but
 * NUL); "" when none was (info.skipped is 0). Saved with the index (since
 * version 4), so a loaded index says what its build said. At most
 * SHARDIDX_SKIPPED_MAX bytes. */
#define SHARDIDX_SKIPPED_MAX 399
const char *shardidx_skipped_first(const struct shardidx *ix);

/* The first note about a field the parser read past as GNU tar does (a
 * pax mtime with no digits: ignored, the header's mtime used; one with
 * stray bytes after its number: read up to them), naming the member and
 * the offset of its first header, e.g. "member a/b.jpg at offset 1536:
 * extended header record mtime=xxx ignored: not a time, the header's mtime
 * is used"; "" when there was none. Such a member is indexed and the stream
 * is not damaged: its bytes are not in doubt. *count (if not NULL): the
 * fields read past in all. Valid until the builder is freed. */
const char *shardidx_builder_note(const struct shardidx_builder *b, uint32_t *count);

/* 1 when buf, the first len bytes of a stream, starts like an uncompressed
 * tar archive: a first 512-byte block with the "ustar" magic at offset 257
 * (ustar, GNU and pax formats), a valid header checksum (also v7), or all
 * zeros (an empty archive). 0 for anything else, e.g. compressed bytes, or
 * fewer than 512 bytes without the magic. */
int shardidx_looks_like_tar(const void *buf, size_t len);

/* 1 when hdr, the 512-byte tar header block just before entry e's data,
 * describes e: its checksum is valid, its size is e->size and its name field
 * ends in e->name (a name longer than the field, which a pax or GNU header
 * before it carried, is not compared). 0 otherwise. A spot check that an
 * index loaded from elsewhere (a sidecar) fits the shard it is used with. */
int shardidx_header_describes(const void *hdr, const struct shardidx_entry *e);

/* ---- reading ----------------------------------------------------------- */

void shardidx_free(struct shardidx *ix); /* accepts NULL */
void shardidx_get_info(const struct shardidx *ix, struct shardidx_info *info);
/* Entries in the index (shardidx_info.nentries, without the rest). */
uint32_t shardidx_count(const struct shardidx *ix);
/* The identity of the index file ix was loaded from: the checksum in its
 * header (FNV-1a 64 of the whole file, shardidx_save.c), which load
 * verified; 0 for an index built and not loaded (shardidx_builder_finish).
 * Two loads of one file give the same value, and a file saved from
 * another index (other entries, another version, another identity) gives
 * another, as surely as load's own checksum tells a damaged file. */
uint64_t shardidx_file_sum(const struct shardidx *ix);

/* Top-level entries are [*first, *first + *n). */
void shardidx_root(const struct shardidx *ix, uint32_t *first, uint32_t *n);

/* Fill *e for entry i. Returns 0, -EINVAL when i is out of range, or
 * -EBADMSG when the buffer an index reads in place was rewritten since
 * load and entry i's bytes or the offsets they hold no longer fit the
 * index (every offset read from the buffer is checked where it is used:
 * a reader never leaves the index's tables). A
 * compact index (version 3) decodes entries from the head of their block
 * of 16; each thread keeps its cursors on the last two entries it read
 * (of any index), so asking for the same entry again decodes nothing and
 * asking for the next ones decodes each once (shardidx_index.c). */
int shardidx_entry_get(const struct shardidx *ix, uint32_t i, struct shardidx_entry *e);

/* Directory entry i: its children are [*first, *first + *n), its parent
 * *parent (SHARDIDX_NONE: top level), as shardidx_entry_get gives them,
 * without decoding the entry (a compact index reads its directory row and
 * finds its parent's: two binary searches). 0, -ENOTDIR when entry i is
 * no directory, -EINVAL when i is out of range, or -EBADMSG (a rewritten
 * buffer, as shardidx_entry_get). */
int shardidx_dir_get(const struct shardidx *ix, uint32_t i, uint32_t *first, uint32_t *n,
		     uint32_t *parent);

/* Entries the calling thread has decoded from compact indexes' blocks, in
 * all (a count for tests and benches: what entry_get, map and the rest
 * cost). */
uint64_t shardidx_decodes(void);

/* Child of directory 'parent' (SHARDIDX_NONE: top level) named exactly
 * name[0..len). Returns its index, -ENOENT, or -EBADMSG (a rewritten
 * buffer, as shardidx_entry_get). Binary search. */
int64_t shardidx_lookup(const struct shardidx *ix, uint32_t parent, const char *name, size_t len);

/* Map [off, off+len) of regular entry i to extents, clipped to its size.
 * Writes at most max extents; returns how many, or a negative errno:
 * -EIO when part of the range lies past the end of the stream (truncated
 * shard: those bytes are not in the shard), -EINVAL for a non-regular
 * entry, -EBADMSG for a rewritten buffer (as shardidx_entry_get: an
 * extent is never past the stream or outside the entry). Returns 0 for
 * an empty range. If more than max extents would be
 * needed, the first max are returned (call again after the last one). */
int shardidx_map(const struct shardidx *ix, uint32_t i, uint64_t off, uint64_t len,
		 struct shardidx_extent *ext, int max);

/* WebDataset samples: consecutive non-directory entries of one directory
 * whose names share the key (name up to its first '.'). Sample s covers the
 * entries [*first, *first + *n); directory entries inside that range are not
 * part of the sample. Samples are in index order. */
int shardidx_sample_get(const struct shardidx *ix, uint32_t s, uint32_t *first, uint32_t *n);
/* The first sample that starts at entry from or after it, as
 * shardidx_sample_get gives it: 0, or -ENOENT when there is none. A walk
 * over every sample (from = 0, then *first + *n) without the sample table
 * shardidx_sample_get builds (4 bytes a sample, kept with the index). */
int shardidx_sample_next(const struct shardidx *ix, uint32_t from, uint32_t *first, uint32_t *n);

/* ---- persistence --------------------------------------------------------- */

/* Serialize to a malloc'd buffer (caller frees). ident/identlen is an opaque
 * identity of the source object (key, size, ETag...) that load checks.
 * Format: magic, version, little-endian fixed-width fields, checksum. */
int shardidx_save(const struct shardidx *ix, const void *ident, size_t identlen, void **buf,
		  size_t *len);

/* Load an index saved by shardidx_save. Takes ownership of buf (a malloc'd
 * buffer of len bytes) in every case. Validates everything (checksum, every
 * offset and count) so that a corrupt file can never cause an out-of-bounds
 * access (and a buffer read in place that is rewritten after load is
 * checked again where each offset is used: -EBADMSG from the readers).
 * Returns 0, -EBADMSG (corrupt), -EPROTO (other version), -ESTALE (ident
 * differs) or -ENOMEM. Same as shardidx_load_in_place(buf, ..., free,
 * buf): the index reads buf in place where it can. */
int shardidx_load(void *buf, size_t len, const void *ident, size_t identlen, struct shardidx **out);

/* Load an index saved by shardidx_save from buf[0..len) without copying
 * it: a read-only mapping of the file (the heap then holds only the struct,
 * a few hundred bytes, and the sample table once asked for). Validation is
 * shardidx_load's, done once here. buf must stay readable and unchanged
 * until release(arg), which is called exactly once: by shardidx_free, or
 * before this returns an error, or before it returns 0 when the index could
 * not read buf in place (a big-endian host, buf not 8-byte aligned: the
 * sections are then decoded into fresh arrays; info.in_place_bytes says
 * which). release may be NULL. Returns as shardidx_load. */
int shardidx_load_in_place(const void *buf, size_t len, const void *ident, size_t identlen,
			   void (*release)(void *arg), void *arg, struct shardidx **out);

/* The arg ix releases its buffer with (shardidx_load_in_place's), while
 * it reads that buffer in place; NULL when it holds no buffer of the
 * caller's (loaded into fresh arrays, or by shardidx_load). */
void *shardidx_release_arg(const struct shardidx *ix);

/* The identity an index file in buf[0..len) was saved with, without
 * loading it: *ident points into buf. Checks magic, version, length and
 * checksum first: 0, -EBADMSG or -EPROTO. */
int shardidx_ident(const void *buf, size_t len, const void **ident, size_t *identlen);

/* ---- checking a member against its tar header (shardidx_check.c) -------- */

/* Does hdr, the 512-byte ustar header block just before entry e's data (for
 * a member with pax or GNU long-name headers, the last header before its
 * data), describe e? Checks the header checksum, the type flag against
 * e->type (REG: '0', NUL or '7'), the size field against e->size (not
 * compared when e->size is past the octal field's reach and the field is
 * octal: a pax header carried it), and the base name of prefix/name
 * against e->name (not compared when the name field is full, 99 bytes or
 * more, or e->name has non-ASCII bytes: a GNU long-name or pax header
 * carried the name then). Returns 0: it does; -EBADMSG: hdr is no valid
 * header (checksum, numeric field); -ESTALE: a valid header of another
 * member; -EINVAL: NULL argument. Any thread; no I/O. */
int shardidx_check_header(const void *hdr, const struct shardidx_entry *e);

#endif
