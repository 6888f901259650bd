/*
 * backend_creds_secret.c — the protected memory secrets live in, and the
 * environment's secret variables, the vector registers and libcurl's
 * blocks that would otherwise keep a copy.
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
 * Nothing here logs or formats a secret (nor anywhere in backend_creds_*.c).
 *
 * Non-goals: protecting a secret from a debugger or from root while the
 * process runs.
 */
#include <errno.h>
#include <malloc.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <curl/curl.h>

#include "backend_creds_i.h"

/* ---- secret memory -------------------------------------------------------- */

/* In front of each secret: the size of its mapping. */
struct secret_hdr {
	size_t maplen;
	size_t pad; /* keeps the secret 16-byte aligned */
};

/* A zeroed secret buffer of n + 1 bytes (room for a NUL) in a mapping of its
 * own that core dumps leave out. NULL when out of memory. */
char *backend__creds_secret_alloc(size_t n)
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

void backend__creds_secret_free(char *s)
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

char *backend__creds_secret_dup(const char *s, size_t n)
{
	char *d = backend__creds_secret_alloc(n);

	if (d)
		memcpy(d, s, n); /* the NUL is already there */
	return d;
}

void backend__creds_clear(struct backend_creds *c)
{
	if (!c)
		return;
	free(c->access_key);
	backend__creds_secret_free(c->secret_key);
	backend__creds_secret_free(c->session_token);
	backend__creds_secret_free(c->bearer);
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
static struct disk_mutex env_lock = DISK_MUTEX_INITIALIZER(DISK_LOCK_BE_ENV);

#define ENV_SECRETS (sizeof(env_secrets) / sizeof(env_secrets[0]))

static int scrub_locked(struct env_secret *e)
{
	char *v = getenv(e->name);
	size_t n;

	if (!v) {
		backend__creds_secret_free(e->copy);
		e->copy = NULL;
		return 0;
	}
	n = strlen(v);
	if (n == 0)
		return 0;
	backend__creds_secret_free(e->copy);
	e->copy = backend__creds_secret_dup(v, n);
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

	disk_mutex_lock(&env_lock);
	for (size_t i = 0; i < ENV_SECRETS; i++) {
		int e = scrub_locked(&env_secrets[i]);

		if (e < 0)
			err = e;
	}
	disk_mutex_unlock(&env_lock);
	return err;
}

/* A new secret copy of the secret variable name into *out (NULL when it is
 * unset or empty). Returns 0 or -ENOMEM. */
int backend__creds_env_secret(const char *name, char **out)
{
	int err = 0;

	*out = NULL;
	disk_mutex_lock(&env_lock);
	for (size_t i = 0; i < ENV_SECRETS; i++) {
		struct env_secret *e = &env_secrets[i];

		if (strcmp(e->name, name) != 0)
			continue;
		err = scrub_locked(e);
		if (!err && e->copy && e->copy[0] &&
		    !(*out = backend__creds_secret_dup(e->copy, strlen(e->copy))))
			err = -ENOMEM;
		break;
	}
	disk_mutex_unlock(&env_lock);
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

/* 0 sse, 1 avx, 2 avx512f, -1 not known yet (threads that race store the
 * same value) */
static atomic_int regs_kind = -1;

void backend__creds_regs_clear(void)
{
	int kind = atomic_load_explicit(&regs_kind, memory_order_relaxed);

	if (kind < 0) {
		__builtin_cpu_init();
		if (__builtin_cpu_supports("avx512f"))
			kind = 2;
		else
			kind = __builtin_cpu_supports("avx") ? 1 : 0;
		atomic_store_explicit(&regs_kind, kind, memory_order_relaxed);
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
 * upload buffer (64 KiB) are at most this, and so is curl's receive buffer
 * (CURLOPT_BUFFERSIZE: IO_BUFFER_BYTES, 64 KiB, backend_io_i.h): all are
 * wiped when freed. A block over the bound holds no credential (curl's
 * requests and header lines are smaller) and is freed unwiped: wiping it
 * would fault in pages curl never touched. */
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
