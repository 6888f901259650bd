/*
 * backend_creds_file.c — the static sources: where object-store
 * credentials, regions and endpoints come from in the environment and the
 * usual files, never argv (docs/design.md section 1). No network.
 *
 * What the chain's static links read (backend__credsrc_open,
 * backend_creds_chain.c, which tries the environment first): the
 * [AWS_PROFILE] section ("default" when unset) of
 * AWS_SHARED_CREDENTIALS_FILE or ~/.aws/credentials (backend__creds_file),
 * through the INI reader of the credentials and config files, and a
 * profile's credential_process line (backend__creds_find_process). A credentials file is read
 * straight into secret memory (backend_creds_secret.c).
 *
 * Non-goals: SSO and assume-role profiles (role_arn + source_profile).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "backend_creds_i.h"

/* ---- sources ---------------------------------------------------------------- */

const char *backend__creds_env(const char *name)
{
	const char *v = getenv(name);

	return v && *v ? v : NULL;
}

/* *dst = a heap copy of s[0..n) (the access key id: not a secret) */
int backend__creds_set_plain(char **dst, const char *s, size_t n)
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
	char *d = backend__creds_secret_dup(s, n);

	if (!d)
		return -ENOMEM;
	backend__creds_secret_free(*dst);
	*dst = d;
	return 0;
}

int backend__creds_from_env(struct backend_creds *c, const char *id_var, const char *secret_var,
			    const char *token_var)
{
	const char *id = backend__creds_env(id_var);
	char *secret = NULL, *token = NULL;
	int err;

	err = backend__creds_env_secret(secret_var, &secret);
	if (!err && token_var)
		err = backend__creds_env_secret(token_var, &token);
	if (err < 0 || !id || !secret) {
		backend__creds_secret_free(secret);
		backend__creds_secret_free(token);
		return err;
	}
	err = backend__creds_set_plain(&c->access_key, id, strlen(id));
	if (err < 0) {
		backend__creds_secret_free(secret);
		backend__creds_secret_free(token);
		backend__creds_clear(c);
		return err;
	}
	backend__creds_secret_free(c->secret_key);
	c->secret_key = secret;
	backend__creds_secret_free(c->session_token);
	c->session_token = token;
	return 1;
}

void backend__creds_trim(const char **s, const char **e)
{
	while (*s < *e && (**s == ' ' || **s == '\t'))
		(*s)++;
	while (*e > *s && ((*e)[-1] == ' ' || (*e)[-1] == '\t' || (*e)[-1] == '\r'))
		(*e)--;
}

/* Read a whole small file into secret memory (it holds secrets of every
 * profile); returns 0 with a NUL-terminated buffer to free with
 * backend__creds_secret_free, -ENOENT when it does not exist, -EINVAL when it is not a
 * regular file of at most CREDS_FILE_MAX bytes (backend__creds_slurp_error says so),
 * other negative errnos. Never blocks on a FIFO or device. */
int backend__creds_slurp(const char *path, char **out, size_t *outlen)
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
	buf = backend__creds_secret_alloc((size_t)st.st_size);
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

/* What backend__creds_slurp's err means, for messages. */
const char *backend__creds_slurp_error(int err)
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

	err = backend__creds_slurp(path, &buf, &len);
	if (err < 0)
		return err;
	p = buf;
	end = buf + len;
	while (p < end && err == 0) {
		const char *nl = memchr(p, '\n', (size_t)(end - p));
		const char *e = nl ? nl : end, *s = p, *eq, *ks, *ke, *vs, *ve;

		p = nl ? nl + 1 : end;
		backend__creds_trim(&s, &e);
		if (s == e || *s == '#' || *s == ';')
			continue;
		if (*s == '[') {
			const char *ns = s + 1, *ne = e;

			if (ne[-1] != ']')
				continue;
			ne--;
			backend__creds_trim(&ns, &ne);
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
		backend__creds_trim(&ks, &ke);
		backend__creds_trim(&vs, &ve);
		if (ve > vs)
			err = cb(arg, ks, (size_t)(ke - ks), vs, (size_t)(ve - vs));
	}
	backend__creds_secret_free(buf);
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
		return backend__creds_set_plain(&c->access_key, v, vn);
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

void backend__aws_region(char *buf, size_t cap)
{
	const char *r = backend__creds_env("AWS_REGION");

	if (!r)
		r = backend__creds_env("AWS_DEFAULT_REGION");
	snprintf(buf, cap, "%s", r ? r : "us-east-1");
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
int backend__creds_find_process(const char *profile, char **out)
{
	char path[4096], sect[300];
	const char *home = backend__creds_env("HOME"),
		   *cfile = backend__creds_env("AWS_SHARED_CREDENTIALS_FILE");
	const char *conf = backend__creds_env("AWS_CONFIG_FILE");
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
