/*
 * fs_man.c — shardfs-gen, run at build time (never installed): writes on
 * stdout what is generated from the option tables (fs/core/fs_opt.c), the
 * counters' table (fs/core/fs_ctl.c) and the commands' own --help texts,
 * so that --help, the man pages, the mount helper and the completion
 * cannot disagree:
 *   shardfs-gen man1 BINDIR        shardfs(1)
 *   shardfs-gen man8 BINDIR        mount.shardfs(8)
 *   shardfs-gen helper BINDIR      the mount(8) helper mount.shardfs (sh)
 *   shardfs-gen completion         bash completion of shardfs
 *   shardfs-gen options            every mount option, one a line:
 *                                  NAME TAB flag|value TAB helper|refused
 * Exit status 0, or 1 after a message on stderr (a write error, or a
 * command's --help that could not be captured), 2 for a wrong command line.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fs_core.h"
#include "fs_core_ctl.h"
#include "fs_core_opt.h"
#include "fs_tools.h"
#include "shardfs_config.h"

/* Mount options that make no sense in /etc/fstab: the helper must return
 * once the mount is ready, and -o is what the helper itself builds. */
static const char *const helper_refused[] = {"foreground", "debug", "option", NULL};

/* Mount options of mount(8) itself (or of systemd's fstab generator),
 * which it may hand to the helper: dropped. */
static const char *const helper_dropped =
    "_netdev noauto auto nofail user users owner group defaults rw ro comment=* x-*";

static int is_refused(const char *name)
{
	for (int i = 0; helper_refused[i]; i++)
		if (strcmp(helper_refused[i], name) == 0)
			return 1;
	return 0;
}

/* Text for roff: '\' as \e, '-' as \-, a leading '.' or '\'' guarded. */
static void roff(const char *s)
{
	int bol = 1;

	for (; *s; s++) {
		if (bol && (*s == '.' || *s == '\''))
			fputs("\\&", stdout);
		bol = *s == '\n';
		if (*s == '\\')
			fputs("\\e", stdout);
		else if (*s == '-')
			fputs("\\-", stdout);
		else
			putchar(*s);
	}
}

/* The value's kind and unit, for the man pages. */
static const char *unit(const struct fs_opt *o)
{
	switch (o->type) {
	case FS_OPT_SIZE:
	case FS_OPT_SIZE32:
		return "Bytes: digits with an optional K, M, G or T suffix (powers of 1024)";
	case FS_OPT_SECONDS:
		return "Seconds, decimal (a fraction allowed)";
	case FS_OPT_UINT:
	case FS_OPT_U64:
		return "An integer";
	case FS_OPT_ENUM:
		return "One of the names shown";
	default:
		return NULL;
	}
}

/* One option as a .TP paragraph: how it is written (as --NAME on the
 * command line or NAME=VALUE in fstab), its help, default, unit, range. */
static void man_opt(const struct fs_opt *o, int fstab)
{
	const char *u = unit(o);

	printf(".TP\n");
	if (fstab) {
		printf("\\fB");
		roff(o->lng);
		printf("\\fR");
	} else {
		if (o->shrt)
			printf("\\fB\\-%c\\fR, ", o->shrt);
		printf("\\fB\\-\\-");
		roff(o->lng);
		printf("\\fR");
	}
	if (o->arg) {
		printf(fstab ? "=\\fI" : " \\fI");
		roff(o->arg);
		printf("\\fR");
	}
	printf("\n");
	roff(o->help);
	printf(".\n");
	if (o->def || u) {
		printf(".br\n");
		if (o->def) {
			printf("Default: \\fB");
			roff(o->def);
			printf("\\fR.");
		}
		if (u) {
			printf("%s", o->def ? " " : "");
			roff(u);
			if ((o->type == FS_OPT_UINT || o->type == FS_OPT_U64) &&
			    o->max != UINT64_MAX)
				printf(" from %llu to %llu", (unsigned long long)o->min,
				       (unsigned long long)o->max);
			else if (o->type == FS_OPT_SECONDS)
				printf(o->min ? ", more than 0, up to 1e9" : ", 0 to 1e9");
			else if (o->min && o->type != FS_OPT_ENUM)
				printf(", at least %llu", (unsigned long long)o->min);
			printf(".");
		}
		printf("\n");
	}
}

/* 1 when option name is one of cmd's. */
static int cmd_has(const struct fs_opt_cmd *cmd, const char *name)
{
	for (const struct fs_opt *const *g = cmd->groups; *g; g++)
		for (const struct fs_opt *o = *g; o->lng; o++)
			if (strcmp(o->lng, name) == 0)
				return 1;
	return 0;
}

/* What main(argc, argv) prints on stdout, in a malloc'd string (NULL after
 * a message on stderr): the commands' --help texts. */
static char *capture(int (*fn)(int, char **), const char *arg)
{
	char *argv[] = {(char *)arg, NULL}, *buf = NULL;
	FILE *tmp = tmpfile();
	int saved = dup(STDOUT_FILENO);
	long n;

	if (!tmp || saved < 0) {
		fprintf(stderr, "shardfs-gen: cannot capture a help text: %s\n", strerror(errno));
		goto out;
	}
	fflush(stdout);
	dup2(fileno(tmp), STDOUT_FILENO);
	fn(1, argv);
	fflush(stdout);
	dup2(saved, STDOUT_FILENO);
	n = ftell(tmp);
	if (n <= 0 || fseek(tmp, 0, SEEK_SET) < 0 || !(buf = calloc(1, (size_t)n + 1)) ||
	    fread(buf, 1, (size_t)n, tmp) != (size_t)n) {
		fprintf(stderr, "shardfs-gen: cannot capture a help text\n");
		free(buf);
		buf = NULL;
	}
out:
	if (saved >= 0)
		close(saved);
	if (tmp)
		fclose(tmp);
	return buf;
}

static const struct {
	const char *name;
	int (*fn)(int, char **);
} client_cmds[] = {
    {"umount", fs_umount_main},	  {"stats", fs_stats_main}, {"prefetch", fs_prefetch_main},
    {"refresh", fs_refresh_main}, {"plan", fs_plan_main},   {"pack", fs_pack_main},
};
#define NCLIENT (sizeof(client_cmds) / sizeof(client_cmds[0]))

static const char credentials[] =
    "Credentials come from the environment, never from the command line or fstab.\n"
    "S3: AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN, AWS_PROFILE\n"
    "(credential_process and keys in ~/.aws), AWS_REGION, AWS_ENDPOINT_URL; on EC2\n"
    "without any of them, the instance role (IMDSv2), refreshed while the mount runs.\n"
    "GCS: GCS_HMAC_ACCESS_ID and GCS_HMAC_SECRET, or GOOGLE_OAUTH_ACCESS_TOKEN; on GCE\n"
    "the VM's service account. AIStore: AIS_ENDPOINT. --no-sign sends anonymous\n"
    "requests. The log says which source of credentials was used.\n";

static const char *const ctl_doc[FS_CTL_COUNT] = {
    "the control directory at the mount's root",
    "the counters below as one JSON object ('shardfs stats' prints it)",
    "the counters in Prometheus' text format (counters named shardfs_NAME_total)",
    "write a command: 'refresh', 'prefetch PATH', 'plan ...' (the client commands use it)",
    "the reading plans published with 'shardfs plan': paths, read, position",
};

/* man1's COMMANDS: mount, index (the options it adds) and each client
 * command's --help. -1 if a command's help cannot be captured. */
static int man1_commands(void)
{
	printf(".SH COMMANDS\n.SS mount\n");
	roff(fs_opt_mount_cmd.about);
	printf("Its options are listed under MOUNT OPTIONS.\n.SS index\n");
	roff(fs_opt_index_cmd.about);
	printf(
	    "It takes the options of \\fBmount\\fR that concern the cache and the store, and:\n");
	for (const struct fs_opt *const *g = fs_opt_index_cmd.groups; *g; g++)
		for (const struct fs_opt *o = *g; o->lng; o++)
			if (!cmd_has(&fs_opt_mount_cmd, o->lng))
				man_opt(o, 0);
	for (size_t i = 0; i < NCLIENT; i++) {
		char *text = capture(client_cmds[i].fn, "--help");

		if (!text)
			return -1;
		printf(".SS %s\n.nf\n", client_cmds[i].name);
		roff(text);
		printf(".fi\n");
		free(text);
	}
	return 0;
}

/* man1's CONTROL FILES and COUNTERS, from the control files' names and the
 * counters' table. */
static void man1_control_files(void)
{
	const char *name, *help;
	int gauge;

	printf(".SH CONTROL FILES\nEvery mount has a directory \\fB%s\\fR at its root:\n",
	       fs_ctl_names[FS_CTL_DIR]);
	for (int i = 0; i < FS_CTL_COUNT; i++) {
		printf(".TP\n\\fB");
		if (i)
			roff(fs_ctl_names[FS_CTL_DIR]), printf("/");
		roff(fs_ctl_names[i]);
		printf("\\fR\n");
		roff(ctl_doc[i]);
		printf("\n");
	}
	printf(".SH COUNTERS\nThe fields of \\fB.shardfs/stats\\fR (\\fBshardfs stats\\fR), "
	       "each also in \\fB.shardfs/metrics\\fR as\n\\fBshardfs_NAME\\fR (a counter with "
	       "_total, a time in _seconds). A gauge is a value now,\na counter a count since "
	       "the mount.\n");
	for (size_t i = 0; fs_ctl_counter_doc(i, &name, &help, &gauge) == 0; i++) {
		printf(".TP\n\\fB");
		roff(name);
		printf("\\fR (%s)\n", gauge ? "gauge" : "counter");
		roff(help);
		printf("\n");
	}
}

static int gen_man1(const char *bindir)
{
	printf(".\\\" Generated by shardfs-gen man1 from the option tables; do not edit.\n"
	       ".TH SHARDFS 1 \"\" \"shardfs %s\" \"User Commands\"\n"
	       ".SH NAME\nshardfs \\- mount WebDataset tar shards as a read\\-only directory\n"
	       ".SH SYNOPSIS\n.B shardfs\n.I COMMAND\n[\\fIARGS\\fR]\n.br\n"
	       ".B shardfs mount\n[\\fIOPTIONS\\fR] \\fISOURCE MOUNTPOINT\\fR\n"
	       ".SH DESCRIPTION\n"
	       "shardfs is a FUSE filesystem: every shard of a WebDataset dataset (tar, tar.gz,\n"
	       "tar.zst) shows as its raw file and as a directory of its members, or, with\n"
	       "\\fB\\-\\-layout imagefolder\\fR, as \\fIclass\\fR/\\fIimage\\fR files. Remote "
	       "sources are read\nthrough a cache directory on local disk.\n",
	       SHARDFS_VERSION);
	if (man1_commands() < 0)
		return 1;
	printf(
	    ".SH MOUNT OPTIONS\n"
	    "Each option is written \\fB\\-\\-NAME VALUE\\fR or \\fB\\-\\-NAME=VALUE\\fR on the "
	    "command line, and\n\\fBNAME=VALUE\\fR in /etc/fstab (see \\fBmount.shardfs\\fR(8)). "
	    "A value out of range is\nan error naming the option.\n");
	for (const struct fs_opt *const *g = fs_opt_mount_cmd.groups; *g; g++)
		for (const struct fs_opt *o = *g; o->lng; o++)
			man_opt(o, 0);
	printf(".SH SOURCES\n");
	roff(fs_opt_sources_help);
	printf(".SH CREDENTIALS\n");
	roff(credentials);
	man1_control_files();
	printf(".SH EXIT STATUS\n"
	       "0 on success (\\fBmount\\fR: once the mount answers); 1 when the command failed, "
	       "after a\nmessage on stderr naming the file, option or source; 2 for a wrong "
	       "command line.\n\\fBprefetch\\fR's statuses are in its section above.\n"
	       ".SH FILES\n.TP\n\\fB%s/shardfs\\fR\nthe command\n"
	       ".TP\n\\fB/sbin/mount.shardfs\\fR\nthe helper of \\fBmount \\-t shardfs\\fR and "
	       "/etc/fstab, see \\fBmount.shardfs\\fR(8)\n"
	       ".TP\n\\fBshardfs@.service\\fR\nsystemd unit, one instance per dataset: "
	       "\\fBsystemctl enable \\-\\-now shardfs@NAME\\fR\nmounts what "
	       "\\fB/etc/shardfs/NAME.env\\fR says (SOURCE, MOUNTPOINT, OPTIONS, and\nthe "
	       "credentials' variables; mode 0600)\n"
	       ".TP\n\\fB$XDG_CACHE_HOME/shardfs\\fR, \\fB~/.cache/shardfs\\fR\nthe default cache "
	       "directory (\\fB/var/cache/shardfs\\fR without HOME); the daemon's log\nis "
	       "\\fIlog\\fR in the source's directory there\n",
	       bindir);
	printf(".SH EXAMPLES\n.nf\n"
	       "shardfs mount /data/shards /mnt/ds && ls /mnt/ds\n"
	       "shardfs mount \\-\\-layout imagefolder \\-\\-cache\\-size 200G "
	       "s3://bucket/imagenet/ /mnt/in\n"
	       "shardfs stats /mnt/in\n"
	       "shardfs umount /mnt/in\n"
	       "# /etc/fstab\n"
	       "/data/shards  /mnt/ds  shardfs  ro,nofail,layout=imagefolder,allow_other  0  0\n"
	       ".fi\n"
	       ".SH SEE ALSO\n\\fBmount.shardfs\\fR(8), \\fBmount\\fR(8), \\fBfstab\\fR(5), "
	       "\\fBfusermount3\\fR(1)\n");
	return 0;
}

static int gen_man8(const char *bindir)
{
	printf(".\\\" Generated by shardfs-gen man8 from the option tables; do not edit.\n"
	       ".TH MOUNT.SHARDFS 8 \"\" \"shardfs %s\" \"System Administration\"\n"
	       ".SH NAME\nmount.shardfs \\- mount a shardfs dataset from mount(8) and /etc/fstab\n"
	       ".SH SYNOPSIS\n.B mount \\-t shardfs\n\\fISOURCE MOUNTPOINT\\fR [\\fB\\-o\\fR "
	       "\\fIOPTIONS\\fR]\n.br\n.B mount.shardfs\n\\fISOURCE MOUNTPOINT\\fR "
	       "[\\fB\\-sfnv\\fR] [\\fB\\-o\\fR \\fIOPTIONS\\fR]\n"
	       ".SH DESCRIPTION\n"
	       "\\fBmount\\fR(8) runs this helper for the filesystem types \\fBshardfs\\fR and "
	       "\\fBfuse.shardfs\\fR.\nIt runs \\fB%s/shardfs mount\\fR with each shardfs option "
	       "of \\fIOPTIONS\\fR as\n\\fB\\-\\-NAME\\fR[\\fB=VALUE\\fR] and returns once the "
	       "mount is ready (or with the error).\nThe options of mount(8) itself (%s) are "
	       "dropped; the mount is read\\-only\nwhatever they say. \\fBsuid\\fR and \\fBdev\\fR "
	       "are refused: a dataset's files never run set\\-user\\-ID\nnor open devices (the "
	       "mount is always nosuid and nodev; mount(8) itself does not\nhand \\fBsuid\\fR "
	       "and \\fBdev\\fR to a helper, they are its defaults). Every "
	       "other option goes to FUSE (\\fBallow_other\\fR,\n\\fBdefault_permissions\\fR, "
	       "\\fBnonempty\\fR, \\fBnoatime\\fR, \\fBnoexec\\fR, ...), which refuses one it "
	       "does not know.\nA value cannot contain a comma. \\-f (fake) does nothing, \\-v "
	       "prints the command\nbefore running it, \\-s and \\-n are accepted and ignored.\n"
	       ".SH OPTIONS\nEvery mount option of \\fBshardfs\\fR(1), written \\fBNAME\\fR or "
	       "\\fBNAME=VALUE\\fR:\n",
	       SHARDFS_VERSION, bindir, helper_dropped);
	for (const struct fs_opt *const *g = fs_opt_mount_cmd.groups; *g; g++)
		for (const struct fs_opt *o = *g; o->lng; o++)
			if (!is_refused(o->lng))
				man_opt(o, 1);
	printf(".PP\nNot in fstab: ");
	for (int i = 0; helper_refused[i]; i++)
		printf("%s\\fB%s\\fR", i ? ", " : "", helper_refused[i]);
	printf(" (the helper must return once the mount is ready; the systemd unit\n"
	       "runs \\fBshardfs mount \\-f\\fR instead).\n"
	       ".SH EXAMPLES\n.nf\n"
	       "# /etc/fstab: a local directory and an S3 prefix\n"
	       "/data/shards          /mnt/ds  shardfs  ro,nofail,xattr,allow_other  0  0\n"
	       "s3://bucket/imagenet/ /mnt/in  shardfs  "
	       "_netdev,nofail,layout=imagefolder,cache\\-dir=/var/cache/shardfs,cache\\-size=200G"
	       "  0  0\n"
	       "mount /mnt/ds\n"
	       "mount \\-t shardfs \\-o warm=all /data/shards /mnt/ds\n"
	       ".fi\n.PP\n"
	       "Credentials for a remote source come from the environment of mount(8) (at boot,\n"
	       "none: use the instance's role, or the systemd unit and its env file), see\n"
	       "\\fBshardfs\\fR(1).\n"
	       ".SH EXIT STATUS\n0 once mounted, 1 on an error (said on stderr).\n"
	       ".SH ENVIRONMENT\n\\fBSHARDFS_BIN\\fR, when set, is the command run instead of "
	       "\\fB%s/shardfs\\fR.\n"
	       ".SH SEE ALSO\n\\fBshardfs\\fR(1), \\fBmount\\fR(8), \\fBfstab\\fR(5)\n",
	       bindir);
	return 0;
}

/* The helper's mount options that are flags (or that take a value), as a
 * case pattern, each name followed by suffix. */
static void shell_names(int flags, const char *suffix)
{
	int n = 0;

	for (const struct fs_opt *const *g = fs_opt_mount_cmd.groups; *g; g++)
		for (const struct fs_opt *o = *g; o->lng; o++)
			if (!is_refused(o->lng) && (o->type == FS_OPT_FLAG) == flags)
				printf("%s%s%s", n++ ? " | " : "", o->lng, suffix);
}

static int gen_helper(const char *bindir)
{
	printf("#!/bin/sh\n"
	       "# mount.shardfs: the mount(8) helper of shardfs (types shardfs and fuse.shardfs).\n"
	       "# Generated by shardfs-gen helper from the option tables; see mount.shardfs(8).\n"
	       "# mount(8) runs: mount.shardfs SOURCE MOUNTPOINT [-sfnv] [-o OPTS] [-t TYPE]\n"
	       "set -eu\n"
	       "shardfs=${SHARDFS_BIN:-%s/shardfs}\n"
	       "say() { echo \"mount.shardfs: $*\" >&2; }\n"
	       "[ $# -ge 2 ] || { say \"usage: mount.shardfs SOURCE MOUNTPOINT [-o OPTIONS]\"; "
	       "exit 1; }\n"
	       "src=$1\nmnt=$2\nshift 2\n"
	       "opts='' fake=0 verbose=0\n"
	       "while [ $# -gt 0 ]; do\n"
	       "\tcase \"$1\" in\n"
	       "\t-o) [ $# -ge 2 ] || { say \"-o needs OPTIONS\"; exit 1; }\n"
	       "\t\topts=\"${opts:+$opts,}$2\"; shift 2 ;;\n"
	       "\t-o*) opts=\"${opts:+$opts,}${1#-o}\"; shift ;;\n"
	       "\t-t | -N) shift 2 ;;\n"
	       "\t-*) case \"$1\" in *f*) fake=1 ;; esac\n"
	       "\t\tcase \"$1\" in *v*) verbose=1 ;; esac\n"
	       "\t\tshift ;;\n"
	       "\t*) say \"unexpected argument '$1'\"; exit 1 ;;\n"
	       "\tesac\n"
	       "done\n"
	       "set -- mount\n"
	       "fuse=''\n"
	       "IFS=,\n"
	       "for o in $opts; do\n"
	       "\tcase \"$o\" in\n"
	       "\t'' | _netdev | noauto | auto | nofail | user | users | owner | group | "
	       "defaults | rw | ro | \\\n"
	       "\t\tcomment=* | x-*) ;;\n"
	       "\tsuid | dev)\n"
	       "\t\tsay \"option '$o' refused: a dataset's files never run set-user-ID nor "
	       "open devices\"\n"
	       "\t\texit 1 ;;\n",
	       bindir);
	printf("\t");
	for (int i = 0; helper_refused[i]; i++)
		printf("%s%s | %s=*", i ? " | " : "", helper_refused[i], helper_refused[i]);
	printf(")\n\t\tsay \"option '$o' is not for fstab (the helper returns once mounted; "
	       "'shardfs mount -f' is the systemd unit's)\"\n"
	       "\t\texit 1 ;;\n\t");
	shell_names(0, "=*");
	printf(" | \\\n\t\t");
	shell_names(1, "");
	printf(")\n\t\tset -- \"$@\" \"--$o\" ;;\n\t");
	/* a value option without its value, a flag with one: said here, not
	 * by FUSE (which would be handed them) */
	shell_names(0, "");
	printf(")\n\t\tsay \"option '$o' needs a value: $o=VALUE (see mount.shardfs(8))\"\n"
	       "\t\texit 1 ;;\n\t");
	shell_names(1, "=*");
	printf(")\n\t\tsay \"option '${o%%%%=*}' takes no value\"\n\t\texit 1 ;;\n"
	       "\t*) fuse=\"${fuse:+$fuse,}$o\" ;;\n"
	       "\tesac\n"
	       "done\n"
	       "unset IFS\n"
	       "[ -n \"$fuse\" ] && set -- \"$@\" -o \"$fuse\"\n"
	       "set -- \"$@\" -- \"$src\" \"$mnt\"\n"
	       "[ \"$verbose\" = 1 ] && say \"$shardfs $*\"\n"
	       "[ \"$fake\" = 1 ] && exit 0\n"
	       "# mount -a runs the helper again for a line that is mounted: mount(8) compares\n"
	       "# fstab's SOURCE with the mount table's shardfs:SOURCE (the source as the mount\n"
	       "# describes it: a local one resolved, a URL without user and password). The same\n"
	       "# source mounted at MOUNTPOINT, and answering, is done.\n"
	       "esc() { printf '%%s' \"$1\" | sed 's/\\\\/\\\\134/g; s/ /\\\\040/g; "
	       "s/\t/\\\\011/g'; }\n"
	       "case \"$src\" in\n"
	       "*://*) real=$(printf '%%s' \"$src\" | sed 's|^\\([a-z0-9]*://\\)[^/@]*@|\\1|') ;;\n"
	       "*) real=$(realpath -e -- \"$src\" 2>/dev/null || printf '%%s' \"$src\") ;;\n"
	       "esac\n"
	       "if S1=\"shardfs:$(esc \"$src\")\" S2=\"shardfs:$(esc \"$real\")\" "
	       "M=$(esc \"$mnt\") \\\n"
	       "\tawk '$2 == ENVIRON[\"M\"] { top = $3 == \"fuse.shardfs\" && "
	       "($1 == ENVIRON[\"S1\"] || $1 == ENVIRON[\"S2\"]) }\n"
	       "\t\tEND { exit !top }' /proc/self/mounts && stat -f -- \"$mnt\" >/dev/null "
	       "2>&1; then\n"
	       "\t[ \"$verbose\" = 1 ] && say \"$src is mounted at $mnt already\"\n"
	       "\texit 0\n"
	       "fi\n"
	       "exec \"$shardfs\" \"$@\"\n");
	return 0;
}

/* The completion's words of one command's option tables: every option
 * (what), the options that take a value (value), or the case arms that
 * complete a value: enum names, files (FILE), directories (DIR). */
static void comp_opts(const struct fs_opt_cmd *c, const char *what)
{
	for (const struct fs_opt *const *g = c->groups; *g; g++)
		for (const struct fs_opt *o = *g; o->lng; o++) {
			if (strcmp(what, "all") == 0) {
				printf("--%s ", o->lng);
			} else if (strcmp(what, "value") == 0) {
				if (o->type != FS_OPT_FLAG)
					printf("|--%s", o->lng);
			} else if (o->arg && strchr(o->arg, '|')) {
				printf("\t%s,--%s) COMPREPLY=($(compgen -W '", c->name, o->lng);
				for (const char *p = o->arg; *p; p++)
					putchar(*p == '|' ? ' ' : *p);
				printf("' -- \"$cur\")) ;;\n");
			} else if (o->arg &&
				   (strcmp(o->arg, "FILE") == 0 || strcmp(o->arg, "DIR") == 0)) {
				printf("\t%s,--%s) COMPREPLY=($(compgen -%c -- \"$cur\")) ;;\n",
				       c->name, o->lng, o->arg[0] == 'F' ? 'f' : 'd');
			} else if (o->type != FS_OPT_FLAG) {
				printf("\t%s,--%s) COMPREPLY=() ;;\n", c->name, o->lng);
			}
		}
}

static int gen_completion(void)
{
	const struct fs_opt_cmd *const cmds[] = {&fs_opt_mount_cmd, &fs_opt_index_cmd,
						 &fs_pack_cmd};

	printf("# bash completion of shardfs. Generated by shardfs-gen completion from the "
	       "option tables.\n"
	       "_shardfs() {\n"
	       "\tlocal cur=${COMP_WORDS[COMP_CWORD]} prev=${COMP_WORDS[COMP_CWORD-1]}\n"
	       "\tlocal cmd=${COMP_WORDS[1]} i n=0\n"
	       "\tif [ \"$COMP_CWORD\" -eq 1 ]; then\n"
	       "\t\tCOMPREPLY=($(compgen -W 'mount umount stats prefetch refresh plan index "
	       "pack --help --version' -- \"$cur\"))\n"
	       "\t\treturn\n"
	       "\tfi\n"
	       "\t# the value of an option\n"
	       "\tcase \"$cmd,$prev\" in\n");
	for (size_t i = 0; i < sizeof(cmds) / sizeof(cmds[0]); i++)
		comp_opts(cmds[i], "arms");
	printf("\tmount,-o) COMPREPLY=() ;;\n"
	       "\tplan,--name) COMPREPLY=() ;;\n"
	       "\t*) false ;;\n"
	       "\tesac && return\n"
	       "\t# which positional argument cur is (the values of options skipped)\n"
	       "\tfor ((i = 2; i < COMP_CWORD; i++)); do\n"
	       "\t\tcase \"${COMP_WORDS[i]}\" in\n"
	       "\t\t-o | --name");
	for (size_t i = 0; i < sizeof(cmds) / sizeof(cmds[0]); i++)
		comp_opts(cmds[i], "value");
	printf(") i=$((i + 1)) ;;\n"
	       "\t\t-*) ;;\n"
	       "\t\t*) n=$((n + 1)) ;;\n"
	       "\t\tesac\n"
	       "\tdone\n"
	       "\tcase \"$cmd,$cur\" in\n");
	for (size_t i = 0; i < sizeof(cmds) / sizeof(cmds[0]); i++) {
		printf("\t%s,-*) COMPREPLY=($(compgen -W '", cmds[i]->name);
		comp_opts(cmds[i], "all");
		printf("--help' -- \"$cur\")) ;;\n");
	}
	printf("\tumount,-*) COMPREPLY=($(compgen -W '--force --stale --help' -- \"$cur\")) ;;\n"
	       "\tplan,-*) COMPREPLY=($(compgen -W '--name --clear --help' -- \"$cur\")) ;;\n"
	       "\t*,-*) COMPREPLY=($(compgen -W '--help' -- \"$cur\")) ;;\n"
	       "\t# plan MOUNTPOINT FILE, prefetch MOUNTPOINT PATH..., pack INPUT_DIR PREFIX\n"
	       "\tplan,* | prefetch,* | pack,*) if [ \"$n\" -ge 1 ]; then\n"
	       "\t\tCOMPREPLY=($(compgen -f -- \"$cur\"))\n"
	       "\telse\n"
	       "\t\tCOMPREPLY=($(compgen -d -- \"$cur\"))\n"
	       "\tfi ;;\n"
	       "\t*) COMPREPLY=($(compgen -d -- \"$cur\")) ;;\n"
	       "\tesac\n"
	       "}\n"
	       "complete -o filenames -F _shardfs shardfs\n");
	return 0;
}

static int gen_options(void)
{
	for (const struct fs_opt *const *g = fs_opt_mount_cmd.groups; *g; g++)
		for (const struct fs_opt *o = *g; o->lng; o++)
			printf("%s\t%s\t%s\n", o->lng, o->type == FS_OPT_FLAG ? "flag" : "value",
			       is_refused(o->lng) ? "refused" : "helper");
	return 0;
}

int main(int argc, char **argv)
{
	const char *what = argc > 1 ? argv[1] : "";
	const char *dir = argc > 2 ? argv[2] : "/usr/bin";
	int rc = 2;

	if (strcmp(what, "man1") == 0)
		rc = gen_man1(dir);
	else if (strcmp(what, "man8") == 0)
		rc = gen_man8(dir);
	else if (strcmp(what, "helper") == 0)
		rc = gen_helper(dir);
	else if (strcmp(what, "completion") == 0)
		rc = gen_completion();
	else if (strcmp(what, "options") == 0)
		rc = gen_options();
	else
		fprintf(
		    stderr,
		    "usage: shardfs-gen man1|man8|helper BINDIR, shardfs-gen completion|options\n");
	if (rc == 0 && (fflush(stdout) != 0 || ferror(stdout))) {
		fprintf(stderr, "shardfs-gen: cannot write: %s\n", strerror(errno));
		return 1;
	}
	return rc;
}
