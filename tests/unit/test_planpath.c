/*
 * test_planpath.c — is a plan file inside the mount (fs/core/fs_plan_path.c,
 * fs_plan_path_inside), against the kernel's own resolution (realpath), on
 * seeded generated trees (TEST_SEED repeats a run; ROUNDS rounds).
 *
 * Each round builds a tree of directories, files and symbolic links (to
 * directories, files and links by absolute and relative paths, dangling,
 * in loops; in half the rounds some through ".."), picks one directory as
 * the "mount" (no link below it, as in a real mount the daemon never looks
 * into), and walks random paths through the tree (with "." and "//", in
 * half the rounds ".." too). For each path:
 *   - it resolves at or below the mount: inside (1), always (the property
 *     that keeps a handler from reading its own mount);
 *   - it resolves elsewhere, with no ".." on the way: not inside (0);
 *   - its resolution loops (ELOOP): -ELOOP, or inside when ".." may have
 *     passed through the mount on the way (refused either way).
 * fs_plan_path_inside only compares strings with the mount point (it never
 * looks at it), so a plain directory stands for the mount here.
 */
#include <errno.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fs_plan.h"
#include "check.h"
#include "test_rng.h"

#define ROUNDS 60
#define PATHS  150
#define NDIRS  8
#define NFILES 6
#define NLINKS 10

static uint64_t rng; /* test_rng.h's state, from the seed */

static int under(const char *p, const char *mp)
{
	size_t n = strlen(mp);

	return strncmp(p, mp, n) == 0 && (p[n] == '/' || p[n] == '\0');
}

struct tree {
	char dirs[NDIRS + 1][PATH_MAX];
	char files[NFILES][PATH_MAX];
	char links[NLINKS][PATH_MAX];
	char mp[PATH_MAX];
	int dotdot; /* some link targets go through ".." */
};

/* A target for a link in directory dir: an absolute path of anything, a
 * path relative to dir, a dangling one, or (dotdot) one through "..". */
static void target(const struct tree *t, const char *dir, char *out, size_t cap)
{
	const char *any;
	uint32_t k = rnd_n(&rng, 10);

	if (k < 3)
		any = t->dirs[rnd_n(&rng, NDIRS + 1)];
	else if (k < 5)
		any = t->files[rnd_n(&rng, NFILES)];
	else if (k < 8)
		any = t->links[rnd_n(&rng, NLINKS)];
	else if (k < 9 && t->dotdot) {
		snprintf(out, cap, "../%s", strrchr(t->dirs[1 + rnd_n(&rng, NDIRS)], '/') + 1);
		return;
	} else {
		snprintf(out, cap, "%.3000s/nonexistent", dir);
		return;
	}
	if (rnd_n(&rng, 2) && strncmp(any, dir, strlen(dir)) == 0 && any[strlen(dir)] == '/')
		any += strlen(dir) + 1; /* relative, below dir */
	if (strlen(any) >= cap)
		FAIL("a path too long: %s", any);
	memcpy(out, any, strlen(any) + 1);
}

static void build(struct tree *t, const char *root, int round)
{
	char linkdir[NLINKS][PATH_MAX];

	memset(t, 0, sizeof(*t));
	t->dotdot = round & 1;
	snprintf(t->dirs[0], PATH_MAX, "%.3000s/r%d", root, round);
	if (mkdir(t->dirs[0], 0755) < 0)
		FAIL("mkdir %s: %s", t->dirs[0], strerror(errno));
	for (int i = 1; i <= NDIRS; i++) {
		const char *up =
		    t->dirs[rnd_n(&rng, (uint32_t)i)]; /* an earlier one: never dirs[i] */

		snprintf(linkdir[0], PATH_MAX, "%.3000s/d%d", up, i); /* (a scratch row here) */
		memcpy(t->dirs[i], linkdir[0], strlen(linkdir[0]) + 1);
		if (mkdir(t->dirs[i], 0755) < 0)
			FAIL("mkdir %s: %s", t->dirs[i], strerror(errno));
	}
	snprintf(t->mp, PATH_MAX, "%s", t->dirs[1 + rnd_n(&rng, NDIRS)]);
	for (int i = 0; i < NFILES; i++) {
		FILE *f;

		snprintf(t->files[i], PATH_MAX, "%.3000s/f%d", t->dirs[rnd_n(&rng, NDIRS + 1)], i);
		f = fopen(t->files[i], "w");
		if (!f || fclose(f) != 0)
			FAIL("create %s", t->files[i]);
	}
	/* names first (links may point to links made after them), each in a
	 * directory outside the mount */
	for (int i = 0; i < NLINKS; i++) {
		const char *d;

		do
			d = t->dirs[rnd_n(&rng, NDIRS + 1)];
		while (under(d, t->mp));
		snprintf(linkdir[i], PATH_MAX, "%s", d);
		snprintf(t->links[i], PATH_MAX, "%.3000s/l%d", d, i);
	}
	for (int i = 0; i < NLINKS; i++) {
		char to[PATH_MAX];

		target(t, linkdir[i], to, sizeof(to));
		if (symlink(to, t->links[i]) < 0)
			FAIL("symlink %s: %s", t->links[i], strerror(errno));
	}
}

/* The names of the entries of paths[0..count) directly in directory dir,
 * appended to names[*n]. */
static void children(const char (*paths)[PATH_MAX], int count, const char *dir,
		     char (*names)[NAME_MAX + 1], size_t *n)
{
	size_t dl = strlen(dir);

	for (int i = 0; i < count; i++) {
		const char *rest = paths[i] + dl + 1;
		size_t k = 0;

		if (strncmp(paths[i], dir, dl) != 0 || paths[i][dl] != '/')
			continue;
		/* a loop, not strchr: gcc -O3 takes paths for an empty array */
		while (rest[k] && rest[k] != '/')
			k++;
		if (!rest[k])
			snprintf(names[(*n)++], NAME_MAX + 1, "%s", rest);
	}
}

/* A random path through t: entries of the directory the path so far
 * resolves to, ".", "//", ".." (dotdot), a missing name. */
static int walk(const struct tree *t, int dotdot, char *path, size_t cap)
{
	int steps = 1 + (int)rnd_n(&rng, 6), used_dotdot = 0;

	snprintf(path, cap, "%s", t->dirs[0]);
	for (int s = 0; s < steps; s++) {
		char real[PATH_MAX], names[64][NAME_MAX + 1];
		const char *add;
		size_t n = 0, len = strlen(path);
		uint32_t k = rnd_n(&rng, 10);

		if (realpath(path, real)) {
			children(t->dirs, NDIRS + 1, real, names, &n);
			children(t->files, NFILES, real, names, &n);
			children(t->links, NLINKS, real, names, &n);
		}
		if (k == 0)
			add = ".";
		else if (k == 1 && dotdot)
			add = "..";
		else if (k == 2 || n == 0)
			add = "missing";
		else
			add = names[rnd_n(&rng, (uint32_t)n)];
		used_dotdot |= strcmp(add, "..") == 0;
		if (len + strlen(add) + 3 >= cap)
			break;
		snprintf(path + len, cap - len, "%s%s", rnd_n(&rng, 8) ? "/" : "//", add);
	}
	return used_dotdot;
}

int main(void)
{
	const char *env = getenv("TEST_SEED");
	uint64_t seed = env ? strtoull(env, NULL, 10) : 20240611u; /* fixed in CI */
	char tmpl[] = "/tmp/shardfs-pp-XXXXXX", root[PATH_MAX], cmd[PATH_MAX + 16];
	unsigned inside = 0, outside = 0, loops = 0, missing = 0;

	printf("seed %llu (set TEST_SEED to repeat)\n", (unsigned long long)seed);
	rng = seed * 2654435761u + 1;
	if (!mkdtemp(tmpl) || !realpath(tmpl, root))
		FAIL("mkdtemp: %s", strerror(errno));
	for (int round = 0; round < ROUNDS; round++) {
		struct tree *t = malloc(sizeof(*t));

		if (!t)
			FAIL("out of memory");
		build(t, root, round);
		for (int i = 0; i < PATHS; i++) {
			char path[PATH_MAX], real[PATH_MAX];
			int dd = walk(t, round & 2, path, sizeof(path)) || t->dotdot;
			int got = fs_plan_path_inside(t->mp, path);

			if (realpath(path, real)) {
				if (under(real, t->mp)) {
					inside++;
					CHECK(got == 1,
					      "round %d: %s resolves to %s in the mount %s: %d",
					      round, path, real, t->mp, got);
				} else {
					outside++;
					CHECK(got == 0 || (dd && got == 1),
					      "round %d: %s resolves to %s, not in %s: %d", round,
					      path, real, t->mp, got);
				}
			} else if (errno == ELOOP) {
				loops++;
				CHECK(got == -ELOOP || (dd && got == 1), "round %d: %s loops: %d",
				      round, path, got);
			} else {
				missing++;
				CHECK(got == 0 || got == 1, "round %d: %s (%s): %d", round, path,
				      strerror(errno), got);
			}
		}
		free(t);
	}
	printf("paths: %u inside, %u outside, %u loops, %u not resolved\n", inside, outside, loops,
	       missing);
	CHECK(inside > 100 && outside > 100 && loops > 10, "too few of a kind: %u %u %u", inside,
	      outside, loops);
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", root);
	if (check_failures() == 0 && system(cmd) != 0)
		fprintf(stderr, "warning: could not remove %s\n", root);
	if (check_failures())
		fprintf(stderr, "planpath: seed %llu; trees in %s\n", (unsigned long long)seed,
			root);
	return check_summary("planpath");
}
