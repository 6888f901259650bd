/*
 * cachetier_i.h — private to cachetier/.
 */
#ifndef CACHETIER_I_H
#define CACHETIER_I_H

#include <pthread.h>
#include <stdatomic.h>

#include "cachetier.h"

struct cachetier {
	struct backend *be; /* not owned */
	char *dir;          /* CACHE_DIR/v1/<source-hash> */
	int dirfd;          /* O_DIRECTORY fd of dir */
	int metafd;         /* dir/meta */
	int decfd;          /* dir/decoded */
	pthread_mutex_t lock; /* protects objs and each obj refs/state */
	pthread_cond_t cond;  /* signalled when an object leaves OBJ_OPENING */
	struct cachetier_obj *objs; /* open objects, protected by lock */
	atomic_ullong decoded_streams, decoded_bytes, decoded_reused, meta_reads, meta_writes;
	atomic_uint tmp_seq; /* unique temp file names */
};

enum obj_state { OBJ_OPENING, OBJ_READY, OBJ_FAILED };

struct cachetier_obj {
	struct cachetier *ct;
	struct cachetier_obj *next; /* in ct->objs, protected by ct->lock */
	char *name;                 /* "<codec>:<etag>:<key>", the table key */
	int refs;                   /* protected by ct->lock */
	enum obj_state state;       /* protected by ct->lock; waiters use ct->cond */
	int err;                    /* OBJ_FAILED: negative errno */
	int fd;                     /* readable stream, set before READY; -1: read-through */
	char *key;                  /* read-through objects: the backend key */
	char etag[80];              /* read-through objects: the ETag the size belongs to */
	uint64_t size;              /* readable bytes */
	int damage;                 /* 0 or negative errno found while decoding */
	uint64_t damage_off;        /* compressed offset of the damage */
};

/* 64-bit FNV-1a, rendered as 16 hex digits into out[17]. */
void cachetier__hash_hex(const void *data, size_t len, char out[17]);

/* Write buf to name inside dirfd atomically: temp file, fsync, rename,
 * fsync of the directory. Files are created 0600. */
int cachetier__write_atomic(struct cachetier *ct, int dirfd, const char *name, const void *buf,
			    size_t len);

/* Decode object 'info' with codec into a new file in ct->decfd named
 * 'name'; fills o->fd, o->size, o->damage, o->damage_off. Reuses a complete
 * earlier decode when its record matches. */
int cachetier__decode(struct cachetier *ct, const struct backend_objinfo *info,
		      enum cachetier_codec codec, const char *name, struct cachetier_obj *o);

#endif
