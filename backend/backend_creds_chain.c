/*
 * backend_creds_chain.c — the chain of credential sources a mount uses
 * (backend__credsrc_open) and the refresh of credentials that expire (one
 * thread per source).
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
 * live in secret memory (backend_creds_secret.c).
 *
 * Non-goals: SSO and assume-role profiles (role_arn + source_profile).
 */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "backend_creds_i.h"

/* ---- small helpers ---------------------------------------------------------- */

void backend__creds_why(char *why, size_t cap, const char *fmt, ...)
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
	const char *v = backend__creds_env(name);
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
	const char *v = backend__creds_env(name);

	return v && (strcasecmp(v, "true") == 0 || strcmp(v, "1") == 0);
}

static int src_fetch(struct backend_credsrc *s, struct backend_creds *out, int64_t *exp, char *why,
		     size_t whycap)
{
	why[0] = '\0';
	switch (s->kind) {
	case SRC_WEBID:
		return backend__creds_fetch_webid(s, out, exp, why, whycap);
	case SRC_CONTAINER:
		return backend__creds_fetch_container(s, out, exp, why, whycap);
	case SRC_IMDS:
		return backend__creds_fetch_imds(s, out, exp, why, whycap);
	case SRC_GCE:
		return backend__creds_fetch_gce(s, out, exp, why, whycap);
	case SRC_PROCESS:
		return backend__creds_fetch_process(s, out, exp, why, whycap);
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

	disk_mutex_lock(&s->lock);
	while (!s->stop) {
		int64_t now = (int64_t)time(NULL);
		struct backend_creds fresh, old;
		int64_t exp = 0, cur_exp;
		int err;

		if (now < s->refresh_at) {
			struct timespec ts = {(time_t)s->refresh_at, 0};

			disk_cond_timedwait(&s->cond, &s->lock, &ts);
			continue;
		}
		cur_exp = s->expires;
		disk_mutex_unlock(&s->lock);
		err = src_fetch(s, &fresh, &exp, why, sizeof(why));
		disk_mutex_lock(&s->lock);
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
			disk_mutex_unlock(&s->lock);
			/* after the swap: no signer holds the old buffers now */
			backend__creds_clear(&old);
			utc_text(exp, when, sizeof(when));
			src_log(s, BACKEND_LOG_INFO,
				"credentials from %s refreshed; they expire at %s", s->name,
				exp ? when : "never");
			disk_mutex_lock(&s->lock);
			continue;
		}
		s->refresh_at = now + backoff;
		disk_mutex_unlock(&s->lock);
		utc_text(cur_exp, when, sizeof(when));
		src_log(s, BACKEND_LOG_WARN,
			"refreshing credentials from %s failed (%s); retrying in %u s; the current "
			"ones %s %s",
			s->name, why[0] ? why : strerror(-err), backoff,
			now >= cur_exp ? "expired at" : "expire at", when);
		backoff = backoff * 2 > CREDS_BACKOFF_MAX ? CREDS_BACKOFF_MAX : backoff * 2;
		disk_mutex_lock(&s->lock);
	}
	disk_mutex_unlock(&s->lock);
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
	disk_mutex_init(&s->lock, DISK_LOCK_BE_CREDS);
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
		const char *a = backend__creds_env("AWS_METADATA_SERVICE_NUM_ATTEMPTS");
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
		disk_mutex_lock(&s->lock);
		s->stop = 1;
		pthread_cond_signal(&s->cond);
		/* a refresh waiting for its credential_process ends now, not
		 * after the bound (running is cleared before the reap: the
		 * group is still the helper's) */
		if (s->running > 0)
			kill(-s->running, SIGKILL);
		disk_mutex_unlock(&s->lock);
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
	disk_mutex_destroy(&s->lock);
	free(s);
}

int backend__credsrc_use(struct backend_credsrc *s, backend__creds_use_cb fn, void *arg)
{
	int err;

	disk_mutex_lock(&s->lock);
	if (s->expires && (int64_t)time(NULL) >= s->expires)
		err = -EACCES; /* expired, and no refresh has worked since */
	else
		err = fn(arg, &s->cur);
	disk_mutex_unlock(&s->lock);
	return err;
}

int backend__credsrc_bearer(struct backend_credsrc *s)
{
	int bearer;

	disk_mutex_lock(&s->lock);
	bearer = s->cur.bearer != NULL;
	disk_mutex_unlock(&s->lock);
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
		backend__creds_why(why, whycap, "the credentials it gave have expired already");
		return -EACCES;
	}
	s->refresh_at = refresh_plan(now, exp);
	err = pthread_create(&s->thread, NULL, src_thread, s);
	if (err) {
		backend__creds_why(why, whycap, "cannot start the refresh thread: %s",
				   strerror(err));
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

/* Why the value v of field cannot be sent, into why: a key id and a session
 * token go into a header as they are (printable ASCII, no blank), a secret
 * is the key of an HMAC (no control character, no blank at either end), so
 * a line break or blank pasted with a value would make every request fail
 * with a reason that names neither. 0 when it can be sent, else -EACCES.
 * Never quotes the value (a secret). */
static int creds_unsendable(const char *field, const char *v, int secret, char *why, size_t whycap)
{
	size_t n = strlen(v);

	for (size_t i = 0; i < n; i++) {
		unsigned char c = (unsigned char)v[i];
		const char *what = NULL;

		if (c == '\n' || c == '\r')
			what = "a line break";
		else if (c < 0x20 || c == 0x7f)
			what = "a control character";
		else if (c >= 0x80 && !secret)
			what = "a byte outside ASCII";
		else if (c == ' ' && (!secret || i == 0 || i == n - 1))
			what = "a space";
		if (what) {
			backend__creds_why(why, whycap,
					   "%s has %s at byte %zu of %zu (copied with the value?): "
					   "the store would refuse every request; set it again "
					   "without it",
					   field, what, i + 1, n);
			return -EACCES;
		}
	}
	return 0;
}

/* creds_unsendable of each value of st that is set; fields: the names of
 * the key id, the secret and the session token where they were read. */
static int creds_check(const struct backend_creds *st, const char *const fields[3], char *why,
		       size_t whycap)
{
	if (st->access_key && creds_unsendable(fields[0], st->access_key, 0, why, whycap) < 0)
		return -EACCES;
	if (st->secret_key && creds_unsendable(fields[1], st->secret_key, 1, why, whycap) < 0)
		return -EACCES;
	if (st->session_token && creds_unsendable(fields[2], st->session_token, 0, why, whycap) < 0)
		return -EACCES;
	return 0;
}

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
	static const char *const aws_fields[3] = {"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY",
						  "AWS_SESSION_TOKEN"};
	static const char *const gcs_fields[3] = {"GCS_HMAC_ACCESS_ID", "GCS_HMAC_SECRET", ""};
	const char *const *fields = aws_fields;
	const char *name = "the environment (AWS_ACCESS_KEY_ID)";
	int err;

	if (ch->gcs) {
		char *tok = NULL;

		memset(&st, 0, sizeof(st));
		err = backend__creds_env_secret("GOOGLE_OAUTH_ACCESS_TOKEN", &tok);
		if (err < 0)
			return err;
		if (tok) {
			if (creds_unsendable("GOOGLE_OAUTH_ACCESS_TOKEN", tok, 0, why, whycap) <
			    0) {
				backend__creds_secret_free(tok);
				return -EACCES;
			}
			st.bearer = tok;
			name = "the environment (GOOGLE_OAUTH_ACCESS_TOKEN)";
			goto found;
		}
		err = backend__creds_from_env(&st, "GCS_HMAC_ACCESS_ID", "GCS_HMAC_SECRET", NULL);
		if (err < 0)
			return err;
		if (err > 0) {
			name = "the environment (GCS_HMAC_ACCESS_ID)";
			fields = gcs_fields;
			goto found;
		}
	}
	memset(&st, 0, sizeof(st));
	err = backend__creds_from_env(&st, "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY",
				      "AWS_SESSION_TOKEN");
	if (err <= 0)
		return err;
found:
	if (creds_check(&st, fields, why, whycap) < 0) {
		backend__creds_clear(&st);
		return -EACCES;
	}
	err = src_static(ch, &st, sp);
	if (err > 0)
		snprintf((*sp)->name, sizeof((*sp)->name), "%s", name);
	return err;
}

/* 2. web identity (botocore has it before the credentials file) */
static int link_webid(const struct chain *ch, struct backend_credsrc **sp, char *why, size_t whycap)
{
	const char *sts = backend__creds_env("AWS_ENDPOINT_URL_STS");
	char dflt[128], region[64], sess[64];
	struct backend_credsrc *s;

	if (ch->gcs || !backend__creds_env("AWS_WEB_IDENTITY_TOKEN_FILE") ||
	    !backend__creds_env("AWS_ROLE_ARN"))
		return 0;
	if (!sts)
		sts = backend__creds_env("AWS_ENDPOINT_URL");
	backend__aws_region(region, sizeof(region));
	snprintf(dflt, sizeof(dflt), "https://sts.%s.amazonaws.com", region);
	snprintf(sess, sizeof(sess), "shardfs-%lld", (long long)time(NULL));
	s = *sp = src_new(SRC_WEBID, ch->label, ch->ca_file, ch->log);
	if (!s)
		return -ENOMEM;
	s->token_file = strdup(backend__creds_env("AWS_WEB_IDENTITY_TOKEN_FILE"));
	s->role_arn = strdup(backend__creds_env("AWS_ROLE_ARN"));
	s->session_name = dup_or(backend__creds_env("AWS_ROLE_SESSION_NAME"), sess);
	s->url = dup_or(sts, dflt);
	s->timeout_ms = 10000;
	if (!s->token_file || !s->role_arn || !s->session_name || !s->url)
		return -ENOMEM;
	if (backend__endpoint_parse(&(struct backend_endpoint){0}, s->url) < 0) {
		backend__creds_why(why, whycap, "web identity: bad STS endpoint URL %s", s->url);
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
	const char *file = backend__creds_env("AWS_SHARED_CREDENTIALS_FILE");
	struct backend_creds st;
	char fields[3][160];
	int err;

	if (!file) {
		const char *home = backend__creds_env("HOME");

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
	snprintf(fields[0], sizeof(fields[0]), "aws_access_key_id of profile %.100s", ch->profile);
	snprintf(fields[1], sizeof(fields[1]), "aws_secret_access_key of profile %.100s",
		 ch->profile);
	snprintf(fields[2], sizeof(fields[2]), "aws_session_token of profile %.100s", ch->profile);
	if (creds_check(&st, (const char *const[3]){fields[0], fields[1], fields[2]}, why, whycap) <
	    0) {
		char tmp[512];

		snprintf(tmp, sizeof(tmp), "%s", why);
		backend__creds_why(why, whycap, "%.300s: %s", file, tmp);
		backend__creds_clear(&st);
		return -EACCES;
	}
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
	err = backend__creds_find_process(ch->profile, &cmd);
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
	const char *rel = backend__creds_env("AWS_CONTAINER_CREDENTIALS_RELATIVE_URI");
	const char *full = backend__creds_env("AWS_CONTAINER_CREDENTIALS_FULL_URI");
	const char *tokfile = backend__creds_env("AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE");
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
		backend__creds_why(
		    why, whycap,
		    "container credentials: %s must be https or a loopback/ECS/EKS address", url);
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
	backend__creds_why(why, whycap, "%s: %s", what, tmp);
	backend__credsrc_close(*sp);
	*sp = NULL;
	/* as botocore: an unreachable metadata service means "no credentials" */
	return err == -ETIMEDOUT || err == -EIO || (quiet_enoent && err == -ENOENT) ? 0 : err;
}

/* 6. the EC2 instance metadata service */
static int link_imds(const struct chain *ch, struct backend_credsrc **sp, char *why, size_t whycap)
{
	const char *ep = backend__creds_env("AWS_EC2_METADATA_SERVICE_ENDPOINT");
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
	s->url = dup_or(backend__creds_env("GCE_METADATA_HOST"), "metadata.google.internal");
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
	struct chain ch = {gcs, 0, ca_file, label, log, backend__creds_env("AWS_PROFILE")};
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
			backend__creds_why(why, whycap, "%s: %s", s->name, tmp);
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
