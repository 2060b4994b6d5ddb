/*
 * work_table.h — the workload table: the kinds of call, the entry that
 * names one call and its arguments, and every entry a workload may list
 * (work.h runs them).  Included once, by work.h.
 */
#ifndef CRASH_WORK_TABLE_H
#define CRASH_WORK_TABLE_H

#define WK_SLOTS 6

enum wk_kind {
	K_CREAT, K_MKNOD, K_MKDIR, K_RMDIR, K_WRITE, K_PWRITE, K_FTRUNC, K_TRUNC, K_FALLOC, K_LINK, K_UNLINK,
	K_RENAME, K_SYMLINK, K_FSYNC, K_CHMOD, K_CLOSE, K_OPEN, K_CLOSE_AUTO, K_MAPWRITE, K_SETXATTR, K_RMXATTR, K_SETACL, K_PINTRUNC, K_PINTRIM,
	K_GBEGIN, K_GCOMMIT, K_GABORT, K_GMAPWRITE, K_GSET,
};

/* What a gset entry's kura_group_commit carries besides foo's group
 * (wk_op.mode): A/foo's group too, a rename a -> b, an unnamed file made
 * first and linked as a with b unlinked. */
enum { WK_GSET_AFOO = 1, WK_GSET_RENAME = 2, WK_GSET_TMPFILE = 4 };

struct wk_op {
	const char *name;
	enum wk_kind kind;
	const char *a, *b;
	int slot;         /* descriptor slot used or filled */
	long off, len;    /* write/truncate/fallocate geometry; open flags in len for K_OPEN */
	int mode;         /* fallocate mode, rename flags, chmod mode; gmapwrite's pages taken ahead */
};

/* Names of 100 bytes (entries of 120): 26 of them overflow MERGE_LIMIT
 * (3060 bytes of a bucket) by one entry, so removing any one merges. */
#define WK_G_STEM "G/entry-of-a-hundred-bytes-entry-of-a-hundred-bytes-entry-of-a-hundred-bytes-entry-of-a-hundred"
#define WK_G_SOLO WK_G_STEM "-solo"

/* Slots after setup: 0 foo rw, 1 foo rw|append, 2 A/foo rw, 3 bar rw; 4 and 5
 * are filled by creat/open entries. */
static const struct wk_op wk_table[] = {
	{ "creat:baz", K_CREAT, "baz", 0, 4, 0, 0, 0 },
	{ "creat:A/C/new", K_CREAT, "A/C/new", 0, 5, 0, 0, 0 },
	{ "creat:foo-excl", K_CREAT, "foo", 0, 4, 0, 0, 0 },
	{ "mknod:A/baz", K_MKNOD, "A/baz", 0, 0, 0, 0, 0 },
	{ "mkfifo:B/fifo", K_MKNOD, "B/fifo", 0, 0, 0, 0, S_IFIFO },
	{ "mkdir:D", K_MKDIR, "D", 0, 0, 0, 0, 0 },
	{ "mkdir:A/C/D", K_MKDIR, "A/C/D", 0, 0, 0, 0, 0 },
	{ "mkdir:B/E", K_MKDIR, "B/E", 0, 0, 0, 0, 0 },
	{ "rmdir:A/C", K_RMDIR, "A/C", 0, 0, 0, 0, 0 },
	{ "rmdir:B-notempty", K_RMDIR, "B", 0, 0, 0, 0, 0 },
	{ "append4k:foo", K_WRITE, 0, 0, 1, 0, 4096, 0 },
	{ "append3:foo", K_WRITE, 0, 0, 1, 0, 3, 0 },
	{ "pwrite:foo:1@0", K_PWRITE, 0, 0, 0, 0, 1, 0 },
	{ "pwrite:foo:2@63", K_PWRITE, 0, 0, 0, 63, 2, 0 },
	{ "pwrite:foo:3@4095", K_PWRITE, 0, 0, 0, 4095, 3, 0 },
	{ "pwrite:foo:1k@100", K_PWRITE, 0, 0, 0, 100, 1024, 0 },
	{ "pwrite:foo:100@5990", K_PWRITE, 0, 0, 0, 5990, 100, 0 },
	{ "pwrite:foo:5000@3000", K_PWRITE, 0, 0, 0, 3000, 5000, 0 },
	{ "pwrite:foo:4k@4096", K_PWRITE, 0, 0, 0, 4096, 4096, 0 },
	{ "pwrite:foo:8k@8192", K_PWRITE, 0, 0, 0, 8192, 8192, 0 },
	{ "pwrite:foo:10@20000", K_PWRITE, 0, 0, 0, 20000, 10, 0 },
	{ "pwrite:A/foo:200@4000", K_PWRITE, 0, 0, 2, 4000, 200, 0 },
	{ "pwrite:bar:3@98", K_PWRITE, 0, 0, 3, 98, 3, 0 },
	{ "pwrite:baz:70@0", K_PWRITE, 0, 0, 4, 0, 70, 0 },
	{ "ftrunc:foo:0", K_FTRUNC, 0, 0, 0, 0, 0, 0 },
	{ "ftrunc:foo:100", K_FTRUNC, 0, 0, 0, 100, 0, 0 },
	{ "ftrunc:foo:4097", K_FTRUNC, 0, 0, 0, 4097, 0, 0 },
	{ "ftrunc:foo:12288", K_FTRUNC, 0, 0, 0, 12288, 0, 0 },
	{ "trunc:A/foo:10", K_TRUNC, "A/foo", 0, 0, 10, 0, 0 },
	{ "trunc:bar:5000", K_TRUNC, "bar", 0, 0, 5000, 0, 0 },
	{ "falloc:foo:0+16k", K_FALLOC, 0, 0, 0, 0, 16384, 0 },
	{ "falloc:foo:keep", K_FALLOC, 0, 0, 0, 6000, 8192, FALLOC_FL_KEEP_SIZE },
	{ "falloc:foo:punch", K_FALLOC, 0, 0, 0, 100, 5000, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE },
	{ "falloc:foo:punch-block", K_FALLOC, 0, 0, 0, 4096, 4096, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE },
	{ "falloc:foo:zero", K_FALLOC, 0, 0, 0, 10, 300, FALLOC_FL_ZERO_RANGE },
	{ "falloc:foo:zero-keep", K_FALLOC, 0, 0, 0, 5000, 4000, FALLOC_FL_ZERO_RANGE | FALLOC_FL_KEEP_SIZE },
	{ "link:foo:A/C/l", K_LINK, "foo", "A/C/l", 0, 0, 0, 0 },
	{ "link:A/foo:B/bar", K_LINK, "A/foo", "B/bar", 0, 0, 0, 0 },
	{ "link:bar:bar2", K_LINK, "bar", "bar2", 0, 0, 0, 0 },
	{ "unlink:foo", K_UNLINK, "foo", 0, 0, 0, 0, 0 },
	{ "unlink:A/bar", K_UNLINK, "A/bar", 0, 0, 0, 0, 0 },
	{ "unlink:B/foo", K_UNLINK, "B/foo", 0, 0, 0, 0, 0 },
	{ "rename:foo:baz", K_RENAME, "foo", "baz", 0, 0, 0, 0 },
	{ "rename:foo:bar", K_RENAME, "foo", "bar", 0, 0, 0, 0 },
	{ "rename:A/foo:B/foo", K_RENAME, "A/foo", "B/foo", 0, 0, 0, 0 },
	{ "rename:A/bar:B/new", K_RENAME, "A/bar", "B/new", 0, 0, 0, 0 },
	{ "rename:A:D", K_RENAME, "A", "D", 0, 0, 0, 0 },
	{ "rename:A/C:B/C", K_RENAME, "A/C", "B/C", 0, 0, 0, 0 },
	{ "rename:B:A/C", K_RENAME, "B", "A/C", 0, 0, 0, 0 },
	{ "rename:A:B-notempty", K_RENAME, "A", "B", 0, 0, 0, 0 },
	{ "rename:A:A/C/x-inside", K_RENAME, "A", "A/C/x", 0, 0, 0, 0 },
	{ "exchange:foo:A/foo", K_RENAME, "foo", "A/foo", 0, 0, 0, RENAME_EXCHANGE },
	{ "exchange:A:B", K_RENAME, "A", "B", 0, 0, 0, RENAME_EXCHANGE },
	{ "noreplace:bar:baz", K_RENAME, "bar", "baz", 0, 0, 0, RENAME_NOREPLACE },
	{ "symlink:foo:s", K_SYMLINK, "foo", "s", 0, 0, 0, 0 },
	{ "symlink:long:A/s", K_SYMLINK, 0, "A/s", 0, 0, 0, 0 },
	{ "fsync:foo", K_FSYNC, 0, 0, 0, 0, 0, 0 },
	{ "chmod:foo:600", K_CHMOD, "foo", 0, 0, 0, 0, 0600 },
	{ "close:foo", K_CLOSE, 0, 0, 0, 0, 0, 0 },
	{ "close:foo-append", K_CLOSE, 0, 0, 1, 0, 0, 0 },
	/* Stores through a shared map of the file's blocks, then msync
	 * (kura_map_sync, durable), as the interposition layer's map.c does.
	 * The file model only (wk_model_ok); page by page (wk_mapwrite_mixes). */
	{ "mapwrite:foo:10@100", K_MAPWRITE, 0, 0, 0, 100, 10, 0 },
	{ "mapwrite:foo:6k@1000", K_MAPWRITE, 0, 0, 0, 1000, 6144, 0 },
	/* A truncation while the file is mapped: its blocks go to a holder
	 * orphan (src/mapped.h), freed at the unpin, or by recovery. */
	{ "pintrunc:foo:100", K_PINTRUNC, 0, 0, 0, 100, 0, 0 },
	/* The same, by a process that holds every pin of the file, whose
	 * pages past the end are covered: the holder goes at once
	 * (kura_map_trim), in a transaction of its own. */
	{ "pintrim:foo:100", K_PINTRIM, 0, 0, 0, 100, 0, 0 },
	/* Extended attributes: the first makes the pool's attribute directory,
	 * a second on the same file rewrites its blob, a big one moves it. */
	{ "setxattr:foo:user.a", K_SETXATTR, "foo", "user.a", 0, 0, 10, 0 },
	{ "setxattr:foo:user.big", K_SETXATTR, "foo", "user.big", 0, 0, 3000, 0 },
	{ "setxattr:A:trusted.t", K_SETXATTR, "A", "trusted.t", 0, 0, 40, 0 },
	{ "rmxattr:foo:user.a", K_RMXATTR, "foo", "user.a", 0, 0, 0, 0 },
	/* An ACL: stored with the mode changed in one transaction; a default
	 * ACL, then a file created under it inherits it. */
	{ "setacl:foo", K_SETACL, "foo", "system.posix_acl_access", 0, 0, 0, 0 },
	{ "setacl:A-default", K_SETACL, "A", "system.posix_acl_default", 0, 0, 0, 0 },
	{ "open:foo:trunc", K_OPEN, "foo", 0, 4, 0, O_RDWR | O_TRUNC, 0 },
	{ "open:A/bar:creat", K_OPEN, "A/bar", 0, 5, 0, O_RDWR | O_CREAT, 0 },
	/* With the space setup (wk_setup_space): the last inode of an inode
	 * block goes, so the block is freed, and G's two buckets merge. */
	{ "unlink:G/solo", K_UNLINK, WK_G_SOLO, 0, 0, 0, 0, 0 },
	{ "rename:G/solo:A/solo", K_RENAME, WK_G_SOLO, "A/solo", 0, 0, 0, 0 },
	/* Atomic groups (src/group.h) on the descriptions of foo (slot 0) and
	 * A/foo (slot 2): the entries above that write through those slots
	 * join the group while one is open; commit shows all of it at once,
	 * abort and close none.  gmapwrite stores through the group's own
	 * blocks mapped, as the interposition layer's maps do once a store
	 * takes a page over (src/preload/groupmap.c); file model only. */
	{ "gbegin:foo", K_GBEGIN, 0, 0, 0, 0, 0, 0 },
	{ "gbegin:A/foo", K_GBEGIN, 0, 0, 2, 0, 0, 0 },
	{ "gcommit:foo", K_GCOMMIT, 0, 0, 0, 0, 0, 0 },
	{ "gcommit:A/foo", K_GCOMMIT, 0, 0, 2, 0, 0, 0 },
	{ "gabort:foo", K_GABORT, 0, 0, 0, 0, 0, 0 },
	{ "gmapwrite:foo:6k@1000", K_GMAPWRITE, 0, 0, 0, 1000, 6144, 0 },
	{ "gmapwrite:A/foo:100@3900", K_GMAPWRITE, 0, 0, 2, 3900, 100, 0 },
	/* As the layer does in a run of stores: two pages more taken with
	 * the range's in one call, stored into not at all, and given back
	 * (kura_atomic_unmap_blocks); the commit must leave them as the file
	 * has them, and a crash anywhere no trace of them. */
	{ "gmapahead:foo:100@4000", K_GMAPWRITE, 0, 0, 0, 4000, 100, 2 },
	/* Several files' groups and name changes in one kura_group_commit:
	 * all of it or none after a crash.  A description without a group
	 * adds nothing, so these are valid anywhere.  The last makes an
	 * O_TMPFILE file (len bytes written, kept in the first free slot from
	 * slot, as creat does) and names it in the commit that unlinks bar. */
	{ "gset:foo+A/foo", K_GSET, 0, 0, 0, 0, 0, WK_GSET_AFOO },
	{ "gset:foo+A/foo+mv:A/foo:B/foo", K_GSET, "A/foo", "B/foo", 0, 0, 0, WK_GSET_AFOO | WK_GSET_RENAME },
	{ "gset:foo+new:baz+rm:bar", K_GSET, "baz", "bar", 4, 0, 70, WK_GSET_TMPFILE },
};
#define WK_NOPS ((int)(sizeof wk_table / sizeof wk_table[0]))

/* Appended by the explorer, one per open slot; not in the table. */
static const struct wk_op wk_close_auto = { "close-at-end", K_CLOSE_AUTO, 0, 0, 0, 0, 0, 0 };

#endif
