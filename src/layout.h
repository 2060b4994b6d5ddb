/*
 * layout.h — the on-pool format, version 2 (version 1 chained free inode
 * slots one way only, so inode blocks could never be given back).
 *
 * The pool is an array of 4 KiB blocks:
 *
 *   0        superblock (immutable after mkfs, crc32c-protected)
 *   1        its copy, used when block 0 is unreadable
 *   2        state: the few counters and list heads that change
 *   3..      undo log (log_size bytes)
 *   ..       block bitmap, one bit per block of the whole pool
 *   ..       allocatable blocks: inode blocks, file data, block-map nodes,
 *            directory buckets
 *
 * Pointers inside the pool are block numbers or inode numbers, never
 * addresses, so the pool may map anywhere.  An inode number is the byte
 * offset of its 128-byte slot divided by 128; 0 means "none".
 *
 * Every change to anything but never-referenced (fresh) blocks is made under
 * an undo-log transaction (tx.c), so no structure here is ever seen torn after
 * recovery; checksums guard only what the log cannot vouch for: the
 * superblock and the log records themselves.  Everything read from the pool
 * is still bounds-checked before use, because a pool may be corrupt and a
 * reader in another process may be racing a writer (see lock.c).
 */
#ifndef KURA_LAYOUT_H
#define KURA_LAYOUT_H

#include <stdint.h>

#define KURA_BLOCK        4096u
#define KURA_BLOCK_SHIFT  12
#define KURA_MAGIC        0x4c4f4f5041525559ull /* "YURAPOOL" little-endian-ish tag */
#define KURA_VERSION      4u  /* 2: free inode slots doubly linked (kura_inode.prev), empty inode blocks freed;
                                 3: extended attributes (kura_state.xattr_dir, xattr.c);
                                 4: unwritten block-map entries (BMAP_UNWRITTEN) */
/* Format 3 is format 4 without an unwritten entry, so it is mounted as it
 * is; the first operation that leaves such an entry marks the pool 4
 * (super_mark_version), and a kura that reads only 3 refuses it from then. */
#define KURA_VERSION_AS_IS 3u
#define KURA_NAME_MAX     255u
#define KURA_SYMLINK_MAX  4095u
#define KURA_SYMLOOP_MAX  40

#define SB_PRIMARY   0
#define SB_COPY      1
#define STATE_BLOCK  2
#define LOG_FIRST    3

struct kura_super {
	uint64_t magic;
	uint32_t version;
	uint32_t block_size;
	uint64_t pool_size;       /* bytes; must equal the file's size */
	uint64_t nblocks;
	uint64_t log_block, log_blocks;
	uint64_t bitmap_block, bitmap_blocks;
	uint64_t first_data_block;
	uint64_t root_ino;
	uint64_t hash_key[2];     /* keys the directory hash: names an attacker picks cannot collide on purpose */
	uint8_t uuid[16];
	int64_t created_sec;
	uint8_t reserved[4096 - 120 - 4];
	uint32_t crc;             /* crc32c of everything before it */
};

struct kura_state {
	uint64_t free_blocks;
	uint64_t inode_free;      /* first free inode slot (chained through kura_inode.link and .prev) */
	uint64_t orphans;         /* first orphan inode (chained through kura_inode.link) */
	uint64_t nfiles, ndirs, nsymlinks, norphans;
	uint64_t next_generation;
	uint64_t xattr_dir;       /* format 3: the hidden directory of attribute holders (xattr.c), 0 until the first */
};

struct kura_ts {
	int64_t sec;
	uint32_t nsec;
	uint32_t pad;
};

#define INODE_SIZE   128u
#define INODE_SHIFT  7
#define INODES_PER_BLOCK (KURA_BLOCK / INODE_SIZE)

/* iflags: an O_TMPFILE file opened without O_EXCL, not linked yet, which
 * linkat(AT_EMPTY_PATH) may still give a name (Linux's I_LINKABLE).  It only
 * ever sits on an orphan (nlink 0), so a crash loses nothing by it. */
#define INODE_LINKABLE 1u
/* Format 3: the inode has a POSIX access ACL, or (a directory) a default
 * ACL, among its extended attributes (acl.c). */
#define INODE_ACL 2u
#define INODE_DEFACL 4u

/* mode == 0 marks a free slot. */
struct kura_inode {
	uint32_t mode;
	uint32_t nlink;
	uint32_t uid, gid;
	uint64_t size;            /* files: bytes; symlinks: target length; dirs: bytes of the slot array */
	uint64_t blocks;          /* blocks owned (data + map nodes + buckets), for st_blocks */
	struct kura_ts atime, mtime, ctime;
	uint64_t root;            /* block-map root (block number), 0 = empty */
	uint8_t height;           /* block-map height: 0 = root is the only data block */
	uint8_t dir_depth;        /* dirs: global depth of the extendible hash */
	uint16_t iflags;          /* INODE_LINKABLE; 0 in pools older than the flag, which is its meaning */
	uint32_t generation;
	uint64_t parent;          /* dirs: parent directory's inode number; char/block devices: the device number */
	uint64_t entries;         /* dirs: number of entries */
	uint64_t link;            /* free slot: next free; orphan: next orphan */
	uint64_t prev;            /* free slot: previous free (0: the list head), so a whole inode block can leave the list in O(1) per slot */
};

/* A block-map node holds 512 block numbers; 0 is a hole.  A leaf's entry
 * with BMAP_UNWRITTEN set names a block the file owns (fallocate gave it)
 * whose bytes are not the file's: it reads as zeros, and the write that
 * first fills it fills it whole and clears the bit in the same transaction.
 * So fallocate takes space without writing it, as ext4's unwritten extents
 * do.  Only leaf entries carry the bit, and never the root of a tree of
 * height 0. */
#define MAP_FANOUT   512u
#define MAP_SHIFT    9
#define BMAP_UNWRITTEN (1ull << 63)
#define MAP_MAX_HEIGHT 4      /* 512^4 blocks of 4 KiB = 256 TiB: beyond any pool */

/*
 * Directories are extendible hash tables.  The directory's block map holds an
 * array of 2^dir_depth bucket pointers (8 bytes each); slot i serves names
 * whose hash has low bits i.  A bucket is one block of packed entries.
 */
#define BUCKET_MAGIC 0x544b4342u  /* "BCKT" */
struct kura_bucket {
	uint32_t magic;
	uint16_t depth;           /* local depth */
	uint16_t used;            /* bytes of entries after the header */
	uint32_t count;
	uint32_t pad;
};
struct kura_dirent_disk {
	uint64_t hash;
	uint64_t ino;
	uint8_t name_len;
	uint8_t type;             /* DT_* */
	char name[];              /* not NUL-terminated; record padded to 8 bytes */
};
#define DIRENT_HEAD 18u
#define BUCKET_SPACE (KURA_BLOCK - sizeof(struct kura_bucket))
#define DIR_MAX_DEPTH 40

static inline uint32_t dirent_reclen(unsigned name_len)
{
	return (DIRENT_HEAD + name_len + 7u) & ~7u;
}

/* Undo log: a header line, then records.  A record is valid only if its epoch
 * equals the header's and its crc matches; the epoch advances when a
 * transaction ends, which retires all its records at once. */
#define LOG_MAGIC 0x474f4c4f444e55ull
struct kura_log_head {
	uint64_t magic;
	uint64_t epoch;
	uint8_t pad[48];
};
struct kura_log_rec {
	uint64_t off;
	uint64_t epoch;
	uint32_t len;
	uint32_t crc;             /* over off, epoch, len and the data */
};

/*
 * The file back end's redo journal (journal.c) uses the same region of the
 * pool file, told apart by the head's magic: a head line, then, from the
 * region's second block, records packed back to back.  A record is valid
 * only if its epoch equals the head's, its pos is where it lies and its crc
 * matches; recovery replays valid records in order and stops at the first
 * invalid one, and a new head (epoch + 1) retires them all once their
 * effect is durable in place.  A record's payload is items: where the
 * bytes go, then the bytes, each padded to 8.
 */
#define JOURNAL_MAGIC 0x4c4e524a4152554bull /* "KURAJRNL" */
struct kura_journal_head {
	uint64_t magic;
	uint64_t epoch;
	uint64_t nonce;           /* names the working copy in step with this head */
	uint32_t crc;             /* over the bytes before it */
	uint32_t pad;
	uint8_t pad2[32];
};
struct kura_jrec {
	uint64_t epoch;
	uint64_t pos;             /* bytes from the first record's start */
	uint64_t undo_epoch;      /* the working copy's undo epoch of its transaction */
	uint32_t len;             /* bytes, this header included; a multiple of 8 */
	uint32_t crc;             /* crc32c of the record with this field 0 */
};
#define JITEM_ZERO 1u /* len zero bytes, not stored */
struct kura_jitem {
	uint64_t off;
	uint32_t len;
	uint32_t flags;
};

_Static_assert(sizeof(struct kura_journal_head) == 64, "journal head is one line");
_Static_assert(sizeof(struct kura_jrec) == 32, "journal record head");
_Static_assert(sizeof(struct kura_super) == 4096, "superblock is one block");
_Static_assert(sizeof(struct kura_inode) == INODE_SIZE, "inode slot size");
_Static_assert(sizeof(struct kura_log_rec) == 24, "log record head");
_Static_assert(sizeof(struct kura_log_head) == 64, "log head is one line");

#endif
