/*
 * cachetier — the local SSD/NVMe directory between the backend and readers.
 *
 * Today it does three things:
 *  - makes an object's bytes readable through a file descriptor, so the FUSE
 *    layer can answer reads by splicing from it. A local source needs no
 *    copy: the fd is the source file itself.
 *  - decodes compressed shards (.tar.gz/.tgz, .tar.zst) once into the cache
 *    directory; members are then read with random access from the decoded
 *    copy. A stream that is damaged part-way keeps its valid prefix and
 *    records where the damage is.
 *  - stores small metadata blobs (shard indexes) crash-safely: written to a
 *    temp file, fsynced and renamed.
 * Chunked fills of remote objects, readahead and eviction come with issue 4.
 *
 * On-disk layout (created 0700, files 0600):
 *   CACHE_DIR/v1/<source-hash>/source       the source string, for humans
 *   CACHE_DIR/v1/<source-hash>/meta/<h>     blobs, <h> = hash of the blob name
 *   CACHE_DIR/v1/<source-hash>/decoded/<h>  decoded streams, <h> = hash of key, ETag, codec
 *
 * Threads: all functions may be called from any thread; they may block on
 * disk I/O and, for decoding, on the backend. Errors: 0 or negative errno.
 */
#ifndef CACHETIER_H
#define CACHETIER_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "backend.h"

struct cachetier;
struct cachetier_obj;

struct cachetier_config {
	const char *cache_dir; /* root of the cache directory (created 0700) */
	const char *source;    /* source string; selects the per-source subdirectory */
};

enum cachetier_codec {
	CACHETIER_RAW = 0,  /* the object's bytes as stored */
	CACHETIER_GZIP = 1, /* gzip (also multi-member) decoded */
	CACHETIER_ZSTD = 2, /* zstd (also multi-frame) decoded */
};

struct cachetier_stats {
	uint64_t decoded_streams; /* compressed objects decoded into the cache */
	uint64_t decoded_bytes;   /* bytes written by decoding */
	uint64_t decoded_reused;  /* decoded copies found in the cache and reused */
	uint64_t meta_reads;      /* blobs found */
	uint64_t meta_writes;     /* blobs written */
};

/* Open the cache tier on top of be (not owned; must outlive ct). */
int cachetier_open(struct cachetier **out, const struct cachetier_config *cfg, struct backend *be);
void cachetier_close(struct cachetier *ct); /* accepts NULL */
void cachetier_get_stats(struct cachetier *ct, struct cachetier_stats *st);
/* The per-source directory in use (for logs). */
const char *cachetier_dir(const struct cachetier *ct);

/* Open a readable stream of object 'info' decoded with 'codec'. For a
 * codec other than RAW this decodes the whole object into the cache the
 * first time (blocking; concurrent callers for one object share the work)
 * and reuses the decoded copy afterwards. The returned handle is
 * referenced once; release with cachetier_obj_unref. */
int cachetier_obj_open(struct cachetier *ct, const struct backend_objinfo *info,
		       enum cachetier_codec codec, struct cachetier_obj **out);
void cachetier_obj_ref(struct cachetier_obj *o);
void cachetier_obj_unref(struct cachetier_obj *o); /* accepts NULL */

/* Bytes readable from the stream (the decoded size; for a damaged
 * compressed object, the valid prefix). */
uint64_t cachetier_obj_size(const struct cachetier_obj *o);
/* 0, or the negative errno of damage found while decoding, with the
 * compressed offset where it was found in *off. */
int cachetier_obj_damage(const struct cachetier_obj *o, uint64_t *off);

/* Where [off, off+len) of the stream can be read from: *fd (valid while o is
 * referenced; do not close it) at *fd_off. Returns 0, -EIO when the range
 * lies past cachetier_obj_size, or -ENOTSUP when the bytes are not in a
 * local file (a remote object read through: use cachetier_obj_pread). */
int cachetier_obj_fd(struct cachetier_obj *o, uint64_t off, uint64_t len, int *fd,
		     uint64_t *fd_off);

/* Copy bytes of the stream. Returns bytes read (short only at the end of
 * the stream) or a negative errno. */
ssize_t cachetier_obj_pread(struct cachetier_obj *o, void *buf, size_t len, uint64_t off);

/* Metadata blobs keyed by an arbitrary name. get: *buf is malloc'd (caller
 * frees); -ENOENT when absent. put: atomic (temp file, fsync, rename). */
int cachetier_meta_get(struct cachetier *ct, const char *name, void **buf, size_t *len);
int cachetier_meta_put(struct cachetier *ct, const char *name, const void *buf, size_t len);

#endif
