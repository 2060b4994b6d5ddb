/* creds.c — credentials and the permission rules built on them (creds.h). */
#include <errno.h>
#include <linux/capability.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>
#include "creds.h"
#include "inode.h"

static __thread const struct kura_creds *thread_creds;

static struct kura_creds process_creds;
static pthread_once_t process_once = PTHREAD_ONCE_INIT;

/* The effective and permitted capability sets, as capget(2) gives them;
 * where it cannot, root's or nobody's. */
static void read_caps(struct kura_creds *c, uid_t euid)
{
	struct __user_cap_header_struct h = { .version = _LINUX_CAPABILITY_VERSION_3, .pid = 0 };
	struct __user_cap_data_struct d[2];
	if (syscall(SYS_capget, &h, d) == 0) {
		c->caps = d[0].effective | (uint64_t)d[1].effective << 32;
		c->caps_permitted = d[0].permitted | (uint64_t)d[1].permitted << 32;
	} else {
		c->caps = c->caps_permitted = euid == 0 ? KURA_CAPS_FS : 0;
	}
}

static void read_process_creds(void)
{
	struct kura_creds *c = &process_creds;
	uid_t ru, eu, su;
	gid_t rg, eg, sg;
	if (getresuid(&ru, &eu, &su) || getresgid(&rg, &eg, &sg)) {
		ru = getuid(), eu = geteuid();
		rg = getgid(), eg = getegid();
	}
	c->uid = ru;
	c->fsuid = eu;
	c->gid = rg;
	c->fsgid = eg;
	read_caps(c, eu);
	/* Kept for the life of the process: calls in any thread may read it. */
	int n = getgroups(0, NULL);
	gid_t *g = n > 0 ? malloc((size_t)n * sizeof *g) : NULL;
	if (g && (n = getgroups(n, g)) > 0) {
		c->groups = g;
		c->ngroups = (size_t)n;
	} else {
		free(g);
	}
}

static int protected_hardlinks;
static pthread_once_t sysctl_once = PTHREAD_ONCE_INIT;

static void read_sysctls(void)
{
	FILE *f = fopen("/proc/sys/fs/protected_hardlinks", "re");
	if (f) {
		if (fscanf(f, "%d", &protected_hardlinks) != 1)
			protected_hardlinks = 0;
		fclose(f);
	}
}

int creds_protected_hardlinks(void)
{
	pthread_once(&sysctl_once, read_sysctls);
	return protected_hardlinks;
}

void kura_set_thread_creds(const struct kura_creds *c)
{
	thread_creds = c;
}

int kura_set_creds(kura_fs *fs, uid_t uid, gid_t gid)
{
	fs->creds = (struct kura_creds){ .uid = uid, .fsuid = uid, .gid = gid, .fsgid = gid };
	fs->creds.caps = fs->creds.caps_permitted = uid == 0 ? KURA_CAPS_FS : 0;
	fs->have_creds = 1;
	return 0;
}

const struct kura_creds *creds_of(const struct kura_fs *fs)
{
	if (thread_creds)
		return thread_creds;
	if (fs->have_creds)
		return &fs->creds;
	pthread_once(&process_once, read_process_creds);
	return &process_creds;
}

int creds_capable(const struct kura_creds *c, uint64_t cap)
{
	return (c->caps & cap) != 0;
}

int creds_in_group(const struct kura_creds *c, gid_t gid)
{
	if (gid == c->fsgid)
		return 1;
	for (size_t i = 0; i < c->ngroups; i++)
		if (c->groups[i] == gid)
			return 1;
	return 0;
}

int creds_group_or_fsetid(const struct kura_creds *c, gid_t gid)
{
	return creds_in_group(c, gid) || creds_capable(c, KURA_CAP_FSETID);
}

int creds_owner(const struct kura_creds *c, const struct kura_inode *ip)
{
	return ip->uid == c->fsuid || creds_capable(c, KURA_CAP_FOWNER);
}

mode_t creds_umask(const struct kura_fs *fs, const struct kura_inode *dip, mode_t mode)
{
	if (S_ISLNK(mode) || (dip->iflags & INODE_DEFACL))
		return mode;
	return mode & ~(creds_of(fs)->umask & 0777);
}

int perm_check(const struct kura_fs *fs, const struct kura_inode *ip, int mask)
{
	const struct kura_creds *c = creds_of(fs);
	unsigned mode = ip->mode, want = (unsigned)mask & 7;
	/* An ACL decides in place of the mode bits (Linux's check_acl); the
	 * capabilities below still override its refusal. */
	if ((ip->iflags & INODE_ACL) && fs->acl_permission) {
		uint64_t ino = (uint64_t)((const char *)ip - (const char *)media_ptr(&fs->m, 0)) >> INODE_SHIFT;
		int r = fs->acl_permission(fs, ino, ip, (int)want);
		if (r == 0)
			return 0;
		if (r < 0)
			goto refused;
	}
	/* The owner class decides alone; otherwise the group class applies to
	 * members, and is looked up only when it would make a difference. */
	if (ip->uid == c->fsuid)
		mode >>= 6;
	else if ((want & (mode ^ (mode >> 3))) && creds_in_group(c, ip->gid))
		mode >>= 3;
	if (!(want & ~mode))
		return 0;
refused:
	/* What capabilities override, as generic_permission. */
	if (S_ISDIR(ip->mode)) {
		if (!(want & W_OK) && creds_capable(c, KURA_CAP_DAC_READ_SEARCH))
			return 0;
		return creds_capable(c, KURA_CAP_DAC_OVERRIDE) ? 0 : -EACCES;
	}
	if (want == R_OK && creds_capable(c, KURA_CAP_DAC_READ_SEARCH))
		return 0;
	if ((!(want & X_OK) || (ip->mode & 0111)) && creds_capable(c, KURA_CAP_DAC_OVERRIDE))
		return 0;
	return -EACCES;
}

const struct kura_creds *creds_use_real(const struct kura_fs *fs, struct kura_creds *tmp)
{
	const struct kura_creds *saved = thread_creds;
	*tmp = *creds_of(fs);
	tmp->fsuid = tmp->uid;
	tmp->fsgid = tmp->gid;
	tmp->caps = tmp->uid == 0 ? tmp->caps_permitted : 0;
	thread_creds = tmp;
	return saved;
}

void creds_restore(const struct kura_creds *saved)
{
	thread_creds = saved;
}

mode_t creds_new_mode(const struct kura_fs *fs, const struct kura_inode *dip, mode_t mode, gid_t *gid)
{
	const struct kura_creds *c = creds_of(fs);
	*gid = c->fsgid;
	if (!(dip->mode & S_ISGID))
		return mode;
	/* BSD group semantics in a set-group-ID directory: its group, and
	 * for directories its set-group-ID bit, pass to new entries. */
	*gid = dip->gid;
	if (S_ISDIR(mode))
		return mode | S_ISGID;
	if ((mode & (S_ISGID | S_IXGRP)) == (S_ISGID | S_IXGRP) && !creds_group_or_fsetid(c, dip->gid))
		mode &= ~(mode_t)S_ISGID;
	return mode;
}
