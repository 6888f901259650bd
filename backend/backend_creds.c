/*
 * backend_creds.c — where object-store credentials, regions and endpoints
 * come from: the environment and the usual files, never argv (docs/design.md
 * section 1).
 *
 * The static sources (backend__creds_aws/_gcs, no network): AWS_ACCESS_KEY_ID
 * + AWS_SECRET_ACCESS_KEY (+ AWS_SESSION_TOKEN), else the [AWS_PROFILE]
 * section ("default" when unset) of AWS_SHARED_CREDENTIALS_FILE or
 * ~/.aws/credentials. GCS: GOOGLE_OAUTH_ACCESS_TOKEN (sent as a bearer
 * token), else HMAC keys from GCS_HMAC_ACCESS_ID + GCS_HMAC_SECRET, else the
 * AWS ones. The whole chain a mount uses, with the sources that ask a
 * service or run a program and hand out credentials that expire, is
 * backend__credsrc_open (the second half of this file).
 *
 * Non-goals: SSO and assume-role profiles (role_arn + source_profile).
 *
 * Secrets never sit in memory a core dump would hold (docs/design.md section 3):
 * - every secret (secret key, session token, bearer token, HMAC secret) lives
 *   in its own anonymous mapping marked MADV_DONTDUMP (and mlock'ed when the
 *   memlock limit allows, so it is not swapped), zeroed before munmap;
 * - the secret variables of the environment are copied there and their
 *   values overwritten in place (backend__creds_scrub_env), so neither
 *   /proc/PID/environ nor the stack holds them; later reads in the same
 *   process get the copy (a variable set again is taken again);
 * - a credentials file is read straight into such a mapping;
 * - libcurl gets allocators that zero its blocks before freeing them
 *   (backend__creds_curl_init; all but its large receive buffers): the
 *   session and bearer tokens go to curl as header lines, which curl copies
 *   into its header list and request buffer;
 * - string functions leave the last bytes they moved in vector registers,
 *   which a core holds too: they are zeroed after a secret was handled
 *   (backend__creds_regs_clear).
 * The access key id is not a secret (it is in every Authorization header)
 * and stays on the heap. What remains: while a request is in flight curl's
 * live buffers (and, over TLS, OpenSSL's) hold the token line.
 * Nothing here logs or formats a secret.
 */
#include <errno.h>
#include <fcntl.h>
#include <malloc.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <stdatomic.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <curl/curl.h>

#include "backend_i.h"

/* A credentials file larger than this is not a credentials file. */
#define CREDS_FILE_MAX (1u << 20)

/* ---- secret memory -------------------------------------------------------- */

/* In front of each secret: the size of its mapping. */
struct secret_hdr {
	size_t maplen;
	size_t pad; /* keeps the secret 16-byte aligned */
};

/* A zeroed secret buffer of n + 1 bytes (room for a NUL) in a mapping of its
 * own that core dumps leave out. NULL when out of memory. */
static char *secret_alloc(size_t n)
{
	long pg = sysconf(_SC_PAGESIZE);
	size_t page = pg > 0 ? (size_t)pg : 4096, len;
	struct secret_hdr *h;

	if (n > CREDS_FILE_MAX)
		return NULL;
	len = (sizeof(*h) + n + 1 + page - 1) / page * page;
	h = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (h == MAP_FAILED)
		return NULL;
	/* Both are best effort: MADV_DONTDUMP exists since Linux 3.4, and
	 * RLIMIT_MEMLOCK may be 0. The buffer is wiped before munmap anyway. */
	(void)madvise(h, len, MADV_DONTDUMP);
	(void)mlock(h, len);
	h->maplen = len;
	return (char *)(h + 1);
}

static void secret_free(char *s)
{
	struct secret_hdr *h;
	size_t len;

	if (!s)
		return;
	h = (struct secret_hdr *)s - 1;
	len = h->maplen;
	explicit_bzero(h, len);
	munlock(h, len);
	munmap(h, len);
	backend__creds_regs_clear();
}

static char *secret_dup(const char *s, size_t n)
{
	char *d = secret_alloc(n);

	if (d)
		memcpy(d, s, n); /* the NUL is already there */
	return d;
}

void backend__creds_clear(struct backend_creds *c)
{
	if (!c)
		return;
	free(c->access_key);
	secret_free(c->secret_key);
	secret_free(c->session_token);
	secret_free(c->bearer);
	memset(c, 0, sizeof(*c));
}

/* ---- the environment -------------------------------------------------------- */

/* The secret variables, and the copy taken of each (NULL: none). A variable
 * whose value is "" after a scrub is served from its copy; one that was set
 * again (not "") is taken again; one that was unset drops its copy. */
static struct env_secret {
	const char *name;
	char *copy; /* secret memory; protected by env_lock */
} env_secrets[] = {
    {"AWS_SECRET_ACCESS_KEY", NULL},
    {"AWS_SESSION_TOKEN", NULL},
    {"GCS_HMAC_SECRET", NULL},
    {"GOOGLE_OAUTH_ACCESS_TOKEN", NULL},
    {"AWS_CONTAINER_AUTHORIZATION_TOKEN", NULL},
};
static pthread_mutex_t env_lock = PTHREAD_MUTEX_INITIALIZER;

#define ENV_SECRETS (sizeof(env_secrets) / sizeof(env_secrets[0]))

static int scrub_locked(struct env_secret *e)
{
	char *v = getenv(e->name);
	size_t n;

	if (!v) {
		secret_free(e->copy);
		e->copy = NULL;
		return 0;
	}
	n = strlen(v);
	if (n == 0)
		return 0;
	secret_free(e->copy);
	e->copy = secret_dup(v, n);
	if (!e->copy)
		return -ENOMEM;
	/* in place: the string is the one /proc/PID/environ shows (or a copy
	 * setenv made); the variable stays, with an empty value */
	explicit_bzero(v, n);
	return 0;
}

int backend__creds_scrub_env(void)
{
	int err = 0;

	pthread_mutex_lock(&env_lock);
	for (size_t i = 0; i < ENV_SECRETS; i++) {
		int e = scrub_locked(&env_secrets[i]);

		if (e < 0)
			err = e;
	}
	pthread_mutex_unlock(&env_lock);
	return err;
}

/* A new secret copy of the secret variable name into *out (NULL when it is
 * unset or empty). Returns 0 or -ENOMEM. */
static int env_secret(const char *name, char **out)
{
	int err = 0;

	*out = NULL;
	pthread_mutex_lock(&env_lock);
	for (size_t i = 0; i < ENV_SECRETS; i++) {
		struct env_secret *e = &env_secrets[i];

		if (strcmp(e->name, name) != 0)
			continue;
		err = scrub_locked(e);
		if (!err && e->copy && e->copy[0] && !(*out = secret_dup(e->copy, strlen(e->copy))))
			err = -ENOMEM;
		break;
	}
	pthread_mutex_unlock(&env_lock);
	return err;
}

/* ---- vector registers ------------------------------------------------------- */

/* A core holds every thread's registers (NT_PRFPREG, NT_X86_XSTATE), and
 * glibc's memcpy/strlen leave the last bytes they moved in vector registers
 * that nothing else may touch for a long time: a copied header line with a
 * token stays there after its memory is wiped. x86-64 only; elsewhere this
 * does nothing. */
#if defined(__x86_64__) && defined(__GNUC__)
#define XMM_0_15                                                                                   \
	"xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", "xmm9", "xmm10",   \
	    "xmm11", "xmm12", "xmm13", "xmm14", "xmm15"

__attribute__((target("avx512f"))) static void regs_clear_avx512(void)
{
	/* vzeroall clears all of zmm0-15; zmm16-31 (which glibc's EVEX string
	 * functions use) need their own */
	__asm__ volatile("vzeroall\n\t"
			 "vpxord %%zmm16, %%zmm16, %%zmm16\n\t"
			 "vpxord %%zmm17, %%zmm17, %%zmm17\n\t"
			 "vpxord %%zmm18, %%zmm18, %%zmm18\n\t"
			 "vpxord %%zmm19, %%zmm19, %%zmm19\n\t"
			 "vpxord %%zmm20, %%zmm20, %%zmm20\n\t"
			 "vpxord %%zmm21, %%zmm21, %%zmm21\n\t"
			 "vpxord %%zmm22, %%zmm22, %%zmm22\n\t"
			 "vpxord %%zmm23, %%zmm23, %%zmm23\n\t"
			 "vpxord %%zmm24, %%zmm24, %%zmm24\n\t"
			 "vpxord %%zmm25, %%zmm25, %%zmm25\n\t"
			 "vpxord %%zmm26, %%zmm26, %%zmm26\n\t"
			 "vpxord %%zmm27, %%zmm27, %%zmm27\n\t"
			 "vpxord %%zmm28, %%zmm28, %%zmm28\n\t"
			 "vpxord %%zmm29, %%zmm29, %%zmm29\n\t"
			 "vpxord %%zmm30, %%zmm30, %%zmm30\n\t"
			 "vpxord %%zmm31, %%zmm31, %%zmm31" ::
			     : XMM_0_15, "xmm16", "xmm17", "xmm18", "xmm19", "xmm20", "xmm21",
			       "xmm22", "xmm23", "xmm24", "xmm25", "xmm26", "xmm27", "xmm28",
			       "xmm29", "xmm30", "xmm31");
}

__attribute__((target("avx"))) static void regs_clear_avx(void)
{
	__asm__ volatile("vzeroall" ::: XMM_0_15);
}

static void regs_clear_sse(void)
{
	__asm__ volatile("pxor %%xmm0, %%xmm0\n\tpxor %%xmm1, %%xmm1\n\t"
			 "pxor %%xmm2, %%xmm2\n\tpxor %%xmm3, %%xmm3\n\t"
			 "pxor %%xmm4, %%xmm4\n\tpxor %%xmm5, %%xmm5\n\t"
			 "pxor %%xmm6, %%xmm6\n\tpxor %%xmm7, %%xmm7\n\t"
			 "pxor %%xmm8, %%xmm8\n\tpxor %%xmm9, %%xmm9\n\t"
			 "pxor %%xmm10, %%xmm10\n\tpxor %%xmm11, %%xmm11\n\t"
			 "pxor %%xmm12, %%xmm12\n\tpxor %%xmm13, %%xmm13\n\t"
			 "pxor %%xmm14, %%xmm14\n\tpxor %%xmm15, %%xmm15" ::
			     : XMM_0_15);
}

void backend__creds_regs_clear(void)
{
	/* 0 sse, 1 avx, 2 avx512f, -1 not known yet (threads that race store
	 * the same value) */
	static int kind_cache = -1;
	int kind = __atomic_load_n(&kind_cache, __ATOMIC_RELAXED);

	if (kind < 0) {
		__builtin_cpu_init();
		if (__builtin_cpu_supports("avx512f"))
			kind = 2;
		else
			kind = __builtin_cpu_supports("avx") ? 1 : 0;
		__atomic_store_n(&kind_cache, kind, __ATOMIC_RELAXED);
	}
	if (kind == 2)
		regs_clear_avx512();
	else if (kind == 1)
		regs_clear_avx();
	else
		regs_clear_sse();
}
#else
void backend__creds_regs_clear(void)
{
}
#endif

/* ---- libcurl's memory ----------------------------------------------------- */

/* Header lines, the request being built and (over TLS) its copy in the
 * upload buffer (64 KiB) are far smaller than this. Larger blocks are curl's
 * receive buffers (CURLOPT_BUFFERSIZE, 512 KiB in backend_io.c): response
 * bytes, never credentials, and mostly untouched pages that wiping would
 * fault in for every transfer. */
#define CURL_WIPE_MAX (256u << 10)

static void wipe_free(void *p)
{
	size_t n;

	if (!p)
		return;
	n = malloc_usable_size(p);
	if (n <= CURL_WIPE_MAX)
		explicit_bzero(p, n);
	free(p);
	backend__creds_regs_clear();
}

static void *wipe_realloc(void *p, size_t n)
{
	void *q;
	size_t old;

	if (!p)
		return malloc(n ? n : 1);
	q = malloc(n ? n : 1);
	if (!q)
		return NULL;
	old = malloc_usable_size(p);
	memcpy(q, p, old < n ? old : n);
	wipe_free(p);
	return q;
}

static char *wipe_strdup(const char *s)
{
	size_t n = strlen(s) + 1;
	char *d = malloc(n);

	if (d)
		memcpy(d, s, n);
	return d;
}

static void *plain_malloc(size_t n)
{
	return malloc(n);
}

static void *plain_calloc(size_t n, size_t size)
{
	return calloc(n, size);
}

static pthread_once_t curl_once = PTHREAD_ONCE_INIT;
static int curl_result = -EIO;

static void curl_init_once(void)
{
	/* the first curl_global_init* of the process sets the allocators; a later
	 * curl_global_init (backend_io.c) only counts */
	if (curl_global_init_mem(CURL_GLOBAL_DEFAULT, plain_malloc, wipe_free, wipe_realloc,
				 wipe_strdup, plain_calloc) == CURLE_OK)
		curl_result = 0;
}

int backend__creds_curl_init(void)
{
	pthread_once(&curl_once, curl_init_once);
	return curl_result;
}

void backend__curl_harden(void *e, const char *ca_file)
{
	curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(e, CURLOPT_PROTOCOLS_STR, "http,https");
	curl_easy_setopt(e, CURLOPT_FOLLOWLOCATION, 0L);
	curl_easy_setopt(e, CURLOPT_SSL_VERIFYPEER, 1L);
	curl_easy_setopt(e, CURLOPT_SSL_VERIFYHOST, 2L);
	if (ca_file)
		curl_easy_setopt(e, CURLOPT_CAINFO, ca_file);
}

/* ---- sources ---------------------------------------------------------------- */

static const char *env(const char *name)
{
	const char *v = getenv(name);

	return v && *v ? v : NULL;
}

/* *dst = a heap copy of s[0..n) (the access key id: not a secret) */
static int set_plain(char **dst, const char *s, size_t n)
{
	char *d = strndup(s, n);

	if (!d)
		return -ENOMEM;
	free(*dst);
	*dst = d;
	return 0;
}

/* *dst = a secret copy of s[0..n) */
static int set_secret(char **dst, const char *s, size_t n)
{
	char *d = secret_dup(s, n);

	if (!d)
		return -ENOMEM;
	secret_free(*dst);
	*dst = d;
	return 0;
}

static int from_env(struct backend_creds *c, const char *id_var, const char *secret_var,
		    const char *token_var)
{
	const char *id = env(id_var);
	char *secret = NULL, *token = NULL;
	int err;

	err = env_secret(secret_var, &secret);
	if (!err && token_var)
		err = env_secret(token_var, &token);
	if (err < 0 || !id || !secret) {
		secret_free(secret);
		secret_free(token);
		return err;
	}
	err = set_plain(&c->access_key, id, strlen(id));
	if (err < 0) {
		secret_free(secret);
		secret_free(token);
		backend__creds_clear(c);
		return err;
	}
	secret_free(c->secret_key);
	c->secret_key = secret;
	secret_free(c->session_token);
	c->session_token = token;
	return 1;
}

static void trim(const char **s, const char **e)
{
	while (*s < *e && (**s == ' ' || **s == '\t'))
		(*s)++;
	while (*e > *s && ((*e)[-1] == ' ' || (*e)[-1] == '\t' || (*e)[-1] == '\r'))
		(*e)--;
}

/* Read a whole small file into secret memory (it holds secrets of every
 * profile); returns 0 with a NUL-terminated buffer to free with
 * secret_free, -ENOENT when it does not exist, -EINVAL when it is not a
 * regular file of at most CREDS_FILE_MAX bytes (slurp_error says so),
 * other negative errnos. Never blocks on a FIFO or device. */
static int slurp(const char *path, char **out, size_t *outlen)
{
	struct stat st;
	size_t got = 0;
	char *buf;
	/* O_NONBLOCK: a FIFO in place of the file must not block the open (it
	 * is refused below); a regular file's reads ignore the flag */
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);

	if (fd < 0)
		return -errno;
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || (uint64_t)st.st_size > CREDS_FILE_MAX) {
		close(fd);
		return -EINVAL;
	}
	buf = secret_alloc((size_t)st.st_size);
	if (!buf) {
		close(fd);
		return -ENOMEM;
	}
	while (got < (size_t)st.st_size) {
		ssize_t n = read(fd, buf + got, (size_t)st.st_size - got);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			break;
		got += (size_t)n;
	}
	close(fd);
	buf[got] = '\0';
	*out = buf;
	*outlen = got;
	return 0;
}

/* What slurp's err means, for messages. */
static const char *slurp_error(int err)
{
	return err == -EINVAL ? "not a regular file of at most 1 MiB" : strerror(-err);
}

/* Called for every "key = value" line with a value in the section an INI
 * walk looks at: 0 goes on, anything else stops the walk and is its result. */
typedef int (*ini_cb)(void *arg, const char *k, size_t kn, const char *v, size_t vn);

/* Walk [section] of the INI file path (the AWS credentials and config
 * files). The file is read into protected memory: it may hold secrets.
 * Returns cb's non-zero result, 0 at the end, or a negative errno
 * (-ENOENT: no file). */
static int ini_walk(const char *path, const char *section, ini_cb cb, void *arg)
{
	char *buf = NULL;
	size_t len = 0;
	const char *p, *end;
	int in_section = 0, err;

	err = slurp(path, &buf, &len);
	if (err < 0)
		return err;
	p = buf;
	end = buf + len;
	while (p < end && err == 0) {
		const char *nl = memchr(p, '\n', (size_t)(end - p));
		const char *e = nl ? nl : end, *s = p, *eq, *ks, *ke, *vs, *ve;

		p = nl ? nl + 1 : end;
		trim(&s, &e);
		if (s == e || *s == '#' || *s == ';')
			continue;
		if (*s == '[') {
			const char *ns = s + 1, *ne = e;

			if (ne[-1] != ']')
				continue;
			ne--;
			trim(&ns, &ne);
			in_section = (size_t)(ne - ns) == strlen(section) &&
				     memcmp(ns, section, (size_t)(ne - ns)) == 0;
			continue;
		}
		if (!in_section || !(eq = memchr(s, '=', (size_t)(e - s))))
			continue;
		ks = s;
		ke = eq;
		vs = eq + 1;
		ve = e;
		trim(&ks, &ke);
		trim(&vs, &ve);
		if (ve > vs)
			err = cb(arg, ks, (size_t)(ke - ks), vs, (size_t)(ve - vs));
	}
	secret_free(buf);
	return err;
}

static int key_is(const char *k, size_t kn, const char *name)
{
	return kn == strlen(name) && memcmp(k, name, kn) == 0;
}

static int creds_file_cb(void *arg, const char *k, size_t kn, const char *v, size_t vn)
{
	struct backend_creds *c = arg;

	if (key_is(k, kn, "aws_access_key_id"))
		return set_plain(&c->access_key, v, vn);
	if (key_is(k, kn, "aws_secret_access_key"))
		return set_secret(&c->secret_key, v, vn);
	if (key_is(k, kn, "aws_session_token"))
		return set_secret(&c->session_token, v, vn);
	return 0;
}

int backend__creds_file(struct backend_creds *c, const char *path, const char *profile)
{
	int err = ini_walk(path, profile, creds_file_cb, c);

	/* a section absent or incomplete gives no credentials from this file */
	if (err < 0 || !c->access_key || !c->secret_key)
		backend__creds_clear(c);
	return err < 0 ? err : 0;
}

int backend__creds_aws(struct backend_creds *c)
{
	char path[4096];
	const char *file = env("AWS_SHARED_CREDENTIALS_FILE");
	const char *profile = env("AWS_PROFILE");
	int err;

	memset(c, 0, sizeof(*c));
	err = from_env(c, "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN");
	if (err != 0)
		return err < 0 ? err : 0;
	if (!file) {
		const char *home = env("HOME");

		if (!home)
			return 0;
		if (snprintf(path, sizeof(path), "%s/.aws/credentials", home) >= (int)sizeof(path))
			return 0;
		file = path;
	}
	err = backend__creds_file(c, file, profile ? profile : "default");
	if (err == -ENOENT)
		err = 0;
	return err;
}

int backend__creds_gcs(struct backend_creds *c)
{
	char *tok = NULL;
	int err;

	memset(c, 0, sizeof(*c));
	err = env_secret("GOOGLE_OAUTH_ACCESS_TOKEN", &tok);
	if (err < 0)
		return err;
	if (tok) {
		/* a header value: refuse anything that could split the header */
		for (const char *q = tok; *q; q++)
			if ((unsigned char)*q < 0x20 || *q == 0x7f) {
				secret_free(tok);
				return -EINVAL;
			}
		c->bearer = tok;
		return 0;
	}
	err = from_env(c, "GCS_HMAC_ACCESS_ID", "GCS_HMAC_SECRET", NULL);
	if (err != 0)
		return err < 0 ? err : 0;
	return backend__creds_aws(c);
}

void backend__aws_region(char *buf, size_t cap)
{
	const char *r = env("AWS_REGION");

	if (!r)
		r = env("AWS_DEFAULT_REGION");
	snprintf(buf, cap, "%s", r ? r : "us-east-1");
}

/* ---- temporary credentials: the rest of the chain ---------------------------
 *
 * The AWS default chain in botocore's order: the environment, web identity
 * (STS AssumeRoleWithWebIdentity), the shared credentials file, the
 * profile's credential_process, the container endpoint (ECS/EKS), the EC2
 * instance metadata service (IMDSv2). GCS: GOOGLE_OAUTH_ACCESS_TOKEN, HMAC
 * keys, the AWS static keys, then the GCE metadata server.
 *
 * A source that hands out credentials with an Expiration gets a refresh
 * thread (struct backend_credsrc): it fetches new credentials well before
 * they expire (half their lifetime, at most 15 minutes before), with a
 * plain blocking curl easy handle (never on the I/O loop), and swaps them
 * in under the source's lock. The sign callback copies what it needs into
 * the request's header lines under the same lock, so a request signed with
 * the old credentials keeps them and the old buffers are freed only after
 * the swap. A failed refresh is logged and retried (1 s doubling to 60 s);
 * signing fails with -EACCES only once the current credentials have
 * expired. Response bodies, tokens and request bodies that carry a token
 * live in secret memory like everything above.
 */

#define CREDS_HTTP_MAX	    (64u << 10) /* any metadata/STS answer is far smaller */
#define CREDS_REFRESH_MAX   900		/* refresh at most 15 minutes before Expiration */
#define CREDS_BACKOFF_MAX   60		/* seconds between failed refreshes, at most */
#define CREDS_PROCESS_MAX_S 3600	/* the longest bound of a credential_process */
#define CREDS_HELPERS_MAX   16		/* helpers running at once that can be killed */

enum src_kind { SRC_STATIC, SRC_WEBID, SRC_PROCESS, SRC_CONTAINER, SRC_IMDS, SRC_GCE };

struct backend_credsrc {
	pthread_mutex_t lock; /* protects cur, expires, refresh_at, stop; leaf lock */
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

/* ---- helper processes ---------------------------------------------------------
 * Every credential_process runs in a process group of its own, listed here
 * while it runs, so that backend_kill_helpers (from a signal handler) and
 * a timeout can kill it with everything it started. A slot is cleared
 * before its process is reaped, so no slot ever names a reused pid. */

static _Atomic pid_t helpers[CREDS_HELPERS_MAX];

static void helper_add(pid_t pg)
{
	for (int i = 0; i < CREDS_HELPERS_MAX; i++) {
		pid_t zero = 0;

		if (atomic_compare_exchange_strong(&helpers[i], &zero, pg))
			return;
	}
	/* more helpers than slots at once: cannot happen (one per source) */
}

static void helper_del(pid_t pg)
{
	for (int i = 0; i < CREDS_HELPERS_MAX; i++) {
		pid_t cur = pg;

		if (atomic_compare_exchange_strong(&helpers[i], &cur, 0))
			return;
	}
}

void backend_kill_helpers(void)
{
	int saved = errno;

	for (int i = 0; i < CREDS_HELPERS_MAX; i++) {
		pid_t pg = atomic_load(&helpers[i]);

		if (pg > 0)
			kill(-pg, SIGKILL);
	}
	errno = saved;
}

/* ---- small helpers ---------------------------------------------------------- */

static void why_set(char *why, size_t cap, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void why_set(char *why, size_t cap, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(why, cap, fmt, ap);
	va_end(ap);
}

static void utc_text(int64_t t, char *buf, size_t cap)
{
	struct tm tm;
	time_t tt = (time_t)t;

	if (!gmtime_r(&tt, &tm) || strftime(buf, cap, "%Y-%m-%dT%H:%M:%SZ", &tm) == 0)
		snprintf(buf, cap, "%lld", (long long)t);
}

/* Seconds (a decimal, fractions allowed) from variable name, in ms; dflt
 * when unset or malformed. */
static long env_ms(const char *name, long dflt)
{
	const char *v = env(name);
	char *end;
	double d;

	if (!v)
		return dflt;
	errno = 0;
	d = strtod(v, &end);
	if (errno || end == v || *end || d <= 0 || d > 3600)
		return dflt;
	return (long)(d * 1000);
}

static int env_true(const char *name)
{
	const char *v = env(name);

	return v && (strcasecmp(v, "true") == 0 || strcmp(v, "1") == 0);
}

/* ---- HTTP (blocking, on the calling thread) ----------------------------------- */

struct http_call {
	const char *method; /* "GET", "PUT", "POST" */
	const char *url;
	struct curl_slist *hdrs;
	const char *body; /* POST body, or NULL */
	size_t bodylen;
	long timeout_ms;
	const char *ca_file;
	int no_proxy; /* metadata services: never through a proxy */
	/* results */
	long status;
	int google; /* the answer had Metadata-Flavor: Google */
	char *resp; /* secret memory of CREDS_HTTP_MAX + 1 bytes, NUL-terminated */
	size_t resplen;
	int toolong;
};

static size_t http_write(char *d, size_t sz, size_t n, void *arg)
{
	struct http_call *c = arg;
	size_t len = sz * n;

	if (len > CREDS_HTTP_MAX - c->resplen) {
		c->toolong = 1;
		return 0;
	}
	memcpy(c->resp + c->resplen, d, len);
	c->resplen += len;
	c->resp[c->resplen] = '\0';
	backend__creds_regs_clear();
	return len;
}

static size_t http_header(char *d, size_t sz, size_t n, void *arg)
{
	struct http_call *c = arg;
	size_t len = sz * n;
	static const char want[] = "metadata-flavor:";

	if (len > sizeof(want) - 1 && strncasecmp(d, want, sizeof(want) - 1) == 0) {
		const char *v = d + sizeof(want) - 1, *e = d + len;

		trim(&v, &e);
		while (e > v && (e[-1] == '\n' || e[-1] == '\r'))
			e--;
		c->google = (size_t)(e - v) == 6 && memcmp(v, "Google", 6) == 0;
	}
	return len;
}

/* Perform c. Returns 0 with c->status and c->resp (free with secret_free;
 * also on error), or -EIO / -ETIMEDOUT / -EMSGSIZE / -ENOMEM with why. */
static int http_perform(struct http_call *c, char *why, size_t whycap)
{
	CURL *e;
	CURLcode rc;
	int err = 0;

	c->status = 0;
	c->resplen = 0;
	c->google = 0;
	c->toolong = 0;
	c->resp = secret_alloc(CREDS_HTTP_MAX);
	e = curl_easy_init();
	if (!c->resp || !e) {
		if (e)
			curl_easy_cleanup(e);
		why_set(why, whycap, "out of memory");
		return -ENOMEM;
	}
	curl_easy_setopt(e, CURLOPT_URL, c->url);
	backend__curl_harden(e, c->ca_file);
	if (c->no_proxy)
		curl_easy_setopt(e, CURLOPT_NOPROXY, "*");
	curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, c->timeout_ms);
	curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS, c->timeout_ms);
	curl_easy_setopt(e, CURLOPT_HTTPHEADER, c->hdrs);
	curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, http_write);
	curl_easy_setopt(e, CURLOPT_WRITEDATA, c);
	curl_easy_setopt(e, CURLOPT_HEADERFUNCTION, http_header);
	curl_easy_setopt(e, CURLOPT_HEADERDATA, c);
	if (strcmp(c->method, "POST") == 0) {
		curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE, (long)c->bodylen);
		curl_easy_setopt(e, CURLOPT_POSTFIELDS, c->body ? c->body : "");
	} else if (strcmp(c->method, "PUT") == 0) {
		curl_easy_setopt(e, CURLOPT_CUSTOMREQUEST, "PUT");
		curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE, 0L);
		curl_easy_setopt(e, CURLOPT_POSTFIELDS, "");
	}
	rc = curl_easy_perform(e);
	if (rc == CURLE_OK) {
		curl_easy_getinfo(e, CURLINFO_RESPONSE_CODE, &c->status);
	} else if (c->toolong) {
		why_set(why, whycap, "answer larger than %u bytes", CREDS_HTTP_MAX);
		err = -EMSGSIZE;
	} else if (rc == CURLE_OPERATION_TIMEDOUT) {
		why_set(why, whycap, "timed out: no answer within %.3g s",
			(double)c->timeout_ms / 1000);
		err = -ETIMEDOUT;
	} else {
		why_set(why, whycap, "%s", curl_easy_strerror(rc));
		err = -EIO;
	}
	curl_easy_cleanup(e);
	backend__creds_regs_clear();
	return err;
}

/* One call to a metadata service, never through a proxy: up to
 * s->attempts tries of method on url until an answer (until: that status;
 * 0: any below 500). c->ca_file is the caller's. On a transport error,
 * with name_url, why starts with the url. Returns http_perform's result. */
static int meta_call(struct backend_credsrc *s, struct http_call *c, const char *method,
		     const char *url, struct curl_slist *h, long until, int name_url, char *why,
		     size_t whycap)
{
	int err = 0;

	c->method = method;
	c->url = url;
	c->hdrs = h;
	c->timeout_ms = s->timeout_ms;
	c->no_proxy = 1;
	for (int i = 0; i < s->attempts; i++) {
		secret_free(c->resp);
		c->resp = NULL;
		err = http_perform(c, why, whycap);
		if (err == 0 && (until ? c->status == until : c->status < 500))
			break;
	}
	if (err < 0 && name_url) {
		char tmp[256];

		snprintf(tmp, sizeof(tmp), "%s", why);
		why_set(why, whycap, "%s: %s", url, tmp);
	}
	return err;
}

/* A header line "name: value" with a secret value, made in secret memory;
 * curl copies it (and wipes its copy when freeing it). */
static int slist_secret(struct curl_slist **h, const char *name, const char *value)
{
	size_t n = strlen(name) + 2 + strlen(value);
	char *line = secret_alloc(n);
	struct curl_slist *l;

	if (!line)
		return -ENOMEM;
	snprintf(line, n + 1, "%s: %s", name, value);
	l = curl_slist_append(*h, line);
	secret_free(line);
	if (!l)
		return -ENOMEM;
	*h = l;
	return 0;
}

/* ---- JSON and XML fields ------------------------------------------------------ */

static const char *json_ws(const char *p, const char *e)
{
	while (p < e && (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r'))
		p++;
	return p;
}

/* Skip a JSON string starting at p ('"'); returns the byte after it or NULL. */
static const char *json_skip_str(const char *p, const char *e)
{
	for (p++; p < e; p++) {
		if (*p == '\\')
			p++;
		else if (*p == '"')
			return p + 1;
	}
	return NULL;
}

/* Skip any JSON value; NULL when malformed. Bounded nesting. */
static const char *json_skip(const char *p, const char *e)
{
	int depth = 0;

	p = json_ws(p, e);
	do {
		if (p >= e)
			return NULL;
		if (*p == '"') {
			p = json_skip_str(p, e);
			if (!p)
				return NULL;
		} else if (*p == '{' || *p == '[') {
			if (++depth > 64)
				return NULL;
			p++;
		} else if (*p == '}' || *p == ']') {
			if (--depth < 0)
				return NULL;
			p++;
		} else {
			p++;
		}
		if (depth > 0)
			p = json_ws(p, e);
	} while (depth > 0);
	/* a scalar: run to the next delimiter */
	while (p < e && *p != ',' && *p != '}' && *p != ']' && *p != ' ' && *p != '\n' &&
	       *p != '\r' && *p != '\t')
		p++;
	return p;
}

/* The value of "key" in the top-level JSON object js[0..len): a string
 * (escapes decoded; \u only for ASCII) or a scalar's text, as a new secret
 * buffer in *out. Returns 0, -ENOENT when absent, -EBADMSG when js is not
 * a JSON object, -ENOMEM. */
static int json_field(const char *js, size_t len, const char *key, char **out)
{
	const char *p = js, *e = js + len;
	size_t kl = strlen(key);

	*out = NULL;
	p = json_ws(p, e);
	if (p >= e || *p != '{')
		return -EBADMSG;
	p = json_ws(p + 1, e);
	if (p < e && *p == '}')
		return -ENOENT;
	while (p < e) {
		const char *ks, *ke, *vs, *ve;
		int match;

		if (*p != '"')
			return -EBADMSG;
		ks = p + 1;
		ke = json_skip_str(p, e);
		if (!ke)
			return -EBADMSG;
		match = (size_t)(ke - 1 - ks) == kl && memcmp(ks, key, kl) == 0;
		p = json_ws(ke, e);
		if (p >= e || *p != ':')
			return -EBADMSG;
		vs = json_ws(p + 1, e);
		ve = json_skip(vs, e);
		if (!ve || ve == vs)
			return -EBADMSG;
		if (match) {
			char *d = secret_alloc((size_t)(ve - vs));
			size_t n = 0;

			if (!d)
				return -ENOMEM;
			if (*vs != '"') {
				memcpy(d, vs, (size_t)(ve - vs));
				*out = d;
				return 0;
			}
			for (const char *q = vs + 1; q < ve - 1; q++) {
				char ch = *q;

				if (ch == '\\') {
					q++;
					switch (*q) {
					case 'n':
						ch = '\n';
						break;
					case 't':
						ch = '\t';
						break;
					case 'r':
						ch = '\r';
						break;
					case 'b':
						ch = '\b';
						break;
					case 'f':
						ch = '\f';
						break;
					case 'u': {
						unsigned v = 0;

						if (ve - 1 - q < 5) {
							secret_free(d);
							return -EBADMSG;
						}
						for (int i = 1; i <= 4; i++) {
							char h = q[i];

							v <<= 4;
							if (h >= '0' && h <= '9')
								v |= (unsigned)(h - '0');
							else if ((h | 0x20) >= 'a' &&
								 (h | 0x20) <= 'f')
								v |= (unsigned)((h | 0x20) - 'a' +
										10);
							else
								v = 0x10000;
						}
						if (v == 0 || v > 0x7f) {
							secret_free(d);
							return -EBADMSG;
						}
						ch = (char)v;
						q += 4;
						break;
					}
					default:
						ch = *q;
						break;
					}
				}
				d[n++] = ch;
			}
			d[n] = '\0';
			*out = d;
			return 0;
		}
		p = json_ws(ve, e);
		if (p < e && *p == ',') {
			p = json_ws(p + 1, e);
			continue;
		}
		if (p < e && *p == '}')
			return -ENOENT;
		return -EBADMSG;
	}
	return -EBADMSG;
}

/* The text of the first <tag>...</tag> in x, entities decoded, as a new
 * secret buffer. Returns 0, -ENOENT or -ENOMEM. */
static int xml_field(const char *x, const char *tag, char **out)
{
	char open[64], close[64];
	const char *s, *e;
	char *d;
	size_t n = 0;

	*out = NULL;
	snprintf(open, sizeof(open), "<%s>", tag);
	snprintf(close, sizeof(close), "</%s>", tag);
	s = strstr(x, open);
	if (!s)
		return -ENOENT;
	s += strlen(open);
	e = strstr(s, close);
	if (!e)
		return -ENOENT;
	d = secret_alloc((size_t)(e - s));
	if (!d)
		return -ENOMEM;
	for (const char *q = s; q < e; q++) {
		static const struct {
			const char *ent;
			char ch;
		} ents[] = {{"&amp;", '&'},
			    {"&lt;", '<'},
			    {"&gt;", '>'},
			    {"&quot;", '"'},
			    {"&apos;", '\''}};
		size_t i, l = 0;

		for (i = 0; *q == '&' && i < sizeof(ents) / sizeof(ents[0]); i++) {
			l = strlen(ents[i].ent);
			if ((size_t)(e - q) >= l && memcmp(q, ents[i].ent, l) == 0)
				break;
		}
		if (*q == '&' && i < sizeof(ents) / sizeof(ents[0])) {
			d[n++] = ents[i].ch;
			q += l - 1;
		} else {
			d[n++] = *q;
		}
	}
	d[n] = '\0';
	*out = d;
	return 0;
}

/* A credential string goes into a header line: refuse control bytes. */
static int header_safe(const char *s)
{
	for (; *s; s++)
		if ((unsigned char)*s < 0x20 || *s == 0x7f)
			return 0;
	return 1;
}

/* Move id, secret and token (secret memory; token may be NULL or "": none)
 * into out, taking the ones it keeps (set to NULL). Returns 0, -EBADMSG
 * when id or secret is empty or one has control bytes, or -ENOMEM. */
static int creds_take(struct backend_creds *out, char **id, char **secret, char **token)
{
	int err;

	if (!(*id)[0] || !(*secret)[0] || !header_safe(*id) || !header_safe(*secret) ||
	    (*token && !header_safe(*token)))
		return -EBADMSG;
	err = set_plain(&out->access_key, *id, strlen(*id));
	if (err < 0)
		return err;
	out->secret_key = *secret;
	*secret = NULL;
	if (*token && (*token)[0]) {
		out->session_token = *token;
		*token = NULL;
	}
	return 0;
}

/* Fill out from fields id/secret/token/expiration of a JSON document (the
 * IMDS, container and credential_process shapes). exp: 0 when the document
 * has no expiration. */
static int creds_from_json(const char *js, size_t len, const char *token_key,
			   struct backend_creds *out, int64_t *exp, char *why, size_t whycap)
{
	char *id = NULL, *secret = NULL, *token = NULL, *expiration = NULL;
	int err;

	memset(out, 0, sizeof(*out));
	*exp = 0;
	err = json_field(js, len, "AccessKeyId", &id);
	if (err == 0)
		err = json_field(js, len, "SecretAccessKey", &secret);
	if (err == -EBADMSG) {
		why_set(why, whycap, "the answer is not a JSON object");
		goto out;
	}
	if (err < 0) {
		why_set(why, whycap, "the answer has no AccessKeyId/SecretAccessKey");
		err = err == -ENOMEM ? err : -EBADMSG;
		goto out;
	}
	err = json_field(js, len, token_key, &token);
	if (err < 0 && err != -ENOENT)
		goto out;
	err = json_field(js, len, "Expiration", &expiration);
	if (err == 0 && backend__iso8601_parse(expiration, strlen(expiration), exp) < 0) {
		why_set(why, whycap, "the answer's Expiration is not a date");
		err = -EBADMSG;
		goto out;
	}
	if (err < 0 && err != -ENOENT)
		goto out;
	err = creds_take(out, &id, &secret, &token);
	if (err == -EBADMSG)
		why_set(why, whycap, "the answer's credentials are empty or malformed");
out:
	secret_free(id);
	secret_free(secret);
	secret_free(token);
	secret_free(expiration);
	return err;
}

/* ---- the sources that fetch ----------------------------------------------- */

/* Append a header line without secrets to *h: 0, or -ENOMEM with *h as it was. */
static int slist_plain(struct curl_slist **h, const char *line)
{
	struct curl_slist *l = curl_slist_append(*h, line);

	if (!l)
		return -ENOMEM;
	*h = l;
	return 0;
}

/* The AssumeRoleWithWebIdentity form of s with the token tok, in secret
 * memory (*body; free with secret_free). Returns 0, -ENAMETOOLONG with why,
 * or -ENOMEM. */
static int webid_body(struct backend_credsrc *s, const char *tok, size_t toklen, char **body,
		      char *why, size_t whycap)
{
	char arn[4096], sess[256];
	char *enc = NULL;
	size_t bodycap;
	ssize_t na, ns;

	*body = NULL;
	/* form values, URL-encoded by the one encoder (the token into secret
	 * memory: curl_easy_escape would put it on the heap) */
	na = backend__uri_encode(arn, sizeof(arn), s->role_arn, strlen(s->role_arn), 0);
	ns = backend__uri_encode(sess, sizeof(sess), s->session_name, strlen(s->session_name), 0);
	if (na < 0 || ns < 0) {
		why_set(why, whycap, "AWS_ROLE_ARN or AWS_ROLE_SESSION_NAME is too long");
		return -ENAMETOOLONG;
	}
	enc = secret_alloc(3 * toklen + 1);
	if (!enc)
		return -ENOMEM;
	if (backend__uri_encode(enc, 3 * toklen + 1, tok, toklen, 0) < 0) {
		secret_free(enc); /* cannot happen: 3 bytes a byte fit */
		return -ENOMEM;
	}
	bodycap = strlen(enc) + strlen(arn) + strlen(sess) + 128;
	*body = secret_alloc(bodycap);
	if (*body)
		snprintf(*body, bodycap + 1,
			 "Action=AssumeRoleWithWebIdentity&Version=2011-06-15&RoleArn=%s"
			 "&RoleSessionName=%s&WebIdentityToken=%s",
			 arn, sess, enc);
	secret_free(enc);
	return *body ? 0 : -ENOMEM;
}

/* The Credentials of an AssumeRoleWithWebIdentity answer (XML) into out
 * and *exp. Returns 0, -EBADMSG or -ENOMEM. */
static int webid_creds(const char *resp, struct backend_creds *out, int64_t *exp)
{
	char *id = NULL, *secret = NULL, *token = NULL, *x = NULL;
	int err;

	err = xml_field(resp, "AccessKeyId", &id);
	if (!err)
		err = xml_field(resp, "SecretAccessKey", &secret);
	if (!err)
		err = xml_field(resp, "SessionToken", &token);
	if (!err)
		err = xml_field(resp, "Expiration", &x);
	if (!err && backend__iso8601_parse(x, strlen(x), exp) < 0)
		err = -EBADMSG;
	if (!err)
		err = creds_take(out, &id, &secret, &token);
	secret_free(id);
	secret_free(secret);
	secret_free(token);
	secret_free(x);
	return err == -ENOMEM ? err : err < 0 ? -EBADMSG : 0;
}

static int fetch_webid(struct backend_credsrc *s, struct backend_creds *out, int64_t *exp,
		       char *why, size_t whycap)
{
	struct http_call c = {0};
	struct curl_slist *h = NULL;
	char *tok = NULL, *body = NULL;
	size_t toklen = 0;
	int err;

	memset(out, 0, sizeof(*out));
	err = slurp(s->token_file, &tok, &toklen);
	if (err < 0) {
		why_set(why, whycap, "cannot read AWS_WEB_IDENTITY_TOKEN_FILE %s: %s",
			s->token_file, slurp_error(err));
		return err == -EINVAL ? -EACCES : err; /* not the source's fault */
	}
	while (toklen > 0 &&
	       (tok[toklen - 1] == '\n' || tok[toklen - 1] == '\r' || tok[toklen - 1] == ' '))
		tok[--toklen] = '\0';
	err = webid_body(s, tok, toklen, &body, why, whycap);
	if (err < 0)
		goto out;
	backend__creds_regs_clear();
	err = slist_plain(&h, "Content-Type: application/x-www-form-urlencoded");
	if (!err)
		err = slist_plain(&h, "Accept: application/xml");
	if (err < 0)
		goto out;
	c.method = "POST";
	c.url = s->url;
	c.hdrs = h;
	c.body = body;
	c.bodylen = strlen(body);
	c.timeout_ms = s->timeout_ms;
	c.ca_file = s->ca_file;
	err = http_perform(&c, why, whycap);
	if (err < 0)
		goto out;
	if (c.status != 200) {
		char *code = NULL, *msg = NULL;

		xml_field(c.resp, "Code", &code);
		xml_field(c.resp, "Message", &msg);
		why_set(why, whycap, "STS %s answered HTTP %ld%s%s%s%s", s->url, c.status,
			code ? " " : "", code && header_safe(code) ? code : "", msg ? ": " : "",
			msg && header_safe(msg) ? msg : "");
		secret_free(code);
		secret_free(msg);
		err = c.status == 400 || c.status == 403 ? -EACCES : -EIO;
		goto out;
	}
	err = webid_creds(c.resp, out, exp);
	if (err == -EBADMSG)
		why_set(why, whycap,
			"STS %s: the AssumeRoleWithWebIdentity answer has no usable Credentials",
			s->url);
out:
	if (err == -ENOMEM && !why[0])
		why_set(why, whycap, "out of memory");
	curl_slist_free_all(h);
	secret_free(c.resp);
	secret_free(tok);
	secret_free(body);
	if (err < 0)
		backend__creds_clear(out);
	return err;
}

static int fetch_container(struct backend_credsrc *s, struct backend_creds *out, int64_t *exp,
			   char *why, size_t whycap)
{
	struct http_call c = {0};
	struct curl_slist *h = NULL;
	char *auth = NULL;
	size_t alen = 0;
	int err = 0;

	memset(out, 0, sizeof(*out));
	if (s->token_file) {
		err = slurp(s->token_file, &auth, &alen);
		if (err < 0) {
			why_set(why, whycap,
				"cannot read AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE %s: %s",
				s->token_file, slurp_error(err));
			return err == -EINVAL ? -EACCES : err;
		}
		while (alen > 0 && (auth[alen - 1] == '\n' || auth[alen - 1] == '\r'))
			auth[--alen] = '\0';
	} else {
		err = env_secret("AWS_CONTAINER_AUTHORIZATION_TOKEN", &auth);
		if (err < 0)
			return err;
	}
	if (auth && !header_safe(auth)) {
		why_set(why, whycap, "the container authorization token has control characters");
		err = -EINVAL;
		goto out;
	}
	if (auth && auth[0] && (err = slist_secret(&h, "Authorization", auth)) < 0)
		goto out;
	err = slist_plain(&h, "Accept: application/json");
	if (err < 0)
		goto out;
	c.ca_file = s->ca_file;
	err = meta_call(s, &c, "GET", s->url, h, 200, 0, why, whycap);
	if (err < 0)
		goto out;
	if (c.status != 200) {
		why_set(why, whycap, "%s answered HTTP %ld", s->url, c.status);
		err = c.status == 401 || c.status == 403 ? -EACCES : -EIO;
		goto out;
	}
	err = creds_from_json(c.resp, c.resplen, "Token", out, exp, why, whycap);
out:
	curl_slist_free_all(h);
	secret_free(c.resp);
	secret_free(auth);
	return err;
}

static int imds_get(struct backend_credsrc *s, const char *path, const char *token,
		    struct http_call *c, char *why, size_t whycap)
{
	struct curl_slist *h = NULL;
	char url[1024];
	int err = 0;

	snprintf(url, sizeof(url), "%s%s", s->url, path);
	if (token && (err = slist_secret(&h, "X-aws-ec2-metadata-token", token)) < 0)
		return err;
	memset(c, 0, sizeof(*c));
	err = meta_call(s, c, "GET", url, h, 0, 1, why, whycap);
	curl_slist_free_all(h);
	if (err == 0 && c->status != 200) {
		why_set(why, whycap, "%s answered HTTP %ld", url, c->status);
		err = c->status == 404 ? -ENOENT : -EIO;
	}
	return err;
}

static int fetch_imds(struct backend_credsrc *s, struct backend_creds *out, int64_t *exp, char *why,
		      size_t whycap)
{
	struct http_call c = {0};
	struct curl_slist *h = NULL;
	char url[1024], path[512];
	char *token = NULL;
	int err = 0;

	memset(out, 0, sizeof(*out));
	/* IMDSv2: a session token first (PUT); 403/404/405 mean an IMDSv1-only
	 * service, as botocore takes them */
	snprintf(url, sizeof(url), "%s/latest/api/token", s->url);
	h = curl_slist_append(NULL, "X-aws-ec2-metadata-token-ttl-seconds: 21600");
	if (!h)
		return -ENOMEM;
	err = meta_call(s, &c, "PUT", url, h, 0, 1, why, whycap);
	curl_slist_free_all(h);
	if (err < 0)
		goto out;
	if (c.status == 200) {
		token = c.resp;
		c.resp = NULL;
		if (!token[0] || !header_safe(token)) {
			why_set(why, whycap, "%s: the session token is empty or malformed", url);
			err = -EBADMSG;
			goto out;
		}
	} else if (c.status != 403 && c.status != 404 && c.status != 405) {
		why_set(why, whycap, "%s answered HTTP %ld", url, c.status);
		err = -EIO;
		goto out;
	}
	secret_free(c.resp);
	c.resp = NULL;
	/* the role name (once; looked up again when it is gone) */
	for (int pass = 0; pass < 2; pass++) {
		if (!s->role[0]) {
			const char *r, *re;

			err = imds_get(s, "/latest/meta-data/iam/security-credentials/", token, &c,
				       why, whycap);
			if (err < 0)
				goto out;
			r = c.resp;
			re = strchr(r, '\n');
			re = re ? re : r + c.resplen;
			trim(&r, &re);
			if (re == r || (size_t)(re - r) >= sizeof(s->role) ||
			    memchr(r, '/', (size_t)(re - r)) || !header_safe(c.resp)) {
				why_set(why, whycap, "%s: no IAM role in the instance metadata",
					s->url);
				err = -ENOENT;
				goto out;
			}
			memcpy(s->role, r, (size_t)(re - r));
			s->role[re - r] = '\0';
			secret_free(c.resp);
			c.resp = NULL;
		}
		snprintf(path, sizeof(path), "/latest/meta-data/iam/security-credentials/%s",
			 s->role);
		err = imds_get(s, path, token, &c, why, whycap);
		if (err == -ENOENT && pass == 0) {
			s->role[0] = '\0';
			secret_free(c.resp);
			c.resp = NULL;
			continue;
		}
		break;
	}
	if (err < 0)
		goto out;
	{
		char *code = NULL;

		if (json_field(c.resp, c.resplen, "Code", &code) == 0 &&
		    strcmp(code, "Success") != 0) {
			why_set(why, whycap, "%s%s: Code is %.64s", s->url, path,
				header_safe(code) ? code : "?");
			secret_free(code);
			err = -EIO;
			goto out;
		}
		secret_free(code);
	}
	err = creds_from_json(c.resp, c.resplen, "Token", out, exp, why, whycap);
	if (err < 0) {
		char tmp[256];

		snprintf(tmp, sizeof(tmp), "%s", why);
		why_set(why, whycap, "%s%s: %s", s->url, path, tmp);
	}
out:
	secret_free(c.resp);
	secret_free(token);
	return err;
}

static int fetch_gce(struct backend_credsrc *s, struct backend_creds *out, int64_t *exp, char *why,
		     size_t whycap)
{
	struct http_call c = {0};
	struct curl_slist *h;
	char url[1024];
	char *tok = NULL, *ttl = NULL, *type = NULL;
	int err = 0;

	memset(out, 0, sizeof(*out));
	snprintf(url, sizeof(url),
		 "http://%s/computeMetadata/v1/instance/service-accounts/default/token", s->url);
	h = curl_slist_append(NULL, "Metadata-Flavor: Google");
	if (!h)
		return -ENOMEM;
	err = meta_call(s, &c, "GET", url, h, 0, 1, why, whycap);
	curl_slist_free_all(h);
	if (err < 0)
		goto out;
	if (c.status != 200 || !c.google) {
		why_set(why, whycap, "%s answered HTTP %ld%s", url, c.status,
			c.google ? "" : " without Metadata-Flavor: Google");
		err = c.status == 403 || c.status == 401 ? -EACCES : -EIO;
		goto out;
	}
	err = json_field(c.resp, c.resplen, "access_token", &tok);
	if (err == 0)
		err = json_field(c.resp, c.resplen, "expires_in", &ttl);
	if (err == 0 && json_field(c.resp, c.resplen, "token_type", &type) == 0 &&
	    strcasecmp(type, "Bearer") != 0)
		err = -EBADMSG;
	if (err == 0) {
		char *end;
		long long t;

		errno = 0;
		t = strtoll(ttl, &end, 10);
		if (errno || end == ttl || *end || t <= 0 || t > 7 * 86400 || !tok[0] ||
		    !header_safe(tok))
			err = -EBADMSG;
		else
			*exp = (int64_t)time(NULL) + t;
	}
	if (err < 0) {
		if (err != -ENOMEM)
			why_set(why, whycap, "%s: the answer has no usable access_token/expires_in",
				url);
		err = err == -ENOMEM ? err : -EBADMSG;
		goto out;
	}
	out->bearer = tok;
	tok = NULL;
out:
	secret_free(c.resp);
	secret_free(tok);
	secret_free(ttl);
	secret_free(type);
	return err;
}

/* Milliseconds since t0 (CLOCK_MONOTONIC). */
static long ms_since(const struct timespec *t0)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (long)((t.tv_sec - t0->tv_sec) * 1000 + (t.tv_nsec - t0->tv_nsec) / 1000000);
}

/* The program of a credential_process command line (its first word, at
 * most 80 bytes), for messages: the rest may carry arguments best not
 * logged. */
static void process_program(const char *cmd, char *buf, size_t cap)
{
	size_t n;

	cmd += strspn(cmd, " \t");
	n = strcspn(cmd, " \t");
	if (n > 80)
		n = 80;
	snprintf(buf, cap, "%.*s", (int)n, cmd);
	for (char *p = buf; *p; p++)
		if ((unsigned char)*p < 0x20 || *p == 0x7f)
			*p = '?';
}

/* Wait (bounded: until deadline_ms after t0) for the helper pid to exit;
 * 1 when it did (not reaped yet), 0 when it still runs. */
static int process_exited(pid_t pid, const struct timespec *t0, long deadline_ms)
{
	for (;;) {
		siginfo_t si;

		memset(&si, 0, sizeof(si));
		if (waitid(P_PID, (id_t)pid, &si, WEXITED | WNOHANG | WNOWAIT) < 0) {
			if (errno == EINTR)
				continue;
			return 1; /* not ours any more: nothing to wait for */
		}
		if (si.si_pid == pid)
			return 1;
		if (ms_since(t0) >= deadline_ms)
			return 0;
		poll(NULL, 0, 10);
	}
}

/* Run s->process with /bin/sh -c and take the credentials it prints (JSON,
 * Version 1). It runs in a process group of its own (listed for
 * backend_kill_helpers, and in s->running for backend__credsrc_close),
 * stdin /dev/null, stdout a pipe, stderr ours (the terminal of 'shardfs
 * mount' until the mount is ready, then the log); SIGKILL when the thread
 * that started it ends. It must print at most CREDS_HTTP_MAX bytes and
 * exit with status 0 within s->timeout_ms of its start; otherwise its whole
 * group is killed: -ETIMEDOUT (or -EMSGSIZE) with why naming the program
 * and the bound. Blocks the calling thread for at most that bound. */
static int fetch_process(struct backend_credsrc *s, struct backend_creds *out, int64_t *exp,
			 char *why, size_t whycap)
{
	int pfd[2], status = 0, err = 0, exited = 0;
	char *buf, prog[96];
	size_t len = 0;
	pid_t pid, self = getpid();
	struct timespec t0;

	memset(out, 0, sizeof(*out));
	process_program(s->process, prog, sizeof(prog));
	buf = secret_alloc(CREDS_HTTP_MAX);
	if (!buf)
		return -ENOMEM;
	if (pipe2(pfd, O_CLOEXEC) < 0) {
		err = -errno;
		secret_free(buf);
		return err;
	}
	clock_gettime(CLOCK_MONOTONIC, &t0);
	pid = fork();
	if (pid < 0) {
		err = -errno;
		close(pfd[0]);
		close(pfd[1]);
		secret_free(buf);
		why_set(why, whycap, "cannot run %s: %s", prog, strerror(-err));
		return err;
	}
	if (pid == 0) {
		/* only async-signal-safe calls until exec */
		int null = open("/dev/null", O_RDONLY);
		sigset_t none;

		setpgid(0, 0);
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		if (getppid() != self)
			_exit(127);
		/* what the daemon ignores or blocks is not the program's */
		signal(SIGPIPE, SIG_DFL);
		sigemptyset(&none);
		sigprocmask(SIG_SETMASK, &none, NULL);
		if (null >= 0)
			dup2(null, STDIN_FILENO);
		dup2(pfd[1], STDOUT_FILENO);
		closefrom(3); /* the FUSE device, sockets, the cache: not the program's */
		execl("/bin/sh", "sh", "-c", s->process, (char *)NULL);
		_exit(127);
	}
	setpgid(pid, pid); /* as the child does: whichever runs first */
	helper_add(pid);
	pthread_mutex_lock(&s->lock);
	s->running = pid;
	pthread_mutex_unlock(&s->lock);
	close(pfd[1]);
	fcntl(pfd[0], F_SETFL, O_NONBLOCK);
	for (;;) {
		struct pollfd p = {pfd[0], POLLIN, 0};
		long left = s->timeout_ms - ms_since(&t0);
		ssize_t n;
		int r;

		if (left <= 0) {
			err = -ETIMEDOUT;
			break;
		}
		r = poll(&p, 1, (int)left);
		if (r < 0 && errno != EINTR) {
			err = -errno;
			break;
		}
		if (r <= 0)
			continue; /* EINTR, or the bound: looked at above */
		n = read(pfd[0], buf + len, CREDS_HTTP_MAX - len);
		if (n < 0 && (errno == EINTR || errno == EAGAIN))
			continue;
		if (n < 0) {
			err = -errno;
			break;
		}
		if (n == 0)
			break;
		len += (size_t)n;
		if (len == CREDS_HTTP_MAX) {
			err = -EMSGSIZE;
			break;
		}
	}
	close(pfd[0]);
	/* after its end of file the program must exit within the bound too */
	if (err == 0) {
		exited = process_exited(pid, &t0, s->timeout_ms);
		if (!exited)
			err = -ETIMEDOUT;
	}
	if (err < 0)
		kill(-pid, SIGKILL); /* the whole group: what it started too */
	pthread_mutex_lock(&s->lock);
	s->running = 0;
	pthread_mutex_unlock(&s->lock);
	helper_del(pid);
	while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
		;
	backend__creds_regs_clear();
	if (err == -ETIMEDOUT) {
		why_set(why, whycap,
			"%s gave no credentials within %.3g s (--credential-timeout): killed it "
			"and its process group",
			prog, (double)s->timeout_ms / 1000);
	} else if (err == -EMSGSIZE) {
		why_set(why, whycap, "%s printed more than %u bytes: killed it", prog,
			CREDS_HTTP_MAX);
	} else if (err < 0) {
		why_set(why, whycap, "%s: %s", prog, strerror(-err));
	} else if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
		why_set(why, whycap, "%s exited with status %d", prog,
			WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status));
		err = -EIO;
	} else {
		char *ver = NULL;

		buf[len] = '\0';
		if (json_field(buf, len, "Version", &ver) == 0 && strcmp(ver, "1") != 0) {
			why_set(why, whycap, "%s: Version %.16s is not 1", prog,
				header_safe(ver) ? ver : "?");
			err = -EBADMSG;
		} else {
			err = creds_from_json(buf, len, "SessionToken", out, exp, why, whycap);
			if (err < 0) {
				char tmp[256];

				snprintf(tmp, sizeof(tmp), "%s", why);
				why_set(why, whycap, "%s: %s", prog, tmp);
			}
		}
		secret_free(ver);
	}
	secret_free(buf);
	return err;
}

static int src_fetch(struct backend_credsrc *s, struct backend_creds *out, int64_t *exp, char *why,
		     size_t whycap)
{
	why[0] = '\0';
	switch (s->kind) {
	case SRC_WEBID:
		return fetch_webid(s, out, exp, why, whycap);
	case SRC_CONTAINER:
		return fetch_container(s, out, exp, why, whycap);
	case SRC_IMDS:
		return fetch_imds(s, out, exp, why, whycap);
	case SRC_GCE:
		return fetch_gce(s, out, exp, why, whycap);
	case SRC_PROCESS:
		return fetch_process(s, out, exp, why, whycap);
	default:
		return -EINVAL;
	}
}

/* ---- refresh ------------------------------------------------------------------ */

/* When to refresh credentials fetched at now that expire at exp: half their
 * lifetime, at most CREDS_REFRESH_MAX seconds before they expire. */
static int64_t refresh_plan(int64_t now, int64_t exp)
{
	int64_t life = exp - now, ahead = life / 2;

	if (life <= 1)
		return now + 1;
	if (ahead > CREDS_REFRESH_MAX)
		ahead = CREDS_REFRESH_MAX;
	return exp - ahead;
}

/* One line of the refresh thread for the mount's log, naming the source. */
static void src_log(struct backend_credsrc *s, enum backend_log_level level, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void src_log(struct backend_credsrc *s, enum backend_log_level level, const char *fmt, ...)
{
	char msg[1024];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	backend__log(&s->log, level, "%s: %s", s->label, msg);
}

static void *src_thread(void *arg)
{
	struct backend_credsrc *s = arg;
	unsigned backoff = 1;
	char why[512], when[32];

	pthread_mutex_lock(&s->lock);
	while (!s->stop) {
		int64_t now = (int64_t)time(NULL);
		struct backend_creds fresh, old;
		int64_t exp = 0, cur_exp;
		int err;

		if (now < s->refresh_at) {
			struct timespec ts = {(time_t)s->refresh_at, 0};

			pthread_cond_timedwait(&s->cond, &s->lock, &ts);
			continue;
		}
		cur_exp = s->expires;
		pthread_mutex_unlock(&s->lock);
		err = src_fetch(s, &fresh, &exp, why, sizeof(why));
		pthread_mutex_lock(&s->lock);
		if (s->stop) {
			if (err == 0)
				backend__creds_clear(&fresh);
			break;
		}
		now = (int64_t)time(NULL);
		if (err == 0) {
			old = s->cur;
			s->cur = fresh;
			s->expires = exp;
			s->refresh_at = exp ? refresh_plan(now, exp) : INT64_MAX;
			backoff = 1;
			pthread_mutex_unlock(&s->lock);
			/* after the swap: no signer holds the old buffers now */
			backend__creds_clear(&old);
			utc_text(exp, when, sizeof(when));
			src_log(s, BACKEND_LOG_INFO,
				"credentials from %s refreshed; they expire at %s", s->name,
				exp ? when : "never");
			pthread_mutex_lock(&s->lock);
			continue;
		}
		s->refresh_at = now + backoff;
		pthread_mutex_unlock(&s->lock);
		utc_text(cur_exp, when, sizeof(when));
		src_log(s, BACKEND_LOG_WARN,
			"refreshing credentials from %s failed (%s); retrying in %u s; the current "
			"ones %s %s",
			s->name, why[0] ? why : strerror(-err), backoff,
			now >= cur_exp ? "expired at" : "expire at", when);
		backoff = backoff * 2 > CREDS_BACKOFF_MAX ? CREDS_BACKOFF_MAX : backoff * 2;
		pthread_mutex_lock(&s->lock);
	}
	pthread_mutex_unlock(&s->lock);
	backend__creds_regs_clear();
	return NULL;
}

/* ---- the chain --------------------------------------------------------------- */

static struct backend_credsrc *src_new(enum src_kind kind, const char *label, const char *ca_file,
				       const struct backend_logger *log)
{
	struct backend_credsrc *s = calloc(1, sizeof(*s));
	pthread_condattr_t ca;

	if (!s)
		return NULL;
	pthread_mutex_init(&s->lock, NULL);
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_REALTIME);
	pthread_cond_init(&s->cond, &ca);
	pthread_condattr_destroy(&ca);
	s->kind = kind;
	snprintf(s->label, sizeof(s->label), "%s", label);
	s->log = *log;
	s->timeout_ms = env_ms("AWS_METADATA_SERVICE_TIMEOUT", 1000);
	s->attempts = 1;
	{
		const char *a = env("AWS_METADATA_SERVICE_NUM_ATTEMPTS");
		char *end;
		long v;

		if (a) {
			errno = 0;
			v = strtol(a, &end, 10);
			if (!errno && end != a && !*end && v >= 1 && v <= 10)
				s->attempts = (int)v;
		}
	}
	if (ca_file && !(s->ca_file = strdup(ca_file))) {
		free(s);
		return NULL;
	}
	return s;
}

void backend__credsrc_close(struct backend_credsrc *s)
{
	if (!s)
		return;
	if (s->thread_started) {
		pthread_mutex_lock(&s->lock);
		s->stop = 1;
		pthread_cond_signal(&s->cond);
		/* a refresh waiting for its credential_process ends now, not
		 * after the bound (running is cleared before the reap: the
		 * group is still the helper's) */
		if (s->running > 0)
			kill(-s->running, SIGKILL);
		pthread_mutex_unlock(&s->lock);
		pthread_join(s->thread, NULL);
	}
	backend__creds_clear(&s->cur);
	free(s->url);
	free(s->role_arn);
	free(s->session_name);
	free(s->token_file);
	free(s->process);
	free(s->ca_file);
	pthread_cond_destroy(&s->cond);
	pthread_mutex_destroy(&s->lock);
	free(s);
}

int backend__credsrc_use(struct backend_credsrc *s, backend__creds_use_cb fn, void *arg)
{
	int err;

	pthread_mutex_lock(&s->lock);
	if (s->expires && (int64_t)time(NULL) >= s->expires)
		err = -EACCES; /* expired, and no refresh has worked since */
	else
		err = fn(arg, &s->cur);
	pthread_mutex_unlock(&s->lock);
	return err;
}

int backend__credsrc_bearer(struct backend_credsrc *s)
{
	int bearer;

	pthread_mutex_lock(&s->lock);
	bearer = s->cur.bearer != NULL;
	pthread_mutex_unlock(&s->lock);
	return bearer;
}

const char *backend__credsrc_name(const struct backend_credsrc *s)
{
	return s->name;
}

/* "scheme://host[:port]" of url (no userinfo); -EINVAL when it is not one */
static int url_origin_ok(const char *url, int *loopback_or_https)
{
	struct backend_endpoint ep;
	int err = backend__endpoint_parse(&ep, url);
	static const char *const allowed[] = {"127.",	       "localhost",	 "[::1]",
					      "169.254.170.2", "169.254.170.23", "[fd00:ec2::23]"};

	if (err < 0)
		return err;
	*loopback_or_https = ep.https;
	for (size_t i = 0; i < sizeof(allowed) / sizeof(allowed[0]); i++) {
		size_t n = strlen(allowed[i]);

		if (strncmp(ep.host, allowed[i], n) == 0 &&
		    (allowed[i][n - 1] == '.' || ep.host[n] == '\0' || ep.host[n] == ':'))
			*loopback_or_https = 1;
	}
	return 0;
}

static char *dup_or(const char *v, const char *dflt)
{
	return strdup(v ? v : dflt);
}

struct ini_get {
	const char *key;
	char *out;
};

static int ini_get_cb(void *arg, const char *k, size_t kn, const char *v, size_t vn)
{
	struct ini_get *g = arg;

	if (!key_is(k, kn, g->key))
		return 0;
	g->out = strndup(v, vn);
	return g->out ? 1 : -ENOMEM;
}

/* Value of key in section of an INI file (the AWS config file); a heap
 * copy in *out, or NULL. Returns 0 or a negative errno (-ENOENT: no file). */
static int ini_get(const char *path, const char *section, const char *key, char **out)
{
	struct ini_get g = {key, NULL};
	int err = ini_walk(path, section, ini_get_cb, &g);

	*out = g.out;
	return err < 0 ? err : 0;
}

/* credential_process of the profile: in the credentials file's [profile]
 * or the config file's [profile NAME] ([default] for "default"). */
static int find_process(const char *profile, char **out)
{
	char path[4096], sect[300];
	const char *home = env("HOME"), *cfile = env("AWS_SHARED_CREDENTIALS_FILE");
	const char *conf = env("AWS_CONFIG_FILE");
	int err;

	*out = NULL;
	if (!cfile && home &&
	    snprintf(path, sizeof(path), "%s/.aws/credentials", home) < (int)sizeof(path))
		cfile = path;
	if (cfile) {
		err = ini_get(cfile, profile, "credential_process", out);
		if (err < 0 && err != -ENOENT)
			return err;
		if (*out)
			return 0;
	}
	if (!conf && home &&
	    snprintf(path, sizeof(path), "%s/.aws/config", home) < (int)sizeof(path))
		conf = path;
	if (!conf)
		return 0;
	snprintf(sect, sizeof(sect), "profile %s", profile);
	err = ini_get(conf, sect, "credential_process", out);
	if (err == 0 && !*out && strcmp(profile, "default") == 0)
		err = ini_get(conf, "default", "credential_process", out);
	return err == -ENOENT ? 0 : err;
}

/* Fetch the first credentials of s at mount time, and start its refresh
 * thread when they expire. */
static int src_start(struct backend_credsrc *s, char *why, size_t whycap)
{
	int64_t exp = 0, now;
	int err;

	err = src_fetch(s, &s->cur, &exp, why, whycap);
	if (err < 0)
		return err;
	now = (int64_t)time(NULL);
	s->expires = exp;
	if (!exp)
		return 0;
	if (exp <= now) {
		why_set(why, whycap, "the credentials it gave have expired already");
		return -EACCES;
	}
	s->refresh_at = refresh_plan(now, exp);
	err = pthread_create(&s->thread, NULL, src_thread, s);
	if (err) {
		why_set(why, whycap, "cannot start the refresh thread: %s", strerror(err));
		return -err;
	}
	s->thread_started = 1;
	return 0;
}

/* What every link of the chain needs to know. */
struct chain {
	int gcs;
	long process_timeout_ms; /* the bound of a credential_process */
	const char *ca_file;
	const char *label;
	const struct backend_logger *log;
	const char *profile; /* AWS_PROFILE, or "default" */
};

/*
 * One link of the chain. Returns 0 when it has nothing (*sp stays NULL),
 * LINK_FOUND with *sp holding credentials, LINK_FETCH with *sp that must
 * fetch its first credentials (src_start), or a negative errno with why
 * (the caller closes *sp, which may be set).
 */
enum { LINK_FOUND = 1, LINK_FETCH = 2 };
typedef int (*chain_link)(const struct chain *ch, struct backend_credsrc **sp, char *why,
			  size_t whycap);

/* A static source holding st (taken, also on failure): LINK_FOUND or -ENOMEM. */
static int src_static(const struct chain *ch, struct backend_creds *st, struct backend_credsrc **sp)
{
	*sp = src_new(SRC_STATIC, ch->label, ch->ca_file, ch->log);
	if (!*sp) {
		backend__creds_clear(st);
		return -ENOMEM;
	}
	(*sp)->cur = *st;
	return LINK_FOUND;
}

/* 1. static: the environment (and GCS's own) */
static int link_env(const struct chain *ch, struct backend_credsrc **sp, char *why, size_t whycap)
{
	struct backend_creds st;
	const char *name = "the environment (AWS_ACCESS_KEY_ID)";
	int err;

	if (ch->gcs) {
		char *tok = NULL;

		memset(&st, 0, sizeof(st));
		err = env_secret("GOOGLE_OAUTH_ACCESS_TOKEN", &tok);
		if (err < 0)
			return err;
		if (tok) {
			if (!header_safe(tok)) {
				secret_free(tok);
				why_set(why, whycap,
					"GOOGLE_OAUTH_ACCESS_TOKEN has control characters");
				return -EINVAL;
			}
			st.bearer = tok;
			name = "the environment (GOOGLE_OAUTH_ACCESS_TOKEN)";
			goto found;
		}
		err = from_env(&st, "GCS_HMAC_ACCESS_ID", "GCS_HMAC_SECRET", NULL);
		if (err < 0)
			return err;
		if (err > 0) {
			name = "the environment (GCS_HMAC_ACCESS_ID)";
			goto found;
		}
	}
	memset(&st, 0, sizeof(st));
	err = from_env(&st, "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN");
	if (err <= 0)
		return err;
found:
	err = src_static(ch, &st, sp);
	if (err > 0)
		snprintf((*sp)->name, sizeof((*sp)->name), "%s", name);
	return err;
}

/* 2. web identity (botocore has it before the credentials file) */
static int link_webid(const struct chain *ch, struct backend_credsrc **sp, char *why, size_t whycap)
{
	const char *sts = env("AWS_ENDPOINT_URL_STS");
	char dflt[128], region[64], sess[64];
	struct backend_credsrc *s;

	if (ch->gcs || !env("AWS_WEB_IDENTITY_TOKEN_FILE") || !env("AWS_ROLE_ARN"))
		return 0;
	if (!sts)
		sts = env("AWS_ENDPOINT_URL");
	backend__aws_region(region, sizeof(region));
	snprintf(dflt, sizeof(dflt), "https://sts.%s.amazonaws.com", region);
	snprintf(sess, sizeof(sess), "shardfs-%lld", (long long)time(NULL));
	s = *sp = src_new(SRC_WEBID, ch->label, ch->ca_file, ch->log);
	if (!s)
		return -ENOMEM;
	s->token_file = strdup(env("AWS_WEB_IDENTITY_TOKEN_FILE"));
	s->role_arn = strdup(env("AWS_ROLE_ARN"));
	s->session_name = dup_or(env("AWS_ROLE_SESSION_NAME"), sess);
	s->url = dup_or(sts, dflt);
	s->timeout_ms = 10000;
	if (!s->token_file || !s->role_arn || !s->session_name || !s->url)
		return -ENOMEM;
	if (backend__endpoint_parse(&(struct backend_endpoint){0}, s->url) < 0) {
		why_set(why, whycap, "web identity: bad STS endpoint URL %s", s->url);
		return -EINVAL;
	}
	snprintf(s->name, sizeof(s->name), "web identity (role %.150s, STS %.80s)", s->role_arn,
		 s->url);
	return LINK_FETCH;
}

/* 3. the shared credentials file */
static int link_file(const struct chain *ch, struct backend_credsrc **sp, char *why, size_t whycap)
{
	char path[4096];
	const char *file = env("AWS_SHARED_CREDENTIALS_FILE");
	struct backend_creds st;
	int err;

	(void)why;
	(void)whycap;
	if (!file) {
		const char *home = env("HOME");

		if (home &&
		    snprintf(path, sizeof(path), "%s/.aws/credentials", home) < (int)sizeof(path))
			file = path;
	}
	if (!file)
		return 0;
	memset(&st, 0, sizeof(st));
	err = backend__creds_file(&st, file, ch->profile);
	if (err < 0 && err != -ENOENT)
		return err;
	if (!st.access_key)
		return 0;
	err = src_static(ch, &st, sp);
	if (err > 0)
		snprintf((*sp)->name, sizeof((*sp)->name), "the credentials file (profile %.100s)",
			 ch->profile);
	return err;
}

/* 4. credential_process of the profile */
static int link_process(const struct chain *ch, struct backend_credsrc **sp, char *why,
			size_t whycap)
{
	char *cmd = NULL;
	int err;

	(void)why;
	(void)whycap;
	err = find_process(ch->profile, &cmd);
	if (err < 0 || !cmd)
		return err;
	*sp = src_new(SRC_PROCESS, ch->label, ch->ca_file, ch->log);
	if (!*sp) {
		free(cmd);
		return -ENOMEM;
	}
	(*sp)->process = cmd;
	(*sp)->timeout_ms = ch->process_timeout_ms;
	snprintf((*sp)->name, sizeof((*sp)->name), "credential_process (profile %.100s)",
		 ch->profile);
	return LINK_FETCH;
}

/* 5. the container endpoint (ECS, EKS Pod Identity) */
static int link_container(const struct chain *ch, struct backend_credsrc **sp, char *why,
			  size_t whycap)
{
	const char *rel = env("AWS_CONTAINER_CREDENTIALS_RELATIVE_URI");
	const char *full = env("AWS_CONTAINER_CREDENTIALS_FULL_URI");
	const char *tokfile = env("AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE");
	struct backend_credsrc *s;
	char url[1024];
	int loop_ok = 0;

	if (!rel && !full)
		return 0;
	s = *sp = src_new(SRC_CONTAINER, ch->label, ch->ca_file, ch->log);
	if (!s)
		return -ENOMEM;
	if (rel)
		snprintf(url, sizeof(url), "http://169.254.170.2%s%s", rel[0] == '/' ? "" : "/",
			 rel);
	else
		snprintf(url, sizeof(url), "%s", full);
	if (url_origin_ok(url, &loop_ok) < 0 || !loop_ok) {
		why_set(why, whycap,
			"container credentials: %s must be https or a loopback/ECS/EKS address",
			url);
		return -EINVAL;
	}
	if (tokfile && !(s->token_file = strdup(tokfile)))
		return -ENOMEM;
	s->url = strdup(url);
	s->timeout_ms = env_ms("AWS_METADATA_SERVICE_TIMEOUT", 2000);
	if (!s->url)
		return -ENOMEM;
	snprintf(s->name, sizeof(s->name), "the container endpoint (%.200s)", url);
	return LINK_FETCH;
}

/* Start a metadata-service source s (what: its name in why): LINK_FOUND;
 * 0 when the service is not there (quiet: the errors that mean so), s
 * closed; or a negative errno, s closed. */
static int meta_start(struct backend_credsrc **sp, const char *what, int quiet_enoent, char *why,
		      size_t whycap)
{
	int err = src_start(*sp, why, whycap);
	char tmp[512];

	if (err >= 0)
		return LINK_FOUND;
	snprintf(tmp, sizeof(tmp), "%s", why);
	why_set(why, whycap, "%s: %s", what, tmp);
	backend__credsrc_close(*sp);
	*sp = NULL;
	/* as botocore: an unreachable metadata service means "no credentials" */
	return err == -ETIMEDOUT || err == -EIO || (quiet_enoent && err == -ENOENT) ? 0 : err;
}

/* 6. the EC2 instance metadata service */
static int link_imds(const struct chain *ch, struct backend_credsrc **sp, char *why, size_t whycap)
{
	const char *ep = env("AWS_EC2_METADATA_SERVICE_ENDPOINT");
	struct backend_credsrc *s;
	size_t n;
	int err;

	if (env_true("AWS_EC2_METADATA_DISABLED"))
		return 0;
	s = *sp = src_new(SRC_IMDS, ch->label, ch->ca_file, ch->log);
	if (!s)
		return -ENOMEM;
	s->url = dup_or(ep, "http://169.254.169.254");
	if (!s->url)
		return -ENOMEM;
	n = strlen(s->url);
	while (n > 0 && s->url[n - 1] == '/')
		s->url[--n] = '\0';
	snprintf(s->name, sizeof(s->name), "instance metadata (%.200s)", s->url);
	err = meta_start(sp, "instance metadata", 1, why, whycap);
	if (err == LINK_FOUND)
		snprintf(s->name, sizeof(s->name), "instance metadata (%.200s, role %.100s)",
			 s->url, s->role);
	return err;
}

/* GCS's last link: the GCE metadata server */
static int link_gce(const struct chain *ch, struct backend_credsrc **sp, char *why, size_t whycap)
{
	struct backend_credsrc *s;

	if (env_true("NO_GCE_CHECK"))
		return 0;
	s = *sp = src_new(SRC_GCE, ch->label, ch->ca_file, ch->log);
	if (!s)
		return -ENOMEM;
	s->url = dup_or(env("GCE_METADATA_HOST"), "metadata.google.internal");
	s->timeout_ms = env_ms("GCE_METADATA_TIMEOUT", 3000);
	if (!s->url)
		return -ENOMEM;
	snprintf(s->name, sizeof(s->name), "the GCE metadata server (%.200s)", s->url);
	return meta_start(sp, "GCE metadata server", 0, why, whycap);
}

int backend__credsrc_open(struct backend_credsrc **out, int gcs, const char *ca_file,
			  double process_timeout_s, const char *label,
			  const struct backend_logger *log, char *why, size_t whycap)
{
	static const chain_link aws[] = {link_env,     link_webid,     link_file,
					 link_process, link_container, link_imds};
	static const chain_link gcp[] = {link_env, link_file, link_gce};
	const chain_link *links = gcs ? gcp : aws;
	size_t nlinks = gcs ? sizeof(gcp) / sizeof(gcp[0]) : sizeof(aws) / sizeof(aws[0]);
	struct chain ch = {gcs, 0, ca_file, label, log, env("AWS_PROFILE")};
	struct backend_credsrc *s = NULL;
	int err = 0;
	char when[32];

	*out = NULL;
	why[0] = '\0';
	if (!ch.profile)
		ch.profile = "default";
	if (process_timeout_s <= 0 || process_timeout_s > CREDS_PROCESS_MAX_S)
		process_timeout_s = CREDS_PROCESS_MAX_S;
	ch.process_timeout_ms = (long)(process_timeout_s * 1000);
	if (ch.process_timeout_ms < 1)
		ch.process_timeout_ms = 1;
	for (size_t i = 0; i < nlinks && err == 0; i++)
		err = links[i](&ch, &s, why, whycap);
	if (err == LINK_FETCH) {
		err = src_start(s, why, whycap);
		if (err < 0) {
			char tmp[512];

			snprintf(tmp, sizeof(tmp), "%s", why);
			why_set(why, whycap, "%s: %s", s->name, tmp);
		}
	}
	if (err < 0) {
		backend__credsrc_close(s);
		return err;
	}
	if (!s)
		return 0;
	utc_text(s->expires, when, sizeof(when));
	backend__log(log, BACKEND_LOG_INFO, "%s: credentials from %s%s%s", label, s->name,
		     s->expires ? "; they expire at " : "", s->expires ? when : "");
	*out = s;
	return 0;
}
