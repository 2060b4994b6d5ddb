/*
 * acl.c — POSIX ACLs: system.posix_acl_access and system.posix_acl_default,
 * kept among an inode's extended attributes (xattr.c) in the kernel's own
 * xattr format (a version word, then tag/perm/id entries), and enforced.
 *
 * As Linux's fs/posix_acl.c, for a kernel without a security module:
 *  - an access ACL that says no more than the mode bits is not stored: the
 *    mode takes its permissions (posix_acl_equiv_mode);
 *  - with one stored, the owner's bits are USER_OBJ, the group bits the
 *    MASK and the others' bits OTHER: chmod rewrites those three entries,
 *    and the permission check walks the entries (owner, named users,
 *    owning and named groups through the mask, others);
 *  - a directory's default ACL is given to what is created in it: a new
 *    directory inherits it as its default, every new entry gets it as its
 *    access ACL narrowed by the mode asked for, and the umask is not
 *    applied then (creds.umask otherwise).
 * The inode's iflags say which it has (INODE_ACL, INODE_DEFACL), so a
 * permission check of an inode without an ACL costs one test of a bit.
 */
#include <errno.h>
#include <string.h>
#include <sys/stat.h>
#include "acl.h"
#include "creds.h"
#include "inode.h"
#include "xattr.h"

#define ACL_VERSION 2u
enum { TAG_USER_OBJ = 1, TAG_USER = 2, TAG_GROUP_OBJ = 4, TAG_GROUP = 8, TAG_MASK = 0x10, TAG_OTHER = 0x20 };
#define ACL_MAX_ENTRIES 500u /* what fits one attribute block, and more than ext4 takes */

struct acl_entry {
	uint16_t tag, perm;
	uint32_t id;
};

/* The entries of a value, or -EINVAL if it is not a valid ACL: the order
 * and completeness Linux's posix_acl_valid() demands. */
static int parse(const void *value, size_t size, const struct acl_entry **out, size_t *n)
{
	if (size < 4 || (size - 4) % sizeof(struct acl_entry))
		return -EINVAL;
	uint32_t version;
	memcpy(&version, value, 4);
	*n = (size - 4) / sizeof(struct acl_entry);
	*out = (const void *)((const char *)value + 4);
	if (version != ACL_VERSION || *n > ACL_MAX_ENTRIES)
		return -EINVAL;
	unsigned seen = 0, prev_tag = 0;
	uint32_t prev_id = 0;
	for (size_t i = 0; i < *n; i++) {
		const struct acl_entry *e = &(*out)[i];
		if (e->perm & ~7u || e->tag < prev_tag)
			return -EINVAL;
		switch (e->tag) {
		case TAG_USER_OBJ: case TAG_GROUP_OBJ: case TAG_MASK: case TAG_OTHER:
			if (seen & e->tag)
				return -EINVAL;
			break;
		case TAG_USER: case TAG_GROUP:
			if (e->id == (uint32_t)-1 || ((seen & e->tag) && e->id <= prev_id))
				return -EINVAL;
			prev_id = e->id;
			break;
		default:
			return -EINVAL;
		}
		seen |= e->tag;
		prev_tag = e->tag;
	}
	unsigned needed = TAG_USER_OBJ | TAG_GROUP_OBJ | TAG_OTHER;
	if ((seen & needed) != needed || ((seen & (TAG_USER | TAG_GROUP)) && !(seen & TAG_MASK)))
		return -EINVAL;
	return 0;
}

static unsigned perm_of(const struct acl_entry *e, size_t n, unsigned tag)
{
	for (size_t i = 0; i < n; i++)
		if (e[i].tag == tag)
			return e[i].perm;
	return 0;
}

static int has_tag(const struct acl_entry *e, size_t n, unsigned tag)
{
	for (size_t i = 0; i < n; i++)
		if (e[i].tag == tag)
			return 1;
	return 0;
}

/* The mode bits an ACL sets: owner, group class (the mask if there is
 * one), others. */
static mode_t acl_mode(const struct acl_entry *e, size_t n)
{
	unsigned group = has_tag(e, n, TAG_MASK) ? perm_of(e, n, TAG_MASK) : perm_of(e, n, TAG_GROUP_OBJ);
	return (mode_t)(perm_of(e, n, TAG_USER_OBJ) << 6 | group << 3 | perm_of(e, n, TAG_OTHER));
}

int acl_check_value(const void *value, size_t size, int is_default, int *minimal, mode_t *mode)
{
	const struct acl_entry *e;
	size_t n;
	if (is_default && size == 0)
		return 0;
	int err = parse(value, size, &e, &n);
	if (err)
		return err;
	*minimal = n == 3;
	*mode = acl_mode(e, n);
	return 0;
}

int acl_permission(const struct kura_fs *fs, uint64_t ino, const struct kura_inode *ip, int want)
{
	uint8_t buf[KURA_BLOCK];
	ssize_t size = xattr_get_raw(fs, ino, XATTR_ACL_ACCESS, buf, sizeof buf);
	const struct acl_entry *e;
	size_t n;
	if (size < 0 || parse(buf, (size_t)size, &e, &n))
		return 1; /* none (or damaged: fsck says so): the mode decides */
	const struct kura_creds *c = creds_of(fs);
	unsigned mask = has_tag(e, n, TAG_MASK) ? perm_of(e, n, TAG_MASK) : 7;
	if (ip->uid == c->fsuid)
		return (perm_of(e, n, TAG_USER_OBJ) & (unsigned)want) == (unsigned)want ? 0 : -EACCES;
	for (size_t i = 0; i < n; i++)
		if (e[i].tag == TAG_USER && e[i].id == c->fsuid)
			return (e[i].perm & mask & (unsigned)want) == (unsigned)want ? 0 : -EACCES;
	/* Any matching group entry that grants it is enough; one matched and
	 * none granted is a refusal, not a fall-through to others. */
	int matched = 0;
	for (size_t i = 0; i < n; i++) {
		int in = e[i].tag == TAG_GROUP_OBJ ? creds_in_group(c, ip->gid)
		       : e[i].tag == TAG_GROUP     ? creds_in_group(c, e[i].id) : 0;
		if (!in)
			continue;
		matched = 1;
		if ((e[i].perm & mask & (unsigned)want) == (unsigned)want)
			return 0;
	}
	if (matched)
		return -EACCES;
	return (perm_of(e, n, TAG_OTHER) & (unsigned)want) == (unsigned)want ? 0 : -EACCES;
}

/* Rewrites an ACL's owner, group-class and other entries from mode. */
static void apply_mode(uint8_t *value, size_t size, mode_t mode)
{
	struct acl_entry *e = (void *)(value + 4);
	size_t n = (size - 4) / sizeof *e;
	int has_mask = has_tag(e, n, TAG_MASK);
	for (size_t i = 0; i < n; i++) {
		if (e[i].tag == TAG_USER_OBJ)
			e[i].perm = (uint16_t)(mode >> 6 & 7);
		else if (e[i].tag == (has_mask ? TAG_MASK : TAG_GROUP_OBJ))
			e[i].perm = (uint16_t)(mode >> 3 & 7);
		else if (e[i].tag == TAG_OTHER)
			e[i].perm = (uint16_t)(mode & 7);
	}
}

int acl_chmod(struct kura_fs *fs, uint64_t ino, mode_t mode)
{
	uint8_t buf[KURA_BLOCK];
	const struct kura_inode *ip = ino_get(fs, ino);
	if (!ip || !(ip->iflags & INODE_ACL))
		return 0;
	ssize_t size = xattr_get_raw(fs, ino, XATTR_ACL_ACCESS, buf, sizeof buf);
	if (size < 4)
		return 0;
	apply_mode(buf, (size_t)size, mode);
	return xattr_set_raw(fs, ino, XATTR_ACL_ACCESS, buf, (size_t)size);
}

/* Narrows an ACL by a create mode (posix_acl_create_masq): each of the
 * three classes keeps only what the mode allows.  Returns the mode it
 * leaves, and whether anything beyond the mode remains. */
static mode_t create_masq(uint8_t *value, size_t size, mode_t mode, int *minimal)
{
	struct acl_entry *e = (void *)(value + 4);
	size_t n = (size - 4) / sizeof *e;
	int has_mask = has_tag(e, n, TAG_MASK);
	for (size_t i = 0; i < n; i++) {
		if (e[i].tag == TAG_USER_OBJ)
			e[i].perm &= (uint16_t)(mode >> 6 & 7);
		else if (e[i].tag == (has_mask ? TAG_MASK : TAG_GROUP_OBJ))
			e[i].perm &= (uint16_t)(mode >> 3 & 7);
		else if (e[i].tag == TAG_OTHER)
			e[i].perm &= (uint16_t)(mode & 7);
	}
	*minimal = n == 3;
	return (mode & ~(mode_t)0777) | acl_mode(e, n);
}

int acl_inherit(struct kura_fs *fs, uint64_t dir, uint64_t ino, mode_t *mode)
{
	uint8_t buf[KURA_BLOCK];
	const struct kura_inode *dp = ino_get(fs, dir);
	if (!dp || !(dp->iflags & INODE_DEFACL))
		return 0;
	ssize_t size = xattr_get_raw(fs, dir, XATTR_ACL_DEFAULT, buf, sizeof buf);
	const struct acl_entry *e;
	size_t n;
	if (size < 0 || parse(buf, (size_t)size, &e, &n))
		return 0;
	int err = 0;
	if (S_ISDIR(*mode) && (err = xattr_set_raw(fs, ino, XATTR_ACL_DEFAULT, buf, (size_t)size)))
		return err;
	int minimal;
	*mode = create_masq(buf, (size_t)size, *mode, &minimal);
	INO_SET(fs, ino, mode, *mode);
	if (!minimal)
		err = xattr_set_raw(fs, ino, XATTR_ACL_ACCESS, buf, (size_t)size);
	return err;
}
