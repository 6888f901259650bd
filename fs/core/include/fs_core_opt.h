/*
 * fs_core_opt.h — command lines as data (fs_opt.c): the option tables of
 * mount and index, and the parser a tool uses for its own (pack). Every
 * default is one row of these tables. Part of the core's public API
 * (fs_core.h).
 */
#ifndef FS_CORE_OPT_H
#define FS_CORE_OPT_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

struct fs_config;

/* fs_opt.c: command lines as data. A subcommand is a list of option tables;
 * each option fills one field of the command's config struct. */
enum fs_opt_type {
	FS_OPT_FLAG,	/* int, set to 1 */
	FS_OPT_STR,	/* char *, strdup'd (the previous value freed) */
	FS_OPT_UINT,	/* unsigned, digits only, within [min, max] */
	FS_OPT_U64,	/* uint64_t, digits only, within [min, max] */
	FS_OPT_SIZE,	/* uint64_t: digits and one optional K/M/G/T suffix, within [min, max] */
	FS_OPT_SECONDS, /* double, 0..1e9; min 1: more than 0 */
	FS_OPT_APPEND,	/* char *, values joined with ',' */
	FS_OPT_SIZE32,	/* uint32_t: like SIZE, max at most UINT32_MAX */
	FS_OPT_ENUM,	/* int: the position of the value among arg's '|'-separated names */
};
struct fs_opt {
	const char *lng; /* --lng (NULL ends a table) */
	char shrt;	 /* -c, or 0 */
	enum fs_opt_type type;
	size_t off;	   /* the field, offsetof in the command's config struct */
	size_t given_off;  /* 0, or 1 + offsetof an int set to 1 when the option is given */
	const char *def;   /* the default, parsed like a command-line value before argv
			    * (NULL: none, the field stays zero); --help shows it */
	uint64_t min, max; /* UINT, U64, SIZE: accepted range; SECONDS: min 1 means > 0 */
	const char *arg;   /* the value's name in --help (NULL: a flag) */
	const char *help;
};
struct fs_opt_cmd {
	const char *name;		    /* "mount" */
	const char *synopsis;		    /* "[OPTIONS] SOURCE MOUNTPOINT" */
	const char *about;		    /* paragraph after the usage line */
	const struct fs_opt *const *groups; /* option tables, NULL-terminated */
	int npos;			    /* positional arguments wanted */
};
extern const struct fs_opt_cmd fs_opt_mount_cmd, fs_opt_index_cmd;
/* Apply every default, then parse argv into cfg; the npos positional
 * arguments go to pos. 0, 1 when --help was shown (on stdout), or a
 * negative errno after printing why on stderr. */
int fs_opt_parse(const struct fs_opt_cmd *cmd, void *cfg, int argc, char **argv, const char **pos);
void fs_opt_usage(const struct fs_opt_cmd *cmd, FILE *f);
int fs_opt_parse_mount(int argc, char **argv, struct fs_config *cfg);
int fs_opt_parse_index(int argc, char **argv, struct fs_config *cfg);
void fs_opt_free(struct fs_config *cfg);
/* Digits with one optional K/M/G/T suffix (powers of 1024): 0, -EINVAL,
 * or -ERANGE past 2^64-1. */
int fs_parse_size(const char *s, uint64_t *out);

/* fs_opt.c: say on stderr that the daemon of mountpoint mnt is gone (its
 * mount answers ENOTCONN) and how to clean up. */
void fs_say_dead_mount(const char *mnt);

/* fs_opt.c: what SOURCE may be, for help texts */
extern const char *const fs_opt_sources_help;

#endif
