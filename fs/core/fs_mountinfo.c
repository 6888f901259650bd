/*
 * fs_mountinfo.c — one line of /proc/self/mountinfo, split into its fields
 * and unescaped (fs_mountinfo_split, fs_mountinfo_unescape; fs_core_ctl.h):
 * the one reader of that format for the core, the tools and the adapter.
 *
 * A line is "ID PARENT MAJOR:MINOR ROOT POINT OPTIONS [OPTIONAL...] -
 * TYPE SOURCE SUPER": fields apart by blanks, the kernel's octal escapes
 * in the paths (ROOT, POINT, SOURCE). Nothing in a line is trusted: a
 * mount point or source may hold any byte but NUL, escaped or not, and a
 * line may be cut. What does not have that shape is refused whole (no
 * field of it is used), never read in part.
 */
#include <errno.h>
#include <string.h>

#include "fs_core_ctl.h"

void fs_mountinfo_unescape(char *s)
{
	char *o = s;

	for (; *s; s++) {
		if (s[0] == '\\' && s[1] >= '0' && s[1] <= '3' && s[2] >= '0' && s[2] <= '7' &&
		    s[3] >= '0' && s[3] <= '7') {
			*o++ = (char)((s[1] - '0') * 64 + (s[2] - '0') * 8 + (s[3] - '0'));
			s += 3;
		} else {
			*o++ = *s;
		}
	}
	*o = '\0';
}

/* A device number's half: decimal digits up to end, at most 32 bits. */
static int dev_half(const char *s, const char *end, unsigned *v)
{
	unsigned long long n = 0;

	if (s == end)
		return -EINVAL;
	for (; s < end; s++) {
		if (*s < '0' || *s > '9')
			return -EINVAL;
		n = n * 10 + (unsigned)(*s - '0');
		if (n > 0xffffffffULL)
			return -EINVAL;
	}
	*v = (unsigned)n;
	return 0;
}

int fs_mountinfo_split(char *line, struct fs_mountinfo *mi)
{
	char *fld[FS_MOUNTINFO_FIELDS_MAX], *save = NULL, *colon;
	unsigned major, minor;
	int nf = 0, sep = -1;

	line[strcspn(line, "\n")] = '\0';
	for (char *t = strtok_r(line, " ", &save); t && nf < FS_MOUNTINFO_FIELDS_MAX;
	     t = strtok_r(NULL, " ", &save))
		fld[nf++] = t;
	/* the first "-" after the 6 fixed fields, with type, source and
	 * super options after it (an optional field is never "-") */
	for (int i = 6; i + 3 < nf && sep < 0; i++)
		if (strcmp(fld[i], "-") == 0)
			sep = i;
	if (sep < 0)
		return -EINVAL;
	colon = strchr(fld[2], ':');
	if (!colon || dev_half(fld[2], colon, &major) < 0 ||
	    dev_half(colon + 1, colon + strlen(colon), &minor) < 0)
		return -EINVAL;
	mi->dev = fld[2];
	mi->major = major;
	mi->minor = minor;
	mi->root = fld[3];
	mi->point = fld[4];
	mi->options = fld[5];
	mi->type = fld[sep + 1];
	mi->source = fld[sep + 2];
	mi->super = fld[sep + 3];
	fs_mountinfo_unescape(mi->root);
	fs_mountinfo_unescape(mi->point);
	fs_mountinfo_unescape(mi->source);
	return 0;
}
