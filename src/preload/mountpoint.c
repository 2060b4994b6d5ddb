/*
 * mountpoint.c — a prefix shows in its parent directory as a mount point
 * would: listing the parent ("/" for "/kura") names it, so programs that
 * walk a tree one directory at a time (find /, rsync, fts, Python's and
 * Rust's walkers) find their way in.  (Looking the name up relative to a
 * descriptor of the parent is path.c's kp_host_link.)
 *
 * The kernel lists the host directory; when a stream of a prefix's parent
 * ends, the prefixes it does not hold itself follow, as directories with
 * their pool root's inode number.  Which stream that is shows only at its
 * end, by one fstat of its descriptor against the parents' identities;
 * a stream rewound or sought starts over.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "kp.h"

/* Streams that reached their end: the directory they list, and how far
 * into the prefixes they are. */
#define TRACKED 64
static struct {
	DIR *dp;
	int next; /* index in kp_mounts of the next prefix to consider; kp_nmounts: done */
	dev_t dev;
	ino_t ino;
} ends[TRACKED];
static pthread_mutex_t ends_lock = PTHREAD_MUTEX_INITIALIZER;

/* The identity of each prefix's parent directory, looked up once. */
static struct {
	int known;
	dev_t dev;
	ino_t ino;
} parents[KP_MAX_MOUNTS];

static int parent_is(int m, dev_t dev, ino_t ino)
{
	if (!__atomic_load_n(&parents[m].known, __ATOMIC_ACQUIRE)) {
		char dir[PATH_MAX];
		struct stat ps;
		snprintf(dir, sizeof dir, "%s", kp_mounts[m].prefix);
		char *slash = strrchr(dir, '/');
		slash[slash == dir] = '\0'; /* "/kura" -> "/", "/a/b" -> "/a" */
		if (REAL(stat)(dir, &ps) < 0)
			return 0;
		parents[m].dev = ps.st_dev;
		parents[m].ino = ps.st_ino;
		__atomic_store_n(&parents[m].known, 1, __ATOMIC_RELEASE);
	}
	return parents[m].dev == dev && parents[m].ino == ino;
}

static int slot_of(DIR *dp, int make)
{
	for (int i = 0; i < TRACKED; i++)
		if (ends[i].dp == dp)
			return i;
	if (!make)
		return -1;
	for (int i = 0; i < TRACKED; i++)
		if (!ends[i].dp) {
			ends[i].dp = dp;
			ends[i].next = -1; /* not looked at yet */
			return i;
		}
	return -1;
}

struct dirent64 *kp_mountpoint_next(DIR *dp, int fd)
{
	static __thread struct dirent64 ent;
	sighold_lock(&ends_lock);
	int s = slot_of(dp, 1);
	struct dirent64 *out = NULL;
	if (s >= 0 && ends[s].next < 0) {
		struct stat st;
		ends[s].next = REAL(fstat)(fd, &st) < 0 ? kp_nmounts : 0;
		ends[s].dev = st.st_dev;
		ends[s].ino = st.st_ino;
	}
	for (int m = s >= 0 ? ends[s].next : kp_nmounts; m < kp_nmounts && !out; m++) {
		ends[s].next = m + 1;
		const char *base = strrchr(kp_mounts[m].prefix, '/') + 1;
		struct stat own, root;
		kura_fs *fs;
		if (!parent_is(m, ends[s].dev, ends[s].ino) || REAL(fstatat)(fd, base, &own, AT_SYMLINK_NOFOLLOW) == 0 ||
		    !(fs = kp_fs(m)) || kura_fstatat(fs, KURA_AT_ROOT, "/", &root, 0) < 0)
			continue; /* not its parent, the host lists a name there itself, or no pool */
		memset(&ent, 0, sizeof ent);
		ent.d_ino = root.st_ino;
		ent.d_reclen = sizeof ent;
		ent.d_type = DT_DIR;
		snprintf(ent.d_name, sizeof ent.d_name, "%s", base);
		out = &ent;
	}
	sighold_unlock(&ends_lock);
	return out;
}

void kp_mountpoint_forget(DIR *dp)
{
	sighold_lock(&ends_lock);
	int s = slot_of(dp, 0);
	if (s >= 0)
		ends[s].dp = NULL;
	sighold_unlock(&ends_lock);
}
