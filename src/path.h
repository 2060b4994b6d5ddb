/*
 * path.h — from a path string to inodes: components, ".", "..", symlinks,
 * and the search/write permission checks made on the way.
 */
#ifndef KURA_PATH_H
#define KURA_PATH_H

#include <stddef.h>
#include <stdint.h>
#include "creds.h" /* perm_check, for every caller of path_walk */
#include "fs.h"

enum {
	WALK_FOLLOW = 1, /* follow a symlink in the last component */
	WALK_PARENT = 2, /* stop at the last component's directory; a missing last component is not an error */
	WALK_DEFER_LONG = 4, /* with WALK_PARENT: an over-long last name sets toolong instead of failing */
	WALK_CREAT = 8, /* open(O_CREAT): a last name with a trailing slash, also one a followed
			 * symlink ends in, is -EISDIR before it is looked up, as Linux has it */
};

struct walk {
	uint64_t dir;          /* directory holding the last component */
	uint64_t ino;          /* the object, 0 if it does not exist */
	unsigned type;         /* DT_* of ino */
	size_t len;            /* last component; 0 when the path is "/" */
	char name[KURA_NAME_MAX + 1];
	int dot;               /* the last component was "." or ".." */
	int trailing_slash;
	int toolong;
};

/* Resolves path from directory `start` (0: the root); absolute paths and
 * absolute symlink targets always start at the root. */
int path_walk(const struct kura_fs *fs, uint64_t start, const char *path, int flags, struct walk *w);


#endif
