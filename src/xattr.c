/*
 * xattr.c — extended attributes.
 *
 * Where they live.  An inode slot has no room left, so the attributes of
 * an inode are one blob, the data of a "holder" (a regular inode with no
 * name in the tree), named in a hidden directory by the owner's inode
 * number in hex.  The hidden directory hangs off the state block
 * (kura_state.xattr_dir, format 3), made by the first attribute set.  So
 * every change is an ordinary transaction on ordinary structures, atomic
 * and covered by recovery, fsck and the crash explorer with no new log
 * record; and an inode without attributes costs nothing.  The holder's
 * `parent` field names its owner and the blob head carries the owner's
 * generation, so an entry left pointing at a reused slot is never taken
 * for the new inode's (fsck reports and repairs it).
 *
 * The blob: a head, then records (name length, value length, name without
 * its NUL, value), each padded to 4 bytes, at most one block in all, as
 * ext4 keeps an inode's attributes in one block (ENOSPC beyond).  Limits
 * and answers as ext4's: names up to 255 bytes (ERANGE), values up to the
 * block (E2BIG past 64 KiB, ENOSPC past the block), ENODATA for a missing
 * name, ERANGE for a buffer too small, EEXIST/ENODATA for XATTR_CREATE/
 * XATTR_REPLACE; namespaces user.*, trusted.* (CAP_SYS_ADMIN) and
 * security.*, and of system.* the two POSIX ACLs (acl.c enforces them;
 * any other system.* name is EOPNOTSUPP).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include "api.h"
#include "creds.h"
#include "dir.h"
#include "inode.h"
#include "ofile.h"
#include "path.h"
#include "acl.h"
#include "xattr.h"

#define XATTR_USER_PREFIX "user."
#define XATTR_USER_PREFIX_LEN 5u
#define XATTR_TRUSTED_PREFIX "trusted."
#define XATTR_TRUSTED_PREFIX_LEN 8u
#define XATTR_SECURITY_PREFIX "security."
#define XATTR_SECURITY_PREFIX_LEN 9u

#define XA_MAGIC 0x52544158u /* "XATR" */
#define XA_MAX_BLOB KURA_BLOCK
#define XA_NAME_MAX 255u
#define XA_VALUE_MAX 65536u

struct xa_head {
	uint32_t magic;
	uint32_t used;  /* bytes of the blob, head included */
	uint32_t owner_gen;
	uint32_t count;
};
struct xa_rec {
	uint16_t name_len;
	uint16_t pad;
	uint32_t value_len;
};

static size_t rec_size(size_t name_len, size_t value_len)
{
	return (sizeof(struct xa_rec) + name_len + value_len + 3) & ~(size_t)3;
}

static void holder_name(uint64_t ino, char out[17])
{
	/* As "%016llx" would, without printf on every unlink's path. */
	static const char hex[] = "0123456789abcdef";
	for (int i = 15; i >= 0; i--, ino >>= 4)
		out[i] = hex[ino & 15];
	out[16] = '\0';
}

/* The holder of ino's attributes, 0 if it has none (or a stale entry). */
static uint64_t holder_of(const struct kura_fs *fs, uint64_t ino)
{
	uint64_t xd = fs_state(fs)->xattr_dir, h;
	const struct kura_inode *dp = xd ? ino_get(fs, xd) : NULL, *hp, *op;
	char name[17];
	unsigned type;
	if (!dp || !S_ISDIR(dp->mode))
		return 0;
	holder_name(ino, name);
	if (dir_lookup(fs, dp, name, 16, &h, &type))
		return 0;
	if (!(hp = ino_get(fs, h)) || !S_ISREG(hp->mode) || hp->parent != ino || hp->size > XA_MAX_BLOB ||
	    !(op = ino_get(fs, ino)))
		return 0;
	return h;
}

/* Reads ino's blob into buf (XA_MAX_BLOB bytes); an empty blob if none.
 * -EUCLEAN if it is damaged. */
static int load(const struct kura_fs *fs, uint64_t ino, uint8_t *buf)
{
	struct xa_head *hd = (void *)buf;
	const struct kura_inode *op = ino_get(fs, ino);
	uint64_t h = holder_of(fs, ino);
	memset(hd, 0, sizeof *hd);
	if (!h || !op) {
		hd->magic = XA_MAGIC;
		hd->used = sizeof *hd;
		return 0;
	}
	const struct kura_inode *hp = ino_get(fs, h);
	inode_read(fs, hp, buf, XA_MAX_BLOB, 0);
	if (hd->magic == XA_MAGIC && hd->used >= sizeof *hd && hd->used <= hp->size && hd->owner_gen == op->generation)
		return 0;
	int mine = hd->owner_gen == op->generation;
	memset(hd, 0, sizeof *hd);
	hd->magic = XA_MAGIC;
	hd->used = sizeof *hd;
	/* Damaged: say so (fsck says how); another inode's: this one has none. */
	return mine ? -EUCLEAN : 0;
}

/* The record named name (full name, prefix included), or NULL.  Records
 * are bounds-checked: the blob comes from the pool. */
static struct xa_rec *find(uint8_t *buf, const char *name, size_t len, size_t *at)
{
	struct xa_head *hd = (void *)buf;
	for (size_t off = sizeof *hd; off + sizeof(struct xa_rec) <= hd->used;) {
		struct xa_rec *r = (void *)(buf + off);
		size_t sz = rec_size(r->name_len, r->value_len);
		if (off + sz > hd->used)
			break;
		if (r->name_len == len && !memcmp(r + 1, name, len)) {
			*at = off;
			return r;
		}
		off += sz;
	}
	return NULL;
}

enum { NS_USER, NS_TRUSTED, NS_SECURITY, NS_SYSTEM };

static int namespace_of(const char *name)
{
	if (!strcmp(name, XATTR_ACL_ACCESS) || !strcmp(name, XATTR_ACL_DEFAULT))
		return NS_SYSTEM;
	if (!strncmp(name, XATTR_USER_PREFIX, XATTR_USER_PREFIX_LEN))
		return NS_USER;
	if (!strncmp(name, XATTR_TRUSTED_PREFIX, XATTR_TRUSTED_PREFIX_LEN))
		return NS_TRUSTED;
	if (!strncmp(name, XATTR_SECURITY_PREFIX, XATTR_SECURITY_PREFIX_LEN))
		return NS_SECURITY;
	return -EOPNOTSUPP;
}

/* Linux's xattr_permission() for a kernel without a security module. */
static int may_access(const struct kura_fs *fs, const struct kura_inode *ip, const char *name, int write)
{
	const struct kura_creds *c = creds_of(fs);
	int ns = namespace_of(name);
	if (ns < 0)
		return ns;
	if (write && fs->read_only)
		return -EROFS;
	if (ns == NS_SECURITY || ns == NS_SYSTEM)
		return 0; /* ACLs: put_acl's own rules */
	if (ns == NS_TRUSTED)
		return creds_capable(c, KURA_CAP_SYS_ADMIN) ? 0 : write ? -EPERM : -ENODATA;
	if (!S_ISREG(ip->mode) && !S_ISDIR(ip->mode))
		return write ? -EPERM : -ENODATA;
	if (write && S_ISDIR(ip->mode) && (ip->mode & S_ISVTX) && !creds_owner(c, ip) &&
	    !creds_capable(c, KURA_CAP_FOWNER))
		return -EPERM;
	return perm_check(fs, ip, write ? W_OK : R_OK);
}

static int check_name(const char *name)
{
	if (!name)
		return -EFAULT;
	size_t len = strlen(name);
	if (len > XA_NAME_MAX)
		return -ERANGE;
	int ns = namespace_of(name);
	if (ns < 0)
		return ns;
	static const size_t prefix[] = { XATTR_USER_PREFIX_LEN, XATTR_TRUSTED_PREFIX_LEN, XATTR_SECURITY_PREFIX_LEN,
					 0 };
	return len == prefix[ns] ? -EINVAL : 0; /* "user." alone names nothing */
}

/* The inode a *xattrat call names: dirfd itself for AT_EMPTY_PATH and "". */
static int target(struct kura_fs *fs, int dirfd, const char *path, int flags, uint64_t *ino)
{
	if (flags & ~(AT_SYMLINK_NOFOLLOW | AT_EMPTY_PATH))
		return -EINVAL;
	if (!path)
		return -EFAULT;
	if (!*path && (flags & AT_EMPTY_PATH)) {
		if (dirfd == KURA_AT_ROOT) {
			*ino = fs->sb->root_ino;
			return 0;
		}
		int64_t i = kura_fd_ino(fs, dirfd);
		if (i < 0)
			return (int)i;
		*ino = (uint64_t)i;
		return 0;
	}
	uint64_t start;
	int ret = fd_dir_ino(fs, dirfd, path, &start);
	if (ret)
		return ret;
	struct walk w;
	ret = path_walk(fs, start, path, flags & AT_SYMLINK_NOFOLLOW ? 0 : WALK_FOLLOW, &w);
	*ino = w.ino;
	return ret;
}

/* name's value from a loaded blob into value (size 0: only its length, as
 * getxattr(2) asks); -ENODATA, -ERANGE. */
static ssize_t value_of(uint8_t *buf, const char *name, void *value, size_t size)
{
	size_t at;
	struct xa_rec *r = find(buf, name, strlen(name), &at);
	if (!r)
		return -ENODATA;
	if (size && size < r->value_len)
		return -ERANGE;
	if (size)
		memcpy(value, (char *)(r + 1) + r->name_len, r->value_len);
	return (ssize_t)r->value_len;
}

/* The blob of the inode a call names, after the permission check for name
 * (none for a listing, name NULL). */
static int blob_of(struct kura_fs *fs, int dirfd, const char *path, int flags, const char *name, int write,
		   uint8_t *buf, uint64_t *ino, const struct kura_inode **ipp)
{
	int err = target(fs, dirfd, path, flags, ino);
	const struct kura_inode *ip = err ? NULL : ino_get(fs, *ino);
	if (!err && !ip)
		err = -EBADF;
	if (!err && name)
		err = may_access(fs, ip, name, write);
	if (!err)
		err = load(fs, *ino, buf);
	*ipp = ip;
	return err;
}

ssize_t kura_getxattrat(kura_fs *fs, int dirfd, const char *path, const char *name, void *value, size_t size,
			int flags)
{
	int err = check_name(name);
	if (err)
		return err;
	uint8_t buf[XA_MAX_BLOB];
	fs_lock_for_read(fs); /* the blob is read whole: no optimistic retry */
	uint64_t ino;
	const struct kura_inode *ip;
	ssize_t ret = blob_of(fs, dirfd, path, flags, name, 0, buf, &ino, &ip);
	if (!ret)
		ret = value_of(buf, name, value, size);
	fs_unlock_for_read(fs);
	return ret;
}

ssize_t kura_listxattrat(kura_fs *fs, int dirfd, const char *path, char *list, size_t size, int flags)
{
	uint8_t buf[XA_MAX_BLOB];
	fs_lock_for_read(fs);
	uint64_t ino;
	const struct kura_inode *ip;
	ssize_t ret = blob_of(fs, dirfd, path, flags, NULL, 0, buf, &ino, &ip);
	if (!ret) {
		struct xa_head *hd = (void *)buf;
		int admin = creds_capable(creds_of(fs), KURA_CAP_SYS_ADMIN);
		size_t n = 0;
		for (size_t off = sizeof *hd; off + sizeof(struct xa_rec) <= hd->used && ret >= 0;) {
			struct xa_rec *r = (void *)(buf + off);
			size_t sz = rec_size(r->name_len, r->value_len);
			if (off + sz > hd->used)
				break;
			const char *nm = (const char *)(r + 1);
			/* trusted.* is listed only to those who may read it, as Linux does */
			if (admin || r->name_len < XATTR_TRUSTED_PREFIX_LEN ||
			    memcmp(nm, XATTR_TRUSTED_PREFIX, XATTR_TRUSTED_PREFIX_LEN)) {
				if (size && n + r->name_len + 1 > size)
					ret = -ERANGE;
				else if (size) {
					memcpy(list + n, nm, r->name_len);
					list[n + r->name_len] = 0;
				}
				n += r->name_len + 1;
			}
			off += sz;
		}
		if (ret >= 0)
			ret = (ssize_t)n;
	}
	fs_unlock_for_read(fs);
	return ret;
}

/* Makes the hidden directory (the first attribute of the pool). */
static int xattr_dir(struct kura_fs *fs, uint64_t *out)
{
	if ((*out = fs_state(fs)->xattr_dir))
		return 0;
	if (fs->sb->version < 3)
		return -EOPNOTSUPP; /* a format 2 pool has no field for it: `kura upgrade` */
	int err = inode_alloc(fs, S_IFDIR | 0700, out);
	if (err)
		return err;
	INO_SET(fs, *out, nlink, 2);
	INO_SET(fs, *out, parent, *out);
	tx_write64(&fs->tx, STATE_OFF(xattr_dir), *out);
	return fs->tx.err;
}

/* Writes buf as ino's blob (creating or freeing its holder). */
static int store(struct kura_fs *fs, uint64_t ino, const uint8_t *buf)
{
	const struct xa_head *hd = (const void *)buf;
	uint64_t h = holder_of(fs, ino), xd;
	char name[17];
	holder_name(ino, name);
	if (!hd->count) {
		if (h) {
			int err = dir_remove(fs, fs_state(fs)->xattr_dir, name, 16);
			if (err)
				return err;
			INO_SET(fs, h, nlink, 0);
			inode_free(fs, h);
		}
		return fs->tx.err;
	}
	int err;
	if (!h) {
		if ((err = xattr_dir(fs, &xd)) || (err = inode_alloc(fs, S_IFREG, &h)))
			return err;
		INO_SET(fs, h, parent, ino);
		const struct kura_inode *dp = ino_get(fs, xd);
		uint64_t old;
		unsigned type;
		/* An entry left for a freed inode whose slot ino reuses. */
		if (!dir_lookup(fs, dp, name, 16, &old, &type))
			err = dir_retarget(fs, xd, name, 16, h, DT_REG);
		else
			err = dir_add(fs, xd, name, 16, h, DT_REG);
		if (err)
			return err;
	}
	ssize_t w = inode_write(fs, h, buf, hd->used, 0);
	if (w < 0)
		return (int)w;
	return inode_truncate(fs, h, hd->used);
}

/* In a transaction: replaces (value) or removes (value NULL) the record
 * name of ino's blob, loaded in buf. */
static int put(struct kura_fs *fs, uint64_t ino, uint8_t *buf, const char *name, const void *value, size_t size,
	       int xflags)
{
	struct xa_head *hd = (void *)buf;
	const struct kura_inode *ip = ino_get(fs, ino);
	size_t len = strlen(name), at = 0;
	struct xa_rec *r = find(buf, name, len, &at);
	if (!r && (!value || (xflags & XATTR_REPLACE)))
		return -ENODATA;
	if (r && value && (xflags & XATTR_CREATE))
		return -EEXIST;
	if (r) { /* out with the old record */
		size_t sz = rec_size(r->name_len, r->value_len);
		memmove(buf + at, buf + at + sz, hd->used - at - sz);
		hd->used -= (uint32_t)sz;
		hd->count--;
	}
	if (value) {
		size_t sz = rec_size(len, size);
		if (hd->used + sz > XA_MAX_BLOB)
			return -ENOSPC;
		struct xa_rec n = { .name_len = (uint16_t)len, .value_len = (uint32_t)size };
		memset(buf + hd->used, 0, sz);
		memcpy(buf + hd->used, &n, sizeof n);
		memcpy(buf + hd->used + sizeof n, name, len);
		if (size)
			memcpy(buf + hd->used + sizeof n + len, value, size);
		hd->used += (uint32_t)sz;
		hd->count++;
	}
	hd->magic = XA_MAGIC;
	hd->owner_gen = ip->generation;
	/* The inode says whether it has an ACL, so that a permission check of
	 * one without costs no lookup. */
	uint16_t flag = !strcmp(name, XATTR_ACL_ACCESS) ? INODE_ACL : !strcmp(name, XATTR_ACL_DEFAULT) ? INODE_DEFACL : 0;
	if (flag)
		INO_SET(fs, ino, iflags, (uint16_t)(value ? ip->iflags | flag : ip->iflags & ~flag));
	return store(fs, ino, buf);
}

/* An ACL's own rules before it is stored: a valid value, the owner (or
 * CAP_FOWNER) setting it, a default ACL only on a directory; an access
 * ACL the mode can say is not stored but goes into the mode. */
static int put_acl(struct kura_fs *fs, uint64_t ino, uint8_t *buf, const char *name, const void *value,
		   size_t size, int xflags)
{
	const struct kura_inode *ip = ino_get(fs, ino);
	const struct kura_creds *c = creds_of(fs);
	int is_default = !strcmp(name, XATTR_ACL_DEFAULT), minimal = 0, err;
	mode_t mode = 0;
	if (!creds_owner(c, ip) && !creds_capable(c, KURA_CAP_FOWNER))
		return -EPERM;
	if (is_default && !S_ISDIR(ip->mode))
		return value ? -EACCES : -ENODATA;
	if (value && (err = acl_check_value(value, size, is_default, &minimal, &mode)))
		return err;
	if (is_default && value && size == 0)
		value = NULL; /* an empty default ACL removes it */
	if (!is_default && value) {
		mode_t m = (ip->mode & ~(mode_t)0777) | (mode & 0777);
		if ((m & S_ISGID) && !creds_in_group(c, ip->gid) && !creds_capable(c, KURA_CAP_FSETID))
			m &= ~(mode_t)S_ISGID;
		INO_SET(fs, ino, mode, m);
		if (minimal) { /* the mode says it all */
			err = put(fs, ino, buf, name, NULL, 0, 0);
			return err == -ENODATA ? 0 : err;
		}
	}
	return put(fs, ino, buf, name, value, size, xflags);
}

static int change(struct kura_fs *fs, int dirfd, const char *path, int flags, const char *name, const void *value,
		  size_t size, int xflags, int remove)
{
	uint8_t buf[XA_MAX_BLOB];
	int err = check_name(name);
	if (err)
		return err;
	if (!remove && (xflags & ~(XATTR_CREATE | XATTR_REPLACE)))
		return -EINVAL;
	if (!remove && size > XA_VALUE_MAX)
		return -E2BIG;
	if ((err = fs_begin(fs)))
		return err;
	uint64_t ino;
	const struct kura_inode *ip;
	err = blob_of(fs, dirfd, path, flags, name, 1, buf, &ino, &ip);
	const void *v = remove ? NULL : value ? value : "";
	if (!err)
		err = namespace_of(name) == NS_SYSTEM ? put_acl(fs, ino, buf, name, v, size, xflags)
						      : put(fs, ino, buf, name, v, size, xflags);
	if (!err)
		inode_touch(fs, ino, TOUCH_C);
	return fs_end(fs, err);
}

ssize_t xattr_get_raw(const struct kura_fs *fs, uint64_t ino, const char *name, void *value, size_t size)
{
	uint8_t buf[XA_MAX_BLOB];
	if (load(fs, ino, buf))
		return -EUCLEAN;
	return size ? value_of(buf, name, value, size) : -ERANGE;
}

int xattr_set_raw(struct kura_fs *fs, uint64_t ino, const char *name, const void *value, size_t size)
{
	uint8_t buf[XA_MAX_BLOB];
	int err = load(fs, ino, buf);
	return err ? err : put(fs, ino, buf, name, value, size, 0);
}

int kura_setxattrat(kura_fs *fs, int dirfd, const char *path, const char *name, const void *value, size_t size,
		    int xflags, int flags)
{
	if (size && !value)
		return -EFAULT;
	return change(fs, dirfd, path, flags, name, value, size, xflags, 0);
}

int kura_removexattrat(kura_fs *fs, int dirfd, const char *path, const char *name, int flags)
{
	return change(fs, dirfd, path, flags, name, NULL, 0, 0, 1);
}

void xattr_drop(struct kura_fs *fs, uint64_t ino)
{
	uint64_t h = holder_of(fs, ino);
	if (!h)
		return;
	char name[17];
	holder_name(ino, name);
	if (dir_remove(fs, fs_state(fs)->xattr_dir, name, 16))
		return;
	INO_SET(fs, h, nlink, 0);
	inode_free(fs, h);
}
