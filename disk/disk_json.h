/*
 * disk_json.h — the one JSON reader of shardfs: the credential services'
 * answers (backend_creds_json.c), nginx's JSON autoindex pages
 * (backend_listing.c), the stats control file read back by the CLI
 * (fs/core/fs_ctl.c), and whatever a store answers in JSON next.
 *
 * A pull reader over bytes the caller holds (not NUL-terminated): a cursor
 * (struct disk_json) hands out one value at a time as a token (its type and
 * its bytes in the input); the caller enters the objects and arrays it
 * wants to walk and takes the others whole. Tokens point into the input;
 * strings are unescaped only when asked (disk_json_str, into the caller's
 * buffer). It allocates nothing, never recurses, and never reads outside
 * buf[0..len).
 *
 * Strict RFC 8259 syntax: a string with a control byte, a bad escape or a
 * lone surrogate (\ud800 without its pair), a number with a leading zero or
 * a bare '.', a trailing comma, a cut-short document: each is an error at
 * its offset, with why (a static sentence) in the cursor. Bytes >= 0x80 are
 * passed through as they are (not checked as UTF-8).
 *
 * Limits: nesting at most the max_depth given to disk_json_init (at most
 * DISK_JSON_MAX_DEPTH), deeper is -ELOOP; the size of the input is the
 * caller's bound (each user caps what it reads); a string decodes into at
 * most its token's len bytes with the NUL (a buffer of tok.len always
 * fits).
 *
 * Errors: -EBADMSG malformed or cut short, -ELOOP nested too deep. Once a
 * call failed the cursor stays failed (every later call returns the same
 * error). Reentrant: all state is in the cursor.
 *
 * Non-goals: writing JSON (beyond disk_json_esc), numbers other than
 * unsigned 64-bit integers (a number's text is in its token), UTF-8
 * validation.
 */
#ifndef SHARDFS_DISK_JSON_H
#define SHARDFS_DISK_JSON_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define DISK_JSON_MAX_DEPTH 64

enum disk_json_type {
	DISK_JSON_OBJECT = 1,
	DISK_JSON_ARRAY,
	DISK_JSON_STRING,
	DISK_JSON_NUMBER,
	DISK_JSON_TRUE,
	DISK_JSON_FALSE,
	DISK_JSON_NULL,
};

/* A value in the input: p[0..len) are its bytes (a string with its quotes
 * and its escapes as written; an object or array from its bracket to the
 * closing one). */
struct disk_json_tok {
	enum disk_json_type type;
	const char *p;
	size_t len;
};

/* The cursor. Fields are private but for the failure: why (a static
 * sentence, NULL while none) and at (its offset in the input). */
struct disk_json {
	const char *start, *p, *end;
	uint64_t objs;	    /* bit d: container d (0 the outermost) is an object */
	unsigned depth;	    /* containers entered and not yet closed */
	unsigned max_depth; /* deeper is -ELOOP */
	int state;	    /* in the current container: 0 just entered, 1 after a
			     * value, 2 an item was handed out, its value unread */
	int err;	    /* 0, or the failure every call now returns */
	const char *why;
	size_t at;
};

/* A cursor at the start of buf[0..len); max_depth 0 means DISK_JSON_MAX_DEPTH
 * (a larger one is capped to it). */
void disk_json_init(struct disk_json *j, const void *buf, size_t len, unsigned max_depth);

/* The next value, whole (an object or array is checked to its end and
 * skipped): its token in *t. Returns 0, -EBADMSG, -ELOOP. */
int disk_json_value(struct disk_json *j, struct disk_json_tok *t);

/* Enter the next value, which must be an object or an array as type says
 * (-EBADMSG when it is anything else). Walk it with disk_json_next. */
int disk_json_enter(struct disk_json *j, enum disk_json_type type);

/* In the container entered last: 1 when another item follows, the cursor
 * at its value (read it with disk_json_value or disk_json_enter, or leave
 * it: the next call skips it); for an object *key gets the member's name
 * (a string token; key may be NULL for an array). 0 when the container
 * ended (its bracket consumed: the cursor is in the enclosing one, after
 * it). -EBADMSG, -ELOOP. */
int disk_json_next(struct disk_json *j, struct disk_json_tok *key);

/* The type of the next value (after blanks), from its first byte, without
 * reading it: so a walker can enter an object or array and take a scalar
 * whole. -EBADMSG at the end of the input or at a byte no value starts
 * with (the cursor is not failed by it); the cursor's error once failed. */
int disk_json_peek(struct disk_json *j);

/* After the document's value: 0 when only blanks are left, else -EBADMSG. */
int disk_json_end(struct disk_json *j);

/* Field lookup: the value of the first member named key of the document
 * buf[0..len), which must be one JSON object and nothing else (the whole
 * document is checked, so a malformed one never gives a value). Returns 0
 * with *val, -ENOENT when there is no such member, -EBADMSG (not an object,
 * or malformed anywhere), -ELOOP (deeper than DISK_JSON_MAX_DEPTH).
 * A nested member is found by looking into the object's token:
 *   disk_json_get(body, len, "error", &e) == 0 && e.type == DISK_JSON_OBJECT &&
 *   disk_json_get(e.p, e.len, "message", &m) == 0 && disk_json_str(&m, buf, cap) >= 0 */
int disk_json_get(const void *buf, size_t len, const char *key, struct disk_json_tok *val);

/* The string token t unescaped into out[0..cap), NUL-terminated (\u as
 * UTF-8, a surrogate pair as one 4-byte sequence). Returns its length,
 * -ENOSPC when it does not fit (cap = t->len always does), -EILSEQ when it
 * holds \u0000 (no C string can), -EINVAL when t is not a string. */
ssize_t disk_json_str(const struct disk_json_tok *t, char *out, size_t cap);

/* 1 when the string token t unescapes to exactly z, else 0. No copy. */
int disk_json_streq(const struct disk_json_tok *t, const char *z);

/* The number token t as an unsigned integer: 0 with *v, -ERANGE above
 * UINT64_MAX, -EINVAL for a negative, fractional or exponent number or a
 * token that is not a number. */
int disk_json_u64(const struct disk_json_tok *t, uint64_t *v);

/* The UTF-8 bytes of code point cp (at most 0x10ffff) into out: how many
 * (1-4). For other decoders of escapes (HTML's &#N;). */
size_t disk_json_utf8(uint32_t cp, unsigned char out[4]);

/* Writing: byte c inside a JSON string literal, into out: c itself, \" or
 * \\, or \u00XX for a control byte or DEL. Returns how many bytes (1, 2 or
 * 6). */
size_t disk_json_esc(unsigned char c, char out[8]);

#endif
