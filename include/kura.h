/*
 * kura.h — the public C API of the kura pool engine.
 *
 * A pool is one file holding a whole file system.  kura_mount() maps it; every
 * other call works on the mapped pool without entering the kernel (except the
 * `file` persistence back end, which writes its journal to the pool file at
 * durability points).
 *
 * Conventions
 *  - Every function that can fail returns a negative errno value (-ENOENT, ...)
 *    on failure and >= 0 on success.  errno is never read or written, so the
 *    calls are safe to wrap from an LD_PRELOAD layer that must preserve errno.
 *  - Paths are interpreted inside the pool: "/" is the pool's root.  A path
 *    without a leading '/' is resolved from the root as well (the engine has no
 *    working directory; the interposition layer keeps one).  ".." at the root
 *    stays at the root.  Absolute symlink targets are resolved from the root,
 *    unless the mount names a host_prefix (then see KURA_ESCAPED).
 *  - Descriptors returned by kura_open() are small integers private to this
 *    mount; they are not kernel descriptors.
 *  - The caller applies its umask: modes are stored as given (& 07777).
 *  - Every operation is atomic: after a crash at any instant the pool shows
 *    it wholly or not at all, and operations stay in order (never a later
 *    one without an earlier one).  When it is durable depends on the mount's
 *    sync mode (enum kura_sync): when it returns (KURA_SYNC_OP: always on
 *    pmem and memory pools), or at the next kura_fsync/kura_syncfs, or at
 *    each write of an O_SYNC/O_DSYNC descriptor (KURA_SYNC_FSYNC: the
 *    default of pools on a disk).
 *  - All calls are thread-safe.  Several processes may mount the same pool.
 */
#ifndef KURA_H
#define KURA_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <time.h>

#ifdef __cplusplus
extern "C" {
#endif

/* libkura.so exports this API and the calls it interposes, nothing else:
 * the engine's own functions are hidden, so that a program or library with
 * a function of the same name (crc32c, say) keeps calling its own. */
#pragma GCC visibility push(default)

typedef struct kura_fs kura_fs;

/* ---- pools ------------------------------------------------------------ */

#define KURA_MIN_POOL_SIZE (4ull << 20) /* 4 MiB */

/* Create a new pool file at `path` of `size` bytes (rounded down to 4 KiB).
 * Fails with -EEXIST if the file exists and is not empty, unless `force`. */
int kura_mkfs(const char *path, uint64_t size, int force);
/* kura_mkfs makes a new pool file 0600 (only its owner may use it); this
 * gives another mode, exactly (the umask not applied), e.g. 0660 for a group. */
int kura_mkfs_mode(const char *path, uint64_t size, int force, mode_t mode);

enum kura_persist {
	KURA_PERSIST_AUTO = 0, /* pmem on DAX/devdax, memory on tmpfs, else file; KURA_PERSIST env overrides */
	KURA_PERSIST_PMEM,     /* clwb|clflushopt + sfence, no system calls */
	KURA_PERSIST_FILE,     /* a working copy in shared memory, a redo journal on the pool file */
	KURA_PERSIST_MEMORY,   /* tmpfs/hugetlbfs: the mapping is the storage; ordering only */
};

enum kura_sync {
	KURA_SYNC_DEFAULT = 0, /* the back end's default (see README) */
	KURA_SYNC_OP,          /* every operation durable and atomic when it returns */
	KURA_SYNC_FSYNC,       /* every operation atomic, kept in order (a crash leaves a prefix of
	                          the history); durable at kura_fsync/kura_sync or on O_SYNC/O_DSYNC */
};

struct kura_mount_opts {
	enum kura_persist persist;
	int read_only;  /* map PROT_READ; every modifying call fails with -EROFS */
	int no_recover; /* fsck: do not roll back an interrupted transaction */
	/* NULL (the default): absolute symlink targets resolve from the pool's
	 * root.  Else the absolute host path the pool is seen at (an
	 * LD_PRELOAD layer's prefix, "/kura"), and symlinks mean what they
	 * would mean there: a target equal to it or below it continues at the
	 * pool's root without it; any other absolute target, and a ".." above
	 * the root (the root's parent is the prefix's, as a mount point's),
	 * leave the pool: the call fails with KURA_ESCAPED.  Copied at mount;
	 * see kura_set_host_prefix. */
	const char *host_prefix;
	/* When changes are durable (the environment's KURA_SYNC=op|fsync
	 * overrides it).  Only the file back end has a choice: pmem and
	 * memory are always KURA_SYNC_OP. */
	enum kura_sync sync;
	/* A pool of an older format is brought up to this kura's in place
	 * (kura upgrade); without it such a pool is refused. */
	int upgrade;
};

/* Returned (as a negative errno would be) by a path call of a mount with a
 * host_prefix whose path left the pool (through a symlink or a "..").  The call did
 * nothing; kura_escaped_path() is the host path that remains to resolve
 * (the target, or the prefix's parent, joined with the rest of the path),
 * for the caller to hand to the kernel.  Below every -errno (> -4096). */
#define KURA_ESCAPED (-4096)
/* Returned (as -EFBIG would be) by a write, truncation or fallocate that
 * the file size limit of kura_set_fsize_limit refused; the call did
 * nothing.  A layer serving a process reports EFBIG after sending it
 * SIGXFSZ, as Linux does for RLIMIT_FSIZE, and for that limit only: a
 * file past kura's own maximum size is plain -EFBIG, with no signal. */
#define KURA_XFSZ (-4097)
/* The process's file size limit (RLIMIT_FSIZE's soft limit), for every
 * mount, as Linux applies it: a write that starts at or past it fails
 * with KURA_XFSZ and one that crosses it is cut short at it; a
 * truncation, and a fallocate other than a hole punch, that would grow a
 * file past it fail with KURA_XFSZ (with FALLOC_FL_KEEP_SIZE too, as on
 * tmpfs).  Extended attributes, symlinks and maps are not limited.
 * UINT64_MAX (the default, RLIM_INFINITY) for none.  Forked children
 * keep it; a layer sets it anew after exec. */
void kura_set_fsize_limit(uint64_t limit);
/* ftruncate of a file a layer keeps for itself beside a pool (its lock
 * and notification tables in /dev/shm).  Like the pool's own files it is
 * the file system's, not the program's: the process's RLIMIT_FSIZE is
 * lifted for the call where the process may lift it, else the call fails
 * with -EFBIG and no SIGXFSZ.  0 or -errno. */
int kura_own_ftruncate(int fd, uint64_t size);
/* The host path of this thread's last KURA_ESCAPED (until its next one). */
const char *kura_escaped_path(void);
/* The host_prefix option for a mount made without it (kura_mount_inherit
 * callers), NULL to turn it off.  Not while other threads use fs.
 * -EINVAL for a relative or over-long prefix, -ENOMEM. */
int kura_set_host_prefix(kura_fs *fs, const char *prefix);

/* Map a pool.  On failure returns NULL and stores a negative errno in *err
 * (if err is non-NULL) and a one-line human-readable reason, naming the pool
 * path and what is wrong, retrievable with kura_last_error(). */
kura_fs *kura_mount(const char *pool_path, const struct kura_mount_opts *opts, int *err);
/* What a mount checks first, without mounting: the pool opens for reading,
 * its superblock is sound and its format one this kura reads.  0, or -errno
 * with kura_last_error() saying why.  A mount checks more (the log, the
 * root directory); a read-only one beside a mount of a disk pool also
 * replays all the journal that mount has not yet written home, which this
 * spares a caller that only wants a clear error early. */
int kura_probe(const char *pool_path);
/* Unmount (and free fs, whatever the result).  0, or -errno when what this
 * mount changed may not all be on the disk: a sync of the pool file failed,
 * or, for the last mount of a disk pool, writing everything home did (the
 * working copy in /dev/shm then keeps it for the next mount). */
int kura_unmount(kura_fs *fs);

/* The reason the last kura_mount()/kura_probe()/kura_mkfs() of this thread
 * failed. */
const char *kura_last_error(void);

/* The default pool: $XDG_DATA_HOME/kura/default.pool or
 * ~/.local/share/kura/default.pool.  Writes at most `len` bytes. */
int kura_default_pool_path(char *buf, size_t len);
#define KURA_DEFAULT_POOL_SIZE (1ull << 30) /* 1 GiB, sparse on creation */

/* Credentials a call is checked against, as Linux's struct cred: file
 * permission checks and new files' owners use fsuid/fsgid and the
 * supplementary groups; access()/kura_faccessat without AT_EACCESS the real
 * uid/gid, with caps_permitted if the real uid is 0 and no capabilities
 * otherwise.  caps holds the effective capabilities as bits 1 << CAP_*
 * (<linux/capability.h>); those that bear on files are KURA_CAPS_FS. */
struct kura_creds {
	uid_t uid, fsuid;
	gid_t gid, fsgid;
	uint64_t caps, caps_permitted;
	size_t ngroups;
	const gid_t *groups; /* supplementary groups; not copied */
	mode_t umask;        /* taken from new files' modes, unless their directory has a default ACL */
};
#define KURA_CAP_CHOWN           (1ull << 0)
#define KURA_CAP_DAC_OVERRIDE    (1ull << 1)
#define KURA_CAP_DAC_READ_SEARCH (1ull << 2)
#define KURA_CAP_FOWNER          (1ull << 3)
#define KURA_CAP_FSETID          (1ull << 4)
#define KURA_CAP_SYS_ADMIN       (1ull << 21) /* trusted.* extended attributes */
#define KURA_CAP_MKNOD           (1ull << 27) /* device nodes */
#define KURA_CAPS_FS (KURA_CAP_CHOWN | KURA_CAP_DAC_OVERRIDE | KURA_CAP_DAC_READ_SEARCH | KURA_CAP_FOWNER | KURA_CAP_FSETID | KURA_CAP_MKNOD | KURA_CAP_SYS_ADMIN)

/* The calling thread's credentials for every mount's calls from now on;
 * NULL: each mount's own (below).  *c is not copied: it must stay valid
 * while set, and the thread may change it between its calls. */
void kura_set_thread_creds(const struct kura_creds *c);

/* A mount's credentials, for threads that set none: uid and gid as real
 * and file-system ids, no supplementary groups, every capability in
 * KURA_CAPS_FS for uid 0 and none otherwise (not while other threads use
 * the mount).  Until it is called a mount uses the process's ids, groups
 * and capabilities as they were when the engine first needed them. */
int kura_set_creds(kura_fs *fs, uid_t uid, gid_t gid);

/* ---- files ------------------------------------------------------------ */

/* flags: O_RDONLY/O_WRONLY/O_RDWR, O_CREAT, O_EXCL, O_TRUNC, O_APPEND,
 * O_DIRECTORY, O_NOFOLLOW, O_CLOEXEC (ignored here), O_NOATIME, O_SYNC,
 * O_DSYNC and O_DIRECT (accepted: every write is synchronous already).
 * Opening a directory is allowed with O_RDONLY only (-EISDIR otherwise).
 * O_TMPFILE (with O_WRONLY or O_RDWR, else -EINVAL) on a directory: an
 * unnamed regular file there, freed at its last close (or, after a crash,
 * at the next mount) unless kura_linkat(fd, "", dir, name, AT_EMPTY_PATH)
 * names it first, which O_TMPFILE|O_EXCL forbids (-ENOENT). */
int kura_open(kura_fs *fs, const char *path, int flags, mode_t mode);
int kura_close(kura_fs *fs, int fd);
ssize_t kura_read(kura_fs *fs, int fd, void *buf, size_t count);
ssize_t kura_write(kura_fs *fs, int fd, const void *buf, size_t count);
ssize_t kura_pread(kura_fs *fs, int fd, void *buf, size_t count, off_t offset);
ssize_t kura_pwrite(kura_fs *fs, int fd, const void *buf, size_t count, off_t offset);
off_t kura_lseek(kura_fs *fs, int fd, off_t offset, int whence); /* + SEEK_DATA/SEEK_HOLE */
int kura_ftruncate(kura_fs *fs, int fd, off_t length);
int kura_truncate(kura_fs *fs, const char *path, off_t length);
/* mode: 0, FALLOC_FL_KEEP_SIZE, FALLOC_FL_PUNCH_HOLE|FALLOC_FL_KEEP_SIZE,
 * FALLOC_FL_ZERO_RANGE[|KEEP_SIZE]; anything else -EOPNOTSUPP. */
int kura_fallocate(kura_fs *fs, int fd, int mode, off_t offset, off_t len);
int kura_fsync(kura_fs *fs, int fd);
/* Every change made so far durable (sync(2), syncfs(2)). */
int kura_syncfs(kura_fs *fs);
int kura_fstat(kura_fs *fs, int fd, struct stat *st);
/* Duplicate a descriptor: both share one offset and status flags. */
int kura_dup(kura_fs *fs, int fd);
/* The O_ flags a descriptor was opened with (access mode and O_APPEND...). */
int kura_fd_flags(kura_fs *fs, int fd);
/* A new open file description (own offset and status flags) for the file
 * an open descriptor names, as Linux's open of /proc/self/fd/N: flags as
 * kura_open (access mode, O_TRUNC, O_APPEND, O_DIRECTORY -ENOTDIR,
 * O_CREAT|O_EXCL -EEXIST), permissions checked against the inode's mode.
 * Works on a file unlinked meanwhile. */
int kura_reopen(kura_fs *fs, int fd, int flags);

/* ---- atomic groups ----------------------------------------------------- */
/* A group of changes to one file through one open file description, made
 * durable all at once or not at all.  After kura_atomic_begin(fs, fd), the
 * description's write, pwrite, ftruncate and fallocate belong to the group;
 * kura_fsync(fs, fd) or kura_atomic_commit commits it (atomic, and durable
 * when it returns, in either sync mode); kura_atomic_abort discards it; the
 * last close of the description without a commit aborts it; a crash, or a
 * process killed, before the commit leaves no trace of it.
 *
 * Isolation: reads, fstat and lseek through the group's description see the
 * group (its writes over the file as it was at the begin); every other
 * description, in this process or another, and every map, sees the file as
 * last committed.  The commit replaces the blocks the group wrote and sets
 * the size to the group's; blocks it did not write keep whatever the file
 * holds at the commit.  Within the group, O_SYNC and O_DSYNC writes wait for
 * the commit to be durable, and fallocate reserves no space ahead.
 *
 * Errors: -EBADF (not open for writing), -EINVAL (not a regular file),
 * -EBUSY (a group is already open on the description), -EROFS.  A group
 * larger than one commit can carry (about one 4 KiB block per 512 bytes of
 * the pool's log: `kura info`) fails at the write that overflows it with
 * -ENOSPC, as does a write that finds the pool full; the group stays as it
 * was, to commit or abort.  Commit and abort without a group: a sync, and
 * nothing.  Descriptions with a group cannot be mapped (-ENODEV): a map
 * shows the file, not the group. */
int kura_atomic_begin(kura_fs *fs, int fd);
int kura_atomic_commit(kura_fs *fs, int fd);
int kura_atomic_abort(kura_fs *fs, int fd);
/* kura_atomic_begin that also drops the caller's pin of a shadow whose
 * group is over (0: none), as kura_map_unpin would, in the same
 * transaction: a layer that keeps a committed group's shadow pinned until
 * its pages show the file again saves a transaction per group. */
int kura_atomic_begin_retiring(kura_fs *fs, int fd, uint64_t retired);
/* The inode of the shadow that holds the group of fd's description (0:
 * none), and in *sole whether fd is the description's only descriptor
 * (its close then ends the group).  Successive groups of one description
 * may have the same shadow: a commit that leaves it empty (no map pinned
 * it) keeps it for the description's next group. */
int64_t kura_atomic_shadow(kura_fs *fs, int fd, int *sole);
/* For a layer that maps files (src/preload/groupmap.c): the group's own
 * block for file block fblock, made first (a copy of the view's bytes),
 * which the caller's maps then show instead of the file's, so their stores
 * join the group; pin: also pin the group's shadow inode (*shadow) as a
 * map pins a file (kura_map_unpin drops it, and frees the shadow after the
 * group ends).  -EINVAL without a group. */
int kura_atomic_map_block(kura_fs *fs, int fd, uint64_t fblock, int pin, uint64_t *block, uint64_t *shadow);
/* The same for up to n file blocks from fblock, in one transaction, into
 * blocks[]: the number made (at least 1), or -errno as above.  The blocks
 * after the first are taken only while the group and the pool have room to
 * spare, and never past the view's end: a layer taking pages over ahead
 * of a run of stores asks for more than it needs. */
int kura_atomic_map_blocks(kura_fs *fs, int fd, uint64_t fblock, size_t n, int pin, uint64_t *blocks,
			   uint64_t *shadow);
/* Gives back the group's own blocks of file blocks fblocks[0, n) that the
 * caller took and nothing changed: each that is still blocks[i] goes, and
 * the view shows the file's bytes there again, so the commit leaves them
 * as the file has them then.  The caller's maps must no longer show them;
 * while another pin of the group's shadow exists (a forked child's maps
 * may show them) they stay in the group.  0 or -errno (-EINVAL without a
 * group). */
int kura_atomic_unmap_blocks(kura_fs *fs, int fd, const uint64_t *fblocks, const uint64_t *blocks, size_t n);
/* kura_atomic_commit for a caller that holds own_pins maps of the file
 * whose pages at the group's blocks show the group's blocks: 0 if those
 * blocks became the file's (the pages need nothing), 1 if some were copied
 * into the file's blocks (another process maps them): the caller then maps
 * its pages at the file's blocks again before unpinning the shadow. */
int kura_atomic_commit_maps(kura_fs *fs, int fd, uint64_t own_pins);
/* Groups on several files, and changes of names, in one commit: the groups
 * of the descriptions behind files[i].fd (each begun with
 * kura_atomic_begin; a description without one adds nothing) take effect,
 * then ops run in order (paths as for the *at calls), all in one
 * transaction: after a crash, all of it or none.  Durable when it returns.
 * An op's failure, or a group's, undoes everything: every group stays open
 * (to commit again or abort; but for a group whose shadow is damaged,
 * -EIO: its writes are lost, and it ends) and the call returns that
 * -errno, with the
 * failing entry's index in *failed (files first, then ops) when failed is
 * not NULL.  The whole must fit one commit (kura_atomic_begin's limit,
 * over all the files): -ENOSPC otherwise.  files[i].copied comes back 1
 * where blocks were copied in place (kura_atomic_commit_maps). */
enum { KURA_GROUP_LINK = 1, KURA_GROUP_RENAME, KURA_GROUP_UNLINK, KURA_GROUP_RMDIR };
struct kura_group_file {
	int fd;
	uint64_t own_pins; /* as kura_atomic_commit_maps */
	int copied;        /* out */
};
struct kura_group_op {
	int kind;
	int olddirfd;        /* LINK: the descriptor of the file to name (O_TMPFILE), linked as linkat's AT_EMPTY_PATH */
	const char *oldpath; /* RENAME's source, UNLINK's and RMDIR's name; unused by LINK */
	int newdirfd;
	const char *newpath; /* LINK's and RENAME's new name */
	unsigned flags;      /* RENAME: RENAME_NOREPLACE or RENAME_EXCHANGE */
};
int kura_group_commit(kura_fs *fs, struct kura_group_file *files, int nfiles, const struct kura_group_op *ops,
		      int nops, int *failed);
#define KURA_GROUP_MAX 1024 /* files, and ops, in one call */
/* The same for a program running under the interposition layer (kura run,
 * LD_PRELOAD=libkura.so), on its own descriptors: 0, or -1 with errno as
 * above; ENOTSUP for a descriptor that is not a kura file.  There stores
 * through this process's shared maps of the file join the group too (a
 * store the group cannot take raises SIGBUS; README, Atomic groups).
 * fsync and fdatasync of the descriptor commit too.
 * include/kura_atomic.h finds these at run time, for programs that must
 * also run without kura. */
int kura_fbegin(int fd);
int kura_fcommit(int fd);
int kura_fabort(int fd);
/* A group over several files and names, for a program under the
 * interposition layer: after kura_gbegin(), every pool file the process
 * writes (write, pwrite, their vector forms, ftruncate, fallocate) or
 * names in kura_fbegin joins it, and unlink, rmdir, rename and open with
 * O_CREAT of a new name are deferred to the commit (the new file is
 * unnamed until then, reached by the descriptors its opens return, and
 * written directly: no one else can see it).  kura_gcommit() commits all of it in one transaction
 * (kura_group_commit): atomic after a crash, durable when it returns; if
 * it fails (-1 with errno: the first failing change's error, e.g. ENOENT
 * or EEXIST from a name that changed meanwhile) nothing changed and the
 * group stays open.  kura_gabort() discards it.  fsync, fdatasync,
 * kura_fcommit and F2FS's COMMIT of a member commit the whole group,
 * kura_fabort and F2FS's ABORT abort it.  Until the commit this process
 * too sees the names as they were; stores through shared maps join for
 * files in the group only.  mkdir, link, symlink and attribute changes
 * are not deferred.  One group per process, on one pool (EXDEV for a
 * file or name on another); EBUSY if one is open; a forked child has
 * none.  Errors: EINVAL (no group open). */
int kura_gbegin(void);
int kura_gcommit(void);
int kura_gabort(void);

/* ---- names ------------------------------------------------------------ */

int kura_stat(kura_fs *fs, const char *path, struct stat *st);
int kura_lstat(kura_fs *fs, const char *path, struct stat *st);
/* mode: F_OK or R_OK|W_OK|X_OK against the current creds. */
int kura_access(kura_fs *fs, const char *path, int mode);
int kura_mkdir(kura_fs *fs, const char *path, mode_t mode);
int kura_rmdir(kura_fs *fs, const char *path);
int kura_unlink(kura_fs *fs, const char *path);
int kura_link(kura_fs *fs, const char *oldpath, const char *newpath);
int kura_symlink(kura_fs *fs, const char *target, const char *linkpath);
/* Returns the target length (not NUL-terminated, truncated to bufsiz). */
ssize_t kura_readlink(kura_fs *fs, const char *path, char *buf, size_t bufsiz);
/* flags: 0, RENAME_NOREPLACE, RENAME_EXCHANGE. */
int kura_rename(kura_fs *fs, const char *oldpath, const char *newpath, unsigned flags);
/* Regular files, FIFOs, sockets and (with CAP_MKNOD) device nodes; dev is a
 * device's number, or for a FIFO or socket the token kura_socket_name
 * gives back.  Opening a device node through this API is -EACCES (nodev). */
int kura_mknod(kura_fs *fs, const char *path, mode_t mode, dev_t dev);
int kura_chmod(kura_fs *fs, const char *path, mode_t mode);
int kura_fchmod(kura_fs *fs, int fd, mode_t mode);
/* uid/gid of (uid_t)-1 / (gid_t)-1 leave that id unchanged.  Follows symlinks
 * unless `nofollow`. */
int kura_chown(kura_fs *fs, const char *path, uid_t uid, gid_t gid, int nofollow);
int kura_fchown(kura_fs *fs, int fd, uid_t uid, gid_t gid);
/* chattr's inode flags (FS_IOC_SETFLAGS, FS_IOC_FSSETXATTR): kura keeps
 * none, so a file's flags read 0, and setting them to 0 succeeds (the
 * owner's or CAP_FOWNER's to do; the change time moves, as on Linux).
 * Any flag is -EOPNOTSUPP, as tmpfs answers for the flags it does not keep:
 * a file said append-only or immutable that is not would be worse than the
 * error. */
int kura_fsetflags(kura_fs *fs, int fd, unsigned flags);
/* times[0] = atime, times[1] = mtime; NULL means now; UTIME_NOW/UTIME_OMIT
 * honoured as in utimensat(2). */
int kura_utimens(kura_fs *fs, const char *path, const struct timespec times[2], int nofollow);
int kura_futimens(kura_fs *fs, int fd, const struct timespec times[2]);
int kura_statvfs(kura_fs *fs, struct statvfs *sv);

/* ---- directories ------------------------------------------------------ */

typedef struct kura_dir kura_dir;
struct kura_dirent {
	uint64_t ino;
	uint64_t next_cookie;  /* kura_seekdir() value that resumes after this entry */
	unsigned char type;    /* DT_REG, DT_DIR, DT_LNK, DT_FIFO, DT_SOCK, DT_CHR, DT_BLK */
	char name[256];
};
kura_dir *kura_opendir(kura_fs *fs, const char *path, int *err);
/* Returns 1 and fills *ent, 0 at the end, or -errno.  "." and ".." come first.
 * Entries are returned in hash order; cookies stay valid while the directory
 * changes: no entry present throughout is skipped or returned twice. */
int kura_readdir(kura_dir *d, struct kura_dirent *ent);
long kura_telldir(kura_dir *d);
void kura_seekdir(kura_dir *d, long cookie);
void kura_rewinddir(kura_dir *d);
int kura_closedir(kura_dir *d);

/* ---- relative paths (*at) ----------------------------------------------
 * dirfd is a kura descriptor of a directory, or KURA_AT_ROOT for the pool's
 * root.  A relative path resolves from dirfd; an absolute one from the root
 * (dirfd is then ignored).  flags take the AT_* values of <fcntl.h> where
 * the matching Linux call does (AT_SYMLINK_NOFOLLOW, AT_REMOVEDIR,
 * AT_SYMLINK_FOLLOW, AT_EMPTY_PATH, AT_EACCESS); unknown flags: -EINVAL. */
#define KURA_AT_ROOT (-100)
int kura_openat(kura_fs *fs, int dirfd, const char *path, int flags, mode_t mode);
int kura_fstatat(kura_fs *fs, int dirfd, const char *path, struct stat *st, int flags);
/* kura_fstatat, and the inode's generation in *gen: an inode number is
 * reused once its file is gone, never with the same generation, so the
 * two name one inode for the pool's life (what a kernel file-system
 * server such as kura mount hands FUSE).  Not with AT_EMPTY_PATH on a
 * descriptor (-EINVAL). */
int kura_fstatat_gen(kura_fs *fs, int dirfd, const char *path, struct stat *st, uint32_t *gen, int flags);
int kura_faccessat(kura_fs *fs, int dirfd, const char *path, int mode, int flags);
int kura_mkdirat(kura_fs *fs, int dirfd, const char *path, mode_t mode);
int kura_mknodat(kura_fs *fs, int dirfd, const char *path, mode_t mode, dev_t dev);
/* For a socket node (S_IFSOCK, made with dev as its token): its inode,
 * token and owner, by which a preload layer names the kernel socket bound
 * to it.  -ECONNREFUSED if path is not a socket; flags as kura_fstatat's.
 * With AT_KURA_FIFO in flags, the same for a FIFO (-EOPNOTSUPP if not). */
#define AT_KURA_FIFO 0x40000000
int kura_socket_name(kura_fs *fs, int dirfd, const char *path, int flags, uint64_t *ino, uint64_t *token,
		     uid_t *owner);
int kura_unlinkat(kura_fs *fs, int dirfd, const char *path, int flags);
int kura_renameat2(kura_fs *fs, int olddirfd, const char *oldpath, int newdirfd, const char *newpath,
		   unsigned flags);
/* Bind mounts inside the pool, for a caller with CAP_SYS_ADMIN (see
 * kura(3)): walks that reach target go on in source until the bind is
 * undone; kept outside the pool, they end with its last mount.  unbind's
 * flags: AT_SYMLINK_NOFOLLOW (umount2's UMOUNT_NOFOLLOW). */
int kura_bindat(kura_fs *fs, int srcdirfd, const char *source, int dstdirfd, const char *target);
int kura_unbindat(kura_fs *fs, int dirfd, const char *target, int flags);
int kura_linkat(kura_fs *fs, int olddirfd, const char *oldpath, int newdirfd, const char *newpath, int flags);
int kura_symlinkat(kura_fs *fs, const char *target, int dirfd, const char *linkpath);
ssize_t kura_readlinkat(kura_fs *fs, int dirfd, const char *path, char *buf, size_t bufsiz);
int kura_fchmodat(kura_fs *fs, int dirfd, const char *path, mode_t mode, int flags);
int kura_fchownat(kura_fs *fs, int dirfd, const char *path, uid_t uid, gid_t gid, int flags);
int kura_utimensat(kura_fs *fs, int dirfd, const char *path, const struct timespec times[2], int flags);
int kura_truncateat(kura_fs *fs, int dirfd, const char *path, off_t length);
/* A directory stream over an open directory descriptor (which it takes
 * over: kura_closedir closes it), as fdopendir(3). */
kura_dir *kura_fdopendir(kura_fs *fs, int fd, int *err);
/* The descriptor a stream reads (as dirfd(3)). */
int kura_dirfd(kura_dir *d);
/* The in-pool absolute path ("/a/b") of the directory an open descriptor
 * names, found by walking parent links, of any length that fits len:
 * -ENOENT if it was removed, -ENOTDIR for a non-directory, -ERANGE if len
 * is too small. */
int kura_getpath(kura_fs *fs, int fd, char *buf, size_t len);

/* ---- processes ----------------------------------------------------------
 * Open file descriptions live in memory shared with forked children, so a
 * descriptor inherited across fork() shares its offset and flags with the
 * parent's, as POSIX requires.  Bracket fork() with these three calls (the
 * interposition layer does it from pthread_atfork handlers). */
void kura_fork_prepare(kura_fs *fs);
void kura_fork_parent(kura_fs *fs);
void kura_fork_child(kura_fs *fs);
/* The process is about to exit without unmounting (an atexit handler, a
 * library destructor): if no other process has the pool mounted, make
 * every change durable and remove the pool's shared-memory objects.  The
 * mount stays usable by this process until it exits.  0 or -errno. */
int kura_release(kura_fs *fs);
/* Across exec: kura_state_fd() is a memfd holding the open file
 * descriptions (kura_exec_prepare() keeps it open); a descriptor's description has a stable
 * id (kura_fd_export).  The new image mounts with kura_mount_inherit() and
 * adopts each id with kura_fd_import(), taking over the reference the old
 * image held.  Descriptors that must not survive exec are kura_close()d
 * before it. */
int kura_state_fd(kura_fs *fs);
/* The family's hold on its open counts in the pool's lock table: while
 * any process keeps this descriptor, other mounts know the family's files
 * are open; once none does they take its counts back and free the unlinked
 * files it held (a killed process closes nothing).  Never close it; -1 if
 * the mount has none (its counts then last until the pool's last mount). */
int kura_owner_fd(kura_fs *fs);
/* Every descriptor the mount holds: the pool file (and its direct-I/O
 * twin), the working copy, the lock table, kura_state_fd() and
 * kura_owner_fd().  A layer that serves a program's close() must keep the
 * program from closing these: a program that closes "every" descriptor
 * (Python's subprocess with close_fds, closefrom, daemons) would leave the
 * mount writing to a closed or reused number.  Fills out (up to max) and
 * returns how many there are. */
int kura_mount_fds(kura_fs *fs, int *out, int max);
/* Just before an exec that hands the descriptions over: keeps
 * kura_state_fd() and kura_owner_fd() open across it, and holds the pool's
 * shared table for the new image.  Without it, if the exec'ing process is
 * the last to have the pool mounted, a mount in between may reclaim the
 * unlinked files it held, and kura_mount_inherit then fails with -ESTALE
 * rather than adopt them.  kura_exec_failed() undoes it when the exec
 * returns. */
void kura_exec_prepare(kura_fs *fs);
void kura_exec_failed(kura_fs *fs);
long kura_fd_export(kura_fs *fs, int fd);
kura_fs *kura_mount_inherit(const char *pool_path, const struct kura_mount_opts *opts, int state_fd, int *err);
int kura_fd_import(kura_fs *fs, long id);
/* Status flags after open, as F_GETFL/F_SETFL: only O_APPEND, O_NONBLOCK,
 * O_NOATIME, O_DIRECT may change. */
int kura_fd_setfl(kura_fs *fs, int fd, int flags);
/* The inode number behind a descriptor. */
int64_t kura_fd_ino(kura_fs *fs, int fd);

/* ---- extended attributes (xattr.c) -------------------------------------
 * getxattr(2) and the rest, with Linux's (ext4's) answers: AT_EMPTY_PATH
 * with "" names dirfd itself, AT_SYMLINK_NOFOLLOW the link (l*xattr).
 * Namespaces user.*, trusted.* and security.*, and of system.* the POSIX
 * ACLs system.posix_acl_access and _default (enforced; acl.c); any other
 * system.* name is -EOPNOTSUPP.  All of an inode's attributes fit in one
 * block (-ENOSPC). */
ssize_t kura_getxattrat(kura_fs *fs, int dirfd, const char *path, const char *name, void *value, size_t size,
			int flags);
int kura_setxattrat(kura_fs *fs, int dirfd, const char *path, const char *name, const void *value, size_t size,
		    int xflags, int flags);
ssize_t kura_listxattrat(kura_fs *fs, int dirfd, const char *path, char *list, size_t size, int flags);
int kura_removexattrat(kura_fs *fs, int dirfd, const char *path, const char *name, int flags);

/* ---- shared maps (map.c) ------------------------------------------------
 * A shared map of a kura file shows the file's blocks in the pool itself:
 * the caller maps kura_map_fd() (MAP_SHARED) at the pool offsets that
 * kura_map_blocks() gives, one page per file block, so its stores, other
 * processes' maps and kura_read/kura_write see the same bytes at once.
 * While a map exists it must be pinned: a pin counts as an open of the
 * inode (an unlinked file lives on) and keeps every block the map may show
 * from reuse (see src/mapped.h).  Durability: stores through a map are
 * made durable by kura_map_sync(), as msync(MS_SYNC) or fsync would. */
/* Pins the inode open as fd for a map; prot_write asks for a writable
 * one.  Linux's answers: -EACCES (not open for reading, or prot_write
 * without O_RDWR), -ENODEV (not a regular file).  *ino names it after. */
int kura_map_pin(kura_fs *fs, int fd, int prot_write, uint64_t *ino);
/* One more pin of a pinned inode (a map split, a forked child's maps). */
int kura_map_repin(kura_fs *fs, uint64_t ino);
/* Drops a pin; the last one of an unlinked file frees it. */
int kura_map_unpin(kura_fs *fs, uint64_t ino);
/* A truncation of a mapped file gives its cut-off blocks to a holder,
 * kept while any map may show them (see src/mapped.h).  The count of such
 * truncations of ino so far; read it before looking up a new map's
 * blocks. */
uint64_t kura_map_truncations(kura_fs *fs, uint64_t ino);
/* The count as the calling thread's truncations that kept blocks since the
 * last call left it (0: none), and in *before the count just before the
 * first of them, UINT64_MAX if another process's came in between.  Called
 * before a truncation to start afresh, and after it: a map whose pages
 * the caller has covered past the new end, and whose count was *before,
 * is clean at the returned count. */
uint64_t kura_map_own_truncation(uint64_t *before);
/* The caller holds own_pins pins of ino, and none of its maps shows a
 * block past the end of the file or one that a truncation it did not make
 * (the count is still truncs) took away: if those are all the pins there
 * are, the kept blocks are freed now rather than with the last map.
 * 0 or -errno. */
int kura_map_trim(kura_fs *fs, uint64_t ino, uint64_t own_pins, uint64_t truncs);
/* 1 if the calling thread is inside an operation on fs (a signal handler
 * that interrupted one must not start another: it would wait for itself). */
int kura_in_operation(kura_fs *fs);
/* The descriptor to map and whether it may be mapped writable. */
int kura_map_fd(kura_fs *fs, int *writable);
/* For file blocks [first, first + n) of a pinned inode, the pool offsets
 * to map (0: a hole, or past the end of the file), allocating blocks for
 * holes below the end of the file when alloc (-ENOSPC, with none taken,
 * if they would not all fit).  offs NULL: only the allocation, for a
 * whole map before it is covered piece by piece.  Returns the file's size
 * or -errno. */
int64_t kura_map_blocks(kura_fs *fs, uint64_t ino, uint64_t first, uint64_t n, int alloc, uint64_t *offs);
/* Stores made through a map of file blocks [first, first + n): with
 * KURA_MAP_RECORD they become part of the pool's history as a transaction
 * (the file back end journals them, pmem flushes them), with
 * KURA_MAP_DURABLE too durable before the call returns (msync MS_SYNC);
 * with neither they are only written home by the next checkpoint (the
 * interposition layer's choice for a large map that goes away unsynced).
 * 0 or -errno. */
#define KURA_MAP_RECORD  1
#define KURA_MAP_DURABLE 2
int kura_map_sync(kura_fs *fs, uint64_t ino, uint64_t first, uint64_t n, int how);

/* ---- pool-wide -------------------------------------------------------- */
/* The pool format version this library writes (and the newest it reads). */
unsigned kura_format_version(void);

struct kura_info {
	uint32_t format_version;
	uint64_t pool_size, block_size;
	uint64_t blocks_total, blocks_free;
	uint64_t log_size;
	uint64_t files, directories, symlinks, orphans;
	const char *persist; /* "pmem", "memory" or "file" */
	const char *sync;    /* "op" or "fsync": when changes are durable (KURA_SYNC) */
};
int kura_info(kura_fs *fs, struct kura_info *info);

/* Check every invariant of the on-pool format of an unmounted (or quiescent)
 * pool.  Each problem found is passed to `report` as one line naming the
 * object and what is wrong.  With `repair`, leaked blocks and inodes are freed
 * and orphans reclaimed.  Returns the number of problems found (0 = clean),
 * or -errno if the pool cannot be opened or its superblock is unusable (the
 * reason then also goes to `report`). */
typedef void (*kura_report_fn)(void *ctx, const char *line);
int kura_fsck(const char *pool_path, int repair, kura_report_fn report, void *ctx);

#pragma GCC visibility pop

#ifdef __cplusplus
}
#endif
#endif
