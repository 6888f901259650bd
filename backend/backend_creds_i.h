/*
 * backend_creds_i.h — private to backend_creds_*.c: what the files of the
 * credentials code share (the source struct, the bounds, secret memory, the
 * field readers and the fetchers of each source). backend_i.h holds what
 * the rest of backend/ may call (backend__creds_*, backend__credsrc_*).
 *
 * backend_creds_secret.c  secret memory, the environment's secrets, registers, curl's blocks
 * backend_creds_file.c    the static sources: environment, credentials and config files
 * backend_creds_json.c    the JSON and XML fields of an answer, and credentials from them
 * backend_creds_http.c    STS web identity, container endpoint, IMDSv2, GCE metadata
 * backend_creds_process.c credential_process, its bound and its process group
 * backend_creds_chain.c   the chain a mount uses, and the refresh thread
 */
#ifndef BACKEND_CREDS_I_H
#define BACKEND_CREDS_I_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "backend_i.h"

/* A credentials file larger than this is not a credentials file. */
#define CREDS_FILE_MAX (1u << 20)

#define CREDS_HTTP_MAX	    (64u << 10) /* any metadata/STS answer is far smaller */
#define CREDS_REFRESH_MAX   900		/* refresh at most 15 minutes before Expiration */
#define CREDS_BACKOFF_MAX   60		/* seconds between failed refreshes, at most */
#define CREDS_PROCESS_MAX_S 3600	/* the longest bound of a credential_process */
#define CREDS_HELPERS_MAX   16		/* helpers running at once that can be killed */

enum src_kind { SRC_STATIC, SRC_WEBID, SRC_PROCESS, SRC_CONTAINER, SRC_IMDS, SRC_GCE };

struct backend_credsrc {
	struct disk_mutex lock; /* DISK_LOCK_BE_CREDS: cur, expires, refresh_at, stop */
	pthread_cond_t cond;
	struct backend_creds cur;
	int64_t expires;    /* epoch seconds; 0: never */
	int64_t refresh_at; /* next refresh attempt (epoch seconds) */
	int stop;
	int thread_started;
	pthread_t thread;
	enum src_kind kind;
	char name[512];		   /* "instance metadata (IMDSv2, role r)": for logs; no secret */
	char label[256];	   /* the source being mounted, for log lines */
	struct backend_logger log; /* where they go */
	/* what a fetch needs (none of it secret) */
	char *url; /* STS endpoint, container URL, IMDS base, GCE host */
	char *role_arn;
	char *session_name;
	char *token_file; /* web identity token, or the container's authorization token file */
	char *process;	  /* credential_process command line */
	char *ca_file;
	char role[256];	 /* IMDS role name, once known */
	long timeout_ms; /* each HTTP request; the whole credential_process */
	int attempts;
	pid_t running; /* protected by lock: the credential_process running now (its group), or 0 */
};

/* ---- secret memory (backend_creds_secret.c) ---- */

/* A zeroed secret buffer of n + 1 bytes (room for a NUL) in a mapping of its
 * own that core dumps leave out. NULL when out of memory. */
char *backend__creds_secret_alloc(size_t n);
/* Wipes, unmaps and clears the registers; accepts NULL. */
void backend__creds_secret_free(char *s);
/* A secret copy of s[0..n), NUL-terminated; NULL when out of memory. */
char *backend__creds_secret_dup(const char *s, size_t n);
/* A new secret copy of the secret variable name into *out (NULL when it is
 * unset or empty). Returns 0 or -ENOMEM. */
int backend__creds_env_secret(const char *name, char **out);

/* ---- the environment and the files (backend_creds_file.c) ---- */

/* The value of variable name, NULL when unset or empty. */
const char *backend__creds_env(const char *name);
/* *dst = a heap copy of s[0..n) (the access key id: not a secret) */
int backend__creds_set_plain(char **dst, const char *s, size_t n);
/* The static keys of variables id_var/secret_var/token_var (token_var may be
 * NULL) into c: 1 when both id and secret are set, 0 when not, -ENOMEM. */
int backend__creds_from_env(struct backend_creds *c, const char *id_var, const char *secret_var,
			    const char *token_var);
/* Move *s forward and *e back over blanks (and a trailing CR). */
void backend__creds_trim(const char **s, const char **e);
/* Read a whole small file into secret memory (it holds secrets of every
 * profile); returns 0 with a NUL-terminated buffer to free with
 * backend__creds_secret_free, -ENOENT when it does not exist, -EINVAL when
 * it is not a regular file of at most CREDS_FILE_MAX bytes
 * (backend__creds_slurp_error says so), other negative errnos. Never blocks
 * on a FIFO or device. */
int backend__creds_slurp(const char *path, char **out, size_t *outlen);
/* What backend__creds_slurp's err means, for messages. */
const char *backend__creds_slurp_error(int err);
/* credential_process of the profile: in the credentials file's [profile]
 * or the config file's [profile NAME] ([default] for "default"). A heap
 * copy in *out, or NULL. Returns 0 or a negative errno. */
int backend__creds_find_process(const char *profile, char **out);

/* ---- fields of an answer (backend_creds_json.c) ---- */

/* The value of "key" in the top-level JSON object js[0..len): a string
 * (escapes decoded, \u as UTF-8, \u0000 refused) or a scalar's text, as a
 * new secret buffer in *out. Returns 0, -ENOENT when absent, -EBADMSG when
 * js is not one well-formed JSON object, -ENOMEM. */
int backend__creds_json_field(const char *js, size_t len, const char *key, char **out);
/* The text of the first <tag>...</tag> in x, entities decoded, as a new
 * secret buffer. Returns 0, -ENOENT or -ENOMEM. */
int backend__creds_xml_field(const char *x, const char *tag, char **out);
/* A credential string goes into a header line: refuse control bytes. */
int backend__creds_header_safe(const char *s);
/* Move id, secret and token (secret memory; token may be NULL or "": none)
 * into out, taking the ones it keeps (set to NULL). Returns 0, -EBADMSG
 * when id or secret is empty or one has control bytes, or -ENOMEM. */
int backend__creds_take(struct backend_creds *out, char **id, char **secret, char **token);
/* Fill out from fields id/secret/token/expiration of a JSON document (the
 * IMDS, container and credential_process shapes). exp: 0 when the document
 * has no expiration. */
int backend__creds_from_json(const char *js, size_t len, const char *token_key,
			     struct backend_creds *out, int64_t *exp, char *why, size_t whycap);

/* ---- the sources that fetch (backend_creds_http.c, backend_creds_process.c) ----
 * Each fills out (and *exp: epoch seconds, 0: never expires) from source s,
 * blocking the calling thread (bounded by s->timeout_ms per request, or for
 * the whole credential_process). Returns 0, or a negative errno with a
 * one-line why (never a secret). */
int backend__creds_fetch_webid(struct backend_credsrc *s, struct backend_creds *out, int64_t *exp,
			       char *why, size_t whycap);
int backend__creds_fetch_container(struct backend_credsrc *s, struct backend_creds *out,
				   int64_t *exp, char *why, size_t whycap);
int backend__creds_fetch_imds(struct backend_credsrc *s, struct backend_creds *out, int64_t *exp,
			      char *why, size_t whycap);
int backend__creds_fetch_gce(struct backend_credsrc *s, struct backend_creds *out, int64_t *exp,
			     char *why, size_t whycap);
int backend__creds_fetch_process(struct backend_credsrc *s, struct backend_creds *out, int64_t *exp,
				 char *why, size_t whycap);

/* ---- small helpers (backend_creds_chain.c) ---- */

/* why = the formatted message (truncated to cap). */
void backend__creds_why(char *why, size_t cap, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#endif
