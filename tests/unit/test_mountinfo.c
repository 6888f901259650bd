/*
 * test_mountinfo.c — the one splitter of /proc/self/mountinfo lines
 * (fs/core/fs_mountinfo.c, fs_mountinfo_split) against a simple reference
 * written here, on hand-made lines and on seeded generated hostile ones
 * (TEST_SEED repeats a run; MOUNTINFO_LINES lines).
 *
 * A generated line has paths (root, mount point, source) of blanks, tabs,
 * newlines, backslashes, '-', digits and bytes over 0x7f, each escaped as
 * the kernel escapes them or written raw; 0 to 3 optional fields, or 55 to
 * 70 (past the splitter's FS_MOUNTINFO_FIELDS_MAX); a separator present,
 * missing or doubled; a good or a bad device field; runs of blanks; extra
 * fields; and in a third of the lines the line cut at a random byte. For
 * each line:
 *   - the splitter accepts it exactly when the reference does, with the
 *     same fields byte for byte;
 *   - a line the kernel could have written (every field escaped and not
 *     empty, not cut) is accepted, its paths unescaped to the bytes
 *     generated;
 *   - a line one of the three splitters it replaced refused (copied below:
 *     fs_plan_path.c's mi_fields, fs_mountid.c's two) is refused.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fs_core_ctl.h"
#include "check.h"
#include "test_rng.h"

#define MOUNTINFO_LINES 20000
#define LINE_MAX_BYTES	4096

static uint64_t rng; /* the generator's state (test_rng.h's rnd) */

/* ---- the reference -------------------------------------------------------- */

struct ref {
	char dev[LINE_MAX_BYTES], root[LINE_MAX_BYTES], point[LINE_MAX_BYTES];
	char options[LINE_MAX_BYTES], type[LINE_MAX_BYTES], source[LINE_MAX_BYTES];
	char super[LINE_MAX_BYTES];
	unsigned major, minor;
};

static int is_octal(char c, char hi)
{
	return c >= '0' && c <= hi;
}

/* \ooo (the first digit 0-3) is the byte; anything else is itself */
static void ref_unescape(const char *in, size_t len, char *out)
{
	size_t o = 0;

	for (size_t i = 0; i < len; i++) {
		if (in[i] == '\\' && i + 3 < len && is_octal(in[i + 1], '3') &&
		    is_octal(in[i + 2], '7') && is_octal(in[i + 3], '7')) {
			out[o++] = (char)(((in[i + 1] - '0') << 6) | ((in[i + 2] - '0') << 3) |
					  (in[i + 3] - '0'));
			i += 3;
		} else {
			out[o++] = in[i];
		}
	}
	out[o] = '\0';
}

/* A device half: 1 to 10 decimal digits, at most 2^32 - 1. */
static int ref_num(const char *s, size_t len, unsigned *v)
{
	uint64_t n = 0;

	if (len == 0 || len > 10)
		return 0;
	for (size_t i = 0; i < len; i++) {
		if (s[i] < '0' || s[i] > '9')
			return 0;
		n = n * 10 + (uint64_t)(s[i] - '0');
	}
	if (n > UINT32_MAX)
		return 0;
	*v = (unsigned)n;
	return 1;
}

/* The line's fields (the line ends at its first newline; fields are the
 * runs of bytes other than ' '), the first FS_MOUNTINFO_FIELDS_MAX of them
 * looked at: 1 accepted with *r filled, 0 refused. */
static int ref_split(const char *line, struct ref *r)
{
	size_t len = strcspn(line, "\n"), start[FS_MOUNTINFO_FIELDS_MAX],
	       flen[FS_MOUNTINFO_FIELDS_MAX];
	int nf = 0, sep = -1;
	const char *colon;

	for (size_t i = 0; i < len && nf < FS_MOUNTINFO_FIELDS_MAX;) {
		if (line[i] == ' ') {
			i++;
			continue;
		}
		start[nf] = i;
		while (i < len && line[i] != ' ')
			i++;
		flen[nf] = i - start[nf];
		nf++;
	}
	for (int i = 6; i < nf - 3; i++)
		if (flen[i] == 1 && line[start[i]] == '-') {
			sep = i;
			break;
		}
	if (sep < 0)
		return 0;
	colon = memchr(line + start[2], ':', flen[2]);
	if (!colon || !ref_num(line + start[2], (size_t)(colon - line - start[2]), &r->major) ||
	    !ref_num(colon + 1, start[2] + flen[2] - (size_t)(colon + 1 - line), &r->minor))
		return 0;
	memcpy(r->dev, line + start[2], flen[2]);
	r->dev[flen[2]] = '\0';
	ref_unescape(line + start[3], flen[3], r->root);
	ref_unescape(line + start[4], flen[4], r->point);
	memcpy(r->options, line + start[5], flen[5]);
	r->options[flen[5]] = '\0';
	memcpy(r->type, line + start[sep + 1], flen[sep + 1]);
	r->type[flen[sep + 1]] = '\0';
	ref_unescape(line + start[sep + 2], flen[sep + 2], r->source);
	memcpy(r->super, line + start[sep + 3], flen[sep + 3]);
	r->super[flen[sep + 3]] = '\0';
	return 1;
}

/* ---- the splitters it replaced (as they were on 72c32c4) ------------------- */

/* fs/core/fs_plan_path.c's mi_fields: 0 or -1 (fewer than 5 fields) */
static int old_plan(char *line, char **dev, char **point)
{
	char *save = NULL;
	int i = 0;

	for (char *f = strtok_r(line, " \n", &save); f; f = strtok_r(NULL, " \n", &save)) {
		if (++i == 3) {
			*dev = f;
		} else if (i == 5) {
			fs_mountinfo_unescape(f);
			*point = f;
			return 0;
		}
	}
	return -1;
}

/* fs/tools/fs_mountid.c's mountinfo_find (find 1) and fs_mnt_source_loop
 * (find 0) up to their first use of a field: 0 or -1 */
static int old_mountid(char *line, int find, char **point, char **type, char **source,
		       unsigned *maj, unsigned *min)
{
	char *save = NULL, *fld[64];
	int nf = 0, di = -1;

	line[strcspn(line, "\n")] = '\0';
	for (char *t = strtok_r(line, " ", &save); t && nf < 64; t = strtok_r(NULL, " ", &save))
		fld[nf++] = t;
	for (int i = 6; i + 3 < nf && di < 0; i++)
		if (strcmp(fld[i], "-") == 0)
			di = i;
	if (di < 0 || (find && sscanf(fld[2], "%u:%u", maj, min) != 2))
		return -1;
	fs_mountinfo_unescape(fld[4]);
	fs_mountinfo_unescape(fld[di + 2]);
	*point = fld[4];
	*type = fld[di + 1];
	*source = fld[di + 2];
	return 0;
}

/* ---- one line checked -------------------------------------------------------- */

static struct {
	unsigned lines, accepted, kernel, old_plan_refused, old_find_refused, old_loop_refused;
} seen;

/* Check line against the reference and the old splitters; kernel: a line
 * the kernel could write, whose root, point and source unescape to the
 * given bytes. */
static void check_line(const char *line, int kernel, const char *root, const char *point,
		       const char *source)
{
	static char buf[LINE_MAX_BYTES], old[LINE_MAX_BYTES];
	static struct ref r;
	struct fs_mountinfo mi;
	char *od = NULL, *op = NULL, *ot = NULL, *os = NULL;
	unsigned omaj = 0, omin = 0;
	int got, want = ref_split(line, &r);

	seen.lines++;
	snprintf(buf, sizeof(buf), "%s", line);
	got = fs_mountinfo_split(buf, &mi);
	CHECK(got == 0 || got == -EINVAL, "%d on [%s]", got, line);
	CHECK((got == 0) == want, "split %d, reference %d on [%s]", got, want, line);
	if (got == 0 && want) {
		seen.accepted++;
		CHECK(strcmp(mi.dev, r.dev) == 0 && mi.major == r.major && mi.minor == r.minor &&
			  strcmp(mi.root, r.root) == 0 && strcmp(mi.point, r.point) == 0 &&
			  strcmp(mi.options, r.options) == 0 && strcmp(mi.type, r.type) == 0 &&
			  strcmp(mi.source, r.source) == 0 && strcmp(mi.super, r.super) == 0,
		      "fields differ on [%s]: point [%s] [%s], source [%s] [%s]", line, mi.point,
		      r.point, mi.source, r.source);
	}
	if (kernel) {
		seen.kernel++;
		CHECK(got == 0 && strcmp(mi.root, root) == 0 && strcmp(mi.point, point) == 0 &&
			  strcmp(mi.source, source) == 0,
		      "the kernel's line [%s]: %d", line, got);
	}

	/* what the old splitters refused is refused; where the new accepts,
	 * the old ones read the same fields */
	snprintf(old, sizeof(old), "%s", line);
	if (old_plan(old, &od, &op) < 0) {
		seen.old_plan_refused++;
		CHECK(got < 0, "mi_fields refused [%s]", line);
	} else if (got == 0) {
		CHECK(strcmp(od, mi.dev) == 0 && strcmp(op, mi.point) == 0, "mi_fields on [%s]",
		      line);
	}
	snprintf(old, sizeof(old), "%s", line);
	if (old_mountid(old, 1, &op, &ot, &os, &omaj, &omin) < 0) {
		seen.old_find_refused++;
		CHECK(got < 0, "mountinfo_find refused [%s]", line);
	} else if (got == 0) {
		CHECK(strcmp(op, mi.point) == 0 && strcmp(ot, mi.type) == 0 && omaj == mi.major &&
			  omin == mi.minor,
		      "mountinfo_find on [%s]", line);
	}
	snprintf(old, sizeof(old), "%s", line);
	if (old_mountid(old, 0, &op, &ot, &os, &omaj, &omin) < 0) {
		seen.old_loop_refused++;
		CHECK(got < 0, "fs_mnt_source_loop refused [%s]", line);
	} else if (got == 0) {
		CHECK(strcmp(op, mi.point) == 0 && strcmp(ot, mi.type) == 0 &&
			  strcmp(os, mi.source) == 0,
		      "fs_mnt_source_loop on [%s]", line);
	}
}

/* ---- hand-made lines ------------------------------------------------------ */

static void test_hand(void)
{
	static const char doc[] =
	    "36 35 98:0 /mnt1 /mnt2 rw,noatime master:1 - ext3 /dev/root rw,errors=continue\n";
	char buf[256], cut[256];
	struct fs_mountinfo mi;
	int accepted = 0;

	snprintf(buf, sizeof(buf), "%s", doc);
	CHECK(fs_mountinfo_split(buf, &mi) == 0, "the kernel's documented line");
	CHECK(strcmp(mi.dev, "98:0") == 0 && mi.major == 98 && mi.minor == 0 &&
		  strcmp(mi.root, "/mnt1") == 0 && strcmp(mi.point, "/mnt2") == 0 &&
		  strcmp(mi.options, "rw,noatime") == 0 && strcmp(mi.type, "ext3") == 0 &&
		  strcmp(mi.source, "/dev/root") == 0 &&
		  strcmp(mi.super, "rw,errors=continue") == 0,
	      "its fields");
	check_line(doc, 1, "/mnt1", "/mnt2", "/dev/root");

	/* escaped blank, tab, newline, backslash; a backslash not before an
	 * escape; \400 (over a byte) is not one */
	snprintf(buf, sizeof(buf), "%s",
		 "1 2 0:51 / /m/a\\040b\\011c\\012d\\134e rw - fuse.shardfs s\\134x\\400y\\07 "
		 "rw,user_id=1000");
	CHECK(fs_mountinfo_split(buf, &mi) == 0 && strcmp(mi.point, "/m/a b\tc\nd\\e") == 0 &&
		  strcmp(mi.source, "s\\x\\400y\\07") == 0 && mi.major == 0 && mi.minor == 51 &&
		  strcmp(mi.super, "rw,user_id=1000") == 0,
	      "escapes: [%s] [%s]", mi.point, mi.source);
	/* no optional field; the source "-" (the first "-" is the separator) */
	snprintf(buf, sizeof(buf), "%s", "1 2 0:5 / /p rw - tmpfs - rw");
	CHECK(fs_mountinfo_split(buf, &mi) == 0 && strcmp(mi.type, "tmpfs") == 0 &&
		  strcmp(mi.source, "-") == 0,
	      "source \"-\"");
	/* refused: no separator; two fields after it (an empty source: the
	 * blanks' run is one); the separator among the six fixed fields; a
	 * device that is not two numbers */
	static const char *const bad[] = {
	    "1 2 0:5 / /p rw shared:1 tmpfs src rw",
	    "1 2 0:5 / /p rw - tmpfs  rw",
	    "1 2 0:5 / - - tmpfs src rw",
	    "1 2 x:5 / /p rw - tmpfs src rw",
	    "1 2 0: / /p rw - tmpfs src rw",
	    "1 2 :5 / /p rw - tmpfs src rw",
	    "1 2 0:5:1 / /p rw - tmpfs src rw",
	    "1 2 4294967296:0 / /p rw - tmpfs src rw",
	    "1 2 -1:0 / /p rw - tmpfs src rw",
	    "",
	    "\n",
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		snprintf(buf, sizeof(buf), "%s", bad[i]);
		CHECK(fs_mountinfo_split(buf, &mi) == -EINVAL, "accepted [%s]", bad[i]);
		check_line(bad[i], 0, NULL, NULL, NULL);
	}
	/* the documented line cut at every byte: whole from the super
	 * options' first byte on (19 cuts: its 18 bytes and the newline) */
	for (size_t k = 0; k <= strlen(doc); k++) {
		memcpy(cut, doc, k);
		cut[k] = '\0';
		snprintf(buf, sizeof(buf), "%s", cut);
		accepted += fs_mountinfo_split(buf, &mi) == 0;
		check_line(cut, 0, NULL, NULL, NULL);
	}
	CHECK(accepted == 19, "%d cuts accepted", accepted);
	/* the separator and its three fields as fields 61 to 64 are looked
	 * at, a field later they are not (FS_MOUNTINFO_FIELDS_MAX) */
	for (int extra = 54; extra <= 55; extra++) {
		size_t o = (size_t)snprintf(cut, sizeof(cut), "%s", "1 2 0:5 / /p rw");

		for (int i = 0; i < extra; i++)
			o += (size_t)snprintf(cut + o, sizeof(cut) - o, " o");
		snprintf(cut + o, sizeof(cut) - o, " - t s o");
		snprintf(buf, sizeof(buf), "%s", cut);
		CHECK((fs_mountinfo_split(buf, &mi) == 0) == (extra == 54), "%d optional fields",
		      extra);
		check_line(cut, 0, NULL, NULL, NULL);
	}
}

/* Every line of this process's own mountinfo is one the kernel wrote. */
static void test_self(void)
{
	FILE *f = fopen("/proc/self/mountinfo", "re");
	char *line = NULL;
	size_t cap = 0;
	unsigned n = 0, ok = 0;
	struct fs_mountinfo mi;

	if (!f)
		FAIL("/proc/self/mountinfo");
	while (getline(&line, &cap, f) > 0) {
		n++;
		ok += fs_mountinfo_split(line, &mi) == 0;
	}
	free(line);
	fclose(f);
	CHECK(n > 0 && ok == n, "%u of %u lines of /proc/self/mountinfo split", ok, n);
}

/* ---- generated lines ------------------------------------------------------ */

/* A path of len bytes from hostile ones */
static void gen_path(char *raw, size_t len)
{
	static const char alpha[] = "ab/ \t\n\\-037:";

	for (size_t i = 0; i < len; i++)
		raw[i] = rnd_n(&rng, 8) == 0 ? (char)(0x80 + rnd_n(&rng, 128))
					     : alpha[rnd_n(&rng, sizeof(alpha) - 1)];
	raw[len] = '\0';
}

/* raw as the kernel writes it (blank, tab, newline, backslash as \ooo),
 * or as it is (escape 0) */
static size_t put_path(char *o, const char *raw, int escape)
{
	size_t n = 0;

	for (; *raw; raw++) {
		if (escape && strchr(" \t\n\\", *raw))
			n += (size_t)snprintf(o + n, 5, "\\%03o", (unsigned char)*raw);
		else
			o[n++] = *raw;
	}
	o[n] = '\0';
	return n;
}

static void test_generated(unsigned lines)
{
	static const char *const devs[] = {"0:51", "8:1",  "259:3", "4294967295:1048575",
					   "x:1",  "8:",   ":1",    "8:1x",
					   "8;1",  "+8:1", "8:1:2", "99999999999:0"};
	static char line[LINE_MAX_BYTES];
	char root[16], point[16], source[16];

	for (unsigned l = 0; l < lines; l++) {
		int escape = rnd_n(&rng, 4) != 0,
		    dev = rnd_n(&rng, 8) ? (int)rnd_n(&rng, 4) : (int)rnd_n(&rng, 12);
		int nopt = rnd_n(&rng, 10) ? (int)rnd_n(&rng, 4) : 55 + (int)rnd_n(&rng, 16);
		int sep = rnd_n(&rng, 10) ? 1 : (int)rnd_n(&rng, 3),
		    extra = rnd_n(&rng, 8) ? 0 : 1 + (int)rnd_n(&rng, 2);
		int wide = rnd_n(&rng, 10) == 0; /* runs of blanks */
		const char *gap = wide ? "  " : " ";
		size_t o = 0;

		gen_path(root, 1 + rnd_n(&rng, 6));
		gen_path(point, rnd_n(&rng, 10) ? 1 + rnd_n(&rng, 8) : 0);
		gen_path(source, rnd_n(&rng, 10) ? 1 + rnd_n(&rng, 8) : 0);
		o += (size_t)snprintf(line + o, sizeof(line) - o, "%s%u%s%u%s%s%s", wide ? " " : "",
				      rnd_n(&rng, 1000), gap, rnd_n(&rng, 1000), gap, devs[dev],
				      gap);
		o += put_path(line + o, root, escape);
		o += (size_t)snprintf(line + o, sizeof(line) - o, "%s", gap);
		o += put_path(line + o, point, escape);
		o += (size_t)snprintf(line + o, sizeof(line) - o, "%srw,relatime", gap);
		for (int i = 0; i < nopt; i++)
			o += (size_t)snprintf(line + o, sizeof(line) - o, "%sshared:%u", gap,
					      rnd_n(&rng, 500));
		o += (size_t)snprintf(line + o, sizeof(line) - o, "%s%s%s", sep == 1 ? gap : "",
				      sep == 0	 ? ""
				      : sep == 1 ? "-"
						 : " --",
				      gap);
		o += (size_t)snprintf(line + o, sizeof(line) - o, "%s%s",
				      rnd_n(&rng, 4) ? "fuse.shardfs" : "ext4", gap);
		o += put_path(line + o, source, escape);
		o += (size_t)snprintf(line + o, sizeof(line) - o, "%srw,user_id=%u%s", gap,
				      rnd_n(&rng, 2000), rnd_n(&rng, 3) ? "\n" : "");
		for (int i = 0; i < extra; i++)
			o += (size_t)snprintf(line + o, sizeof(line) - o, " x%d", i);
		if (rnd_n(&rng, 3) == 0) /* cut */
			line[rnd_n(&rng, (uint32_t)o + 1)] = '\0';
		/* the kernel's: every path escaped and not empty, the device
		 * its, at most 3 optional fields, one separator, not cut */
		int kernel = escape && point[0] && source[0] && dev < 4 && nopt < 4 && sep == 1 &&
			     strlen(line) == o && !extra;
		check_line(line, kernel, root, point, source);
	}
}

int main(void)
{
	const char *env = getenv("TEST_SEED"), *nl = getenv("MOUNTINFO_LINES");
	uint64_t seed = env ? strtoull(env, NULL, 10) : 36;
	unsigned lines = nl ? (unsigned)strtoul(nl, NULL, 10) : MOUNTINFO_LINES;

	setvbuf(stdout, NULL, _IOLBF, 0);
	printf("seed %llu (set TEST_SEED to repeat)\n", (unsigned long long)seed);
	rng = seed ? seed : 1;
	test_hand();
	test_self();
	test_generated(lines);
	printf("%u lines: %u accepted, %u the kernel's; refused by mi_fields %u, mountinfo_find "
	       "%u, fs_mnt_source_loop %u\n",
	       seen.lines, seen.accepted, seen.kernel, seen.old_plan_refused, seen.old_find_refused,
	       seen.old_loop_refused);
	return check_summary("mountinfo");
}
