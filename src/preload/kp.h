/*
 * kp.h — internals of the LD_PRELOAD interposition layer ("kp").
 *
 * Every wrapper classifies its arguments first: a path under a mount prefix
 * or a descriptor whose kernel number is a kura placeholder goes to the
 * engine, everything else to the next definition of the same symbol (libc),
 * untouched.  The layer lives in libkura.so together with the engine, so the
 * engine's own calls to open/fstat/flock/mmap... land in these wrappers too:
 * their pass-through path must never need the layer's locks.
 */
#ifndef KURA_PRELOAD_KP_H
#define KURA_PRELOAD_KP_H

#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <sys/types.h>

#include "kura.h"
#include "sighold.h" /* the layer's locks are taken inside holds */

#define KP_EXPORT __attribute__((visibility("default")))

/* The next definition of a symbol, resolved once.  dlsym of a symbol that
 * exists does not allocate (see the research notes), so this is safe from
 * any wrapper; a racing first call stores the same pointer twice. */
#define REAL(name)                                                           \
	({                                                                   \
		static __typeof__(&name) real_##name;                        \
		if (__builtin_expect(!real_##name, 0))                       \
			real_##name = (__typeof__(&name))dlsym(RTLD_NEXT, #name); \
		real_##name;                                                 \
	})
/* Same, for a name whose prototype is given as a type. */
#define REALT(type, name)                                                    \
	({                                                                   \
		static __typeof__(type) real_p;                                        \
		if (__builtin_expect(!real_p, 0))                            \
			real_p = (__typeof__(type))dlsym(RTLD_NEXT, name);              \
		real_p;                                                      \
	})

/* ---- the wrappers' common steps (names.c, socket.c) ---- */
/* kp_again is where KP_ENGINE starts the call over once the path has left
 * the pool through a symlink and kp names where it went. */
#define RESOLVE(dirfd, path, kp)                                  \
	struct kp_path kp;                                        \
	do {                                                      \
		int r_ = kp_classify((dirfd), (path), &kp);       \
		if (r_)                                           \
			return (int)kp_ret(r_);                   \
	} while (0);                                              \
	kp##_again: __attribute__((unused))
/* The engine's result for kp; on KURA_ESCAPED the wrapper runs again on the
 * side the host path lies (follow: the call follows a final symlink). */
#define KP_ENGINE(kp, follow, call)                                                          \
	({                                                                                   \
		long e_ = (call);                                                            \
		if (__builtin_expect(e_ == KURA_ESCAPED, 0) && !(e_ = kp_escape(&(kp), (follow)))) \
			goto kp##_again;                                                     \
		e_;                                                                          \
	})
/* A kernel call for kp.  A host path through a symlink into a prefix fails
 * there with ENOENT or ENOTDIR, the kernel not seeing the pool: only then is
 * the path walked, and if such a link is on it the wrapper starts over on
 * the kura side (follow: as KP_ENGINE). */
#define KP_KERNEL_CALL(kp, dirfd, follow, call)                                                   \
	({                                                                                        \
		long k_ = (call);                                                                 \
		if (__builtin_expect(k_ < 0, 0) && KP_HOST_MISS() &&                              \
		    kp_host_link(&(kp), KDIR(kp, dirfd), (follow)))                               \
			goto kp##_again;                                                          \
		k_;                                                                               \
	})
/* The path a short form hands to its *at form: its own, or after a walk
 * that followed host symlinks (hops) the kura path they led to. */
#define KPATH(kp, p) ((kp).hops ? (const char *)(kp).host : (p))
#define KFS(kp)                                                   \
	kura_fs *fs = kp_fs((kp).mnt);                            \
	if (!fs)                                                  \
		return -1
#define KDIR(kp, dirfd) ((kp).where == KP_KERNEL ? (dirfd) : AT_FDCWD)

/* The kernel's system call, for the layer's own use: syscall() itself is
 * ours (syscall.c) and serves the file system's numbers. */
#define kp_syscall(...) REALT(long (*)(long, ...), "syscall")(__VA_ARGS__)

/* glibc marks path arguments nonnull, which lets the compiler delete our
 * NULL checks; programs do pass NULL (and utimensat(fd, NULL) is the
 * kernel's futimens).  This hides the pointer's origin from the optimiser. */
#define KP_NN(p)                                 \
	({                                       \
		const void *q_ = (p);            \
		__asm__("" : "+r"(q_));          \
		q_ != NULL;                      \
	})

/* 0 if path is a string the layer may read (readable up to its NUL,
 * shorter than PATH_MAX), else what the kernel answers for it: -EFAULT or
 * -ENAMETOOLONG (argcheck.c). */
int kp_path_arg(const char *path);
#define KP_PATH_OK(p) (kp_path_arg(p) == 0)
/* How many bytes of buf, from its start, the program may read: len, or
 * fewer up to the first page it does not have (argcheck.c). */
size_t kp_mem_readable(const void *buf, size_t len);
#define KP_MEM_OK(buf, len) (kp_mem_readable((buf), (len)) == (len))
/* The same for storing into buf: len, or fewer up to the first page the
 * program may not store into.  Probing stores (argcheck.c): pass only
 * what the call will fill. */
size_t kp_mem_writable(void *buf, size_t len);
/* Whether the per-thread cache knows all of buf writable (no probe). */
int kp_mem_known_writable(const void *buf, size_t len);
/* 0, or -EFAULT for a result buffer of n bytes the program may not fill. */
#define KP_MEM_FILL_OK(buf, len) (kp_mem_writable((void *)(buf), (len)) == (len))
#define KP_OUT(buf, n) (KP_MEM_FILL_OK((buf), (n)) ? 0 : -EFAULT)
/* kp_path_arg, and -ENOENT for an empty path unless empty_ok. */
int kp_path_arg_or_empty(const char *path, int empty_ok);
/* mmap with MAP_FIXED may have replaced readable pages. */
void kp_map_fixed(void);
/* map.c: this process's shared maps of kura files. */
int kp_map_sync_ino(int mnt, uint64_t ino);
struct kp_fd;
/* groupmap.c: atomic groups with this process's shared maps of the file. */
extern int kp_groups_active, kp_group_ro_maps;
int kp_group_begin(struct kp_fd *e, kura_fs *fs, uint64_t ino);
int kp_group_commit(struct kp_fd *e, kura_fs *fs);
int kp_group_abort(struct kp_fd *e, kura_fs *fs);
int kp_group_commit_set(kura_fs *fs, int mnt, const int *kfds, int n, const struct kura_group_op *ops, int nops);
/* A group over several files and names (gset.c). */
extern int kp_gset_open;
int kp_gset_join(struct kp_fd *e);
int kp_gset_begin(struct kp_fd *e);
int kp_gset_end(struct kp_fd *e, int commit, int *ret);
struct kp_path;
int kp_gset_unlink(const struct kp_path *kp, int flags, int *ret);
int kp_gset_rename(const struct kp_path *a, const struct kp_path *b, unsigned flags, int *ret);
int kp_gset_create(const struct kp_path *kp, int flags, mode_t mode, int *ret);
/* Before a write through e: joins an open set (one load when none is). */
static inline int kp_gset_write(struct kp_fd *e)
{
	return __builtin_expect(__atomic_load_n(&kp_gset_open, __ATOMIC_RELAXED) == 0, 1) ? 0 : kp_gset_join(e);
}
/* Before the close of a descriptor, whose group it may end. */
void kp_group_closing(struct kp_fd *e, kura_fs *fs);
/* After a write, truncation or fallocate through e changed [off, off+len)
 * of a group: the pages of this process's maps there show the group. */
void kp_group_wrote(struct kp_fd *e, kura_fs *fs, uint64_t off, uint64_t len);
/* Before a call stores into buf: pages of it a group protects are taken
 * over first (the store would fault where it cannot be handled). */
void kp_group_prepare(void *buf, size_t len);
static inline void kp_group_buffer(void *buf, size_t len)
{
	if (__builtin_expect(__atomic_load_n(&kp_group_ro_maps, __ATOMIC_RELAXED) != 0, 0))
		kp_group_prepare(buf, len);
}
void kp_install_segv_handler(void);
/* mapsig.c: sigaction of SIGBUS or SIGSEGV once the layer handles it (the
 * program's action kept aside), or KP_NOT_MINE. */
#define KP_NOT_MINE (-2)
struct sigaction;
int kp_fault_sigaction(int sig, const struct sigaction *act, struct sigaction *old);
/* mapsync.c: before the engine copies to or from buf, pages of this
 * process's kura maps there that came within the file (or are holes of a
 * lazy map) are mapped in; the bytes before the first page still past the
 * file's end are the ones the call may use (the rest would fault: EFAULT,
 * as Linux). */
size_t kp_map_prepare(const void *buf, size_t len);
size_t kp_maps_count(void);
static inline size_t kp_map_buffer(const void *buf, size_t len)
{
	return __builtin_expect(kp_maps_count() == 0, 1) ? len : kp_map_prepare(buf, len);
}
/* The same before a kernel call (a pipe's write, a socket's send) is
 * handed buf: the kernel judges what it can use. */
void kp_map_kernel_buffer_slow(const void *buf, size_t len);
static inline void kp_map_kernel_buffer(const void *buf, size_t len)
{
	if (__builtin_expect(kp_maps_count() != 0, 0))
		kp_map_kernel_buffer_slow(buf, len);
}
/* The same for each buffer of a vector (writev, sendmsg...). */
struct iovec;
void kp_map_kernel_iov_slow(const struct iovec *iov, size_t cnt);
static inline void kp_map_kernel_iov(const struct iovec *iov, size_t cnt)
{
	if (__builtin_expect(kp_maps_count() != 0, 0))
		kp_map_kernel_iov_slow(iov, cnt);
}
/* atomic.c: F2FS's atomic-write ioctls on a kura descriptor; 1 if req is
 * one of them (*ret then holds the result), else 0. */
int kp_atomic_ioctl(struct kp_fd *e, unsigned long req, void *arg, int *ret);
void kp_map_truncated(int mnt, uint64_t ino, uint64_t size, uint64_t before, uint64_t after);
void kp_map_fork_prepare(void);
void kp_map_fork_done(void);
void kp_map_exec(int failed);
void kp_map_exit(void);
/* proc.c: at the end of the process, its descriptors and maps let go. */
void kp_release_all(void);

/* fsize.c: SIGXFSZ to the calling thread, as Linux sends it for a call
 * that RLIMIT_FSIZE refused (KURA_XFSZ); returns EFBIG, the call's errno. */
int kp_xfsz(void);

/* The errno of a kura result r < 0: -r, or for kura's own codes below
 * every errno what Linux would have said (and done). */
static inline int kp_errno(long r)
{
	if (__builtin_expect(r > KURA_ESCAPED, 1))
		return (int)-r;
	/* An escape no caller took up: the file is elsewhere, as EXDEV says. */
	return r == KURA_ESCAPED ? EXDEV : kp_xfsz();
}

/* Set errno from a kura result (negative errno) and return -1, or pass the
 * non-negative result through. */
static inline long kp_ret(long r)
{
	if (r < 0) {
		errno = kp_errno(r);
		return -1;
	}
	return r;
}

/* ---- configuration and mounts (config.c) ---- */

#define KP_MAX_MOUNTS 8
struct kp_mount {
	char prefix[PATH_MAX]; /* normalised, no trailing slash */
	size_t plen;
	char pool[PATH_MAX];
	kura_fs *fs; /* NULL until first use */
};
extern struct kp_mount kp_mounts[KP_MAX_MOUNTS];
extern int kp_nmounts;
extern __thread int kp_inside; /* >0 while the layer itself calls libc/engine */

/* Parses the environment once (cheap, no engine call). */
void kp_config(void);
/* The engine of mount m, mounting it on first use; NULL with errno set. */
kura_fs *kp_fs(int m);
/* Mounts every pool not mounted yet, and attaches its lock table: before
 * a program changes its credentials, as a file system is mounted before
 * a daemon drops privileges (it may not open the pool file afterwards). */
void kp_mount_all(void);
/* Adopts an engine mounted elsewhere (kura_mount_inherit after exec). */
void kp_set_fs(int m, kura_fs *fs);
/* One message per name on stderr when KURA_DEBUG is set; sets errno. */
int kp_unsupported(const char *what, int err);
void kp_debug(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
extern int kp_debug_on;
/* The pid cached at init and refreshed in fork children. */
extern pid_t kp_pid;

/* ---- credentials (creds.c) ---- */

/* Reads the process's credentials (the constructor; idempotent). */
void kp_creds_init(void);
/* Brings this thread's copy, which the engine checks calls against, up to
 * date with credential changes made since; cheap when there were none. */
extern unsigned kp_creds_gen;
extern __thread unsigned kp_creds_seen;
void kp_creds_refresh(void);
/* io.c: the process's umask, cached. */
mode_t kp_umask(void);
static inline void kp_creds_sync(void)
{
	if (__builtin_expect(kp_creds_seen != __atomic_load_n(&kp_creds_gen, __ATOMIC_ACQUIRE), 0))
		kp_creds_refresh();
}
long kp_creds_syscall(long n, long a, long b, long c, long d, long e, long f);
/* socket.c: the kernel FIFO behind the FIFO node kp names (-errno;
 * -EOPNOTSUPP if it is not a FIFO). */
struct kp_path;
int kp_fifo_open(const struct kp_path *kp, kura_fs *fs, int flags);
/* fstat of a kernel descriptor, and fchmod/fchown (chown != 0) of it: for a
 * FIFO kp_fifo_open opened, its pool node's. */
int kp_fifo_fstat(int fd, struct stat *st);
/* The same, 1 if it was such a FIFO, 0 if not, -1 with errno. */
int kp_fifo_stat_of(int fd, struct stat *st);
int kp_fifo_fchange(int fd, mode_t mode, uid_t uid, gid_t gid, int chown);
/* socket.c: the device a device node at path names, opened (-errno;
 * -EACCES if path is not a device node or may not be opened). */
int kp_dev_open(int mnt, kura_fs *fs, int kdirfd, const char *path, int flags);
void kp_creds_fork_prepare(void);
void kp_creds_fork_done(void);

/* ---- descriptor table (fdtab.c) ---- */

struct kp_fd {
	int used;         /* 0: the kernel fd is not ours */
	int kfd;          /* kura descriptor */
	int mnt;          /* index in kp_mounts */
	kura_dir *dir;    /* directory stream over a duplicate of kfd (readdir, getdents64), or NULL */
	char *path;       /* absolute host path it was opened by, for readlink/fchdir */
	int isdir;
};
/* The entry for kernel fd `fd` if it is a kura placeholder, else NULL. */
struct kp_fd *kp_get(int fd);
/* A new placeholder (a sealed, empty memfd) for kura descriptor kfd; returns
 * the kernel fd or -1 with errno set (the kura descriptor is then closed). */
int kp_install(int mnt, int kfd, int cloexec, const char *path, int isdir);
/* Records kfd as the kura side of an existing kernel fd (after a dup). */
int kp_attach(int fd, int mnt, int kfd, const char *path, int isdir);
/* Forgets a slot and closes its kura side (not the kernel fd). */
void kp_release(int fd);
/* Calls f for every occupied slot. */
void kp_foreach(void (*f)(int fd, struct kp_fd *e, void *arg), void *arg);
/* Re-points stdin/stdout/stderr at a cookie stream when fd 0/1/2 became a
 * placeholder, and back at the original stream when it did not. */
void kp_std_fixup(int fd);
pthread_mutex_t *kp_tab_lock(void);
/* While mounting, moves a descriptor the engine opened to the top range. */
int kp_relocate(int fd);
/* The template every placeholder duplicates (-1 before the first). */
int kp_template_fd(void);
void kp_template_lost(int fd);
/* Flushes the std stream of fd 0/1/2 before the kernel fd changes under it. */
void kp_std_preflush(int fd);

/* ---- paths (path.c) ---- */

enum kp_where { KP_KERNEL, KP_KERNEL_ABS, KP_KURA };
struct kp_path {
	enum kp_where where;
	int mnt;
	int kdirfd;            /* kura descriptor or KURA_AT_ROOT */
	const char *p;         /* path to use: inside the pool for KP_KURA */
	char buf[PATH_MAX];
	char host[PATH_MAX];   /* host absolute form (for KP_KURA), "" if unknown */
	int hops;              /* kp_escape()s and host symlinks followed since kp_classify */
};
/* Classifies (dirfd, path).  Returns 0, or -errno (ENAMETOOLONG, EBADF,
 * ELOOP).  A kura path whose symlinks (followed to the end) leave the pool
 * comes back as the host path they lead to (KP_KERNEL_ABS, or KP_KURA of
 * the mount it re-enters): for callers that pass kp.p on. */
int kp_resolve(int dirfd, const char *path, struct kp_path *out);
/* The same without asking the engine: the caller handles KURA_ESCAPED
 * itself (KP_ENGINE in names.c), with its own call's follow rules. */
int kp_classify(int dirfd, const char *path, struct kp_path *out);
/* kp_classify's step for an absolute path src (writable, possibly longer
 * than PATH_MAX before its "." and ".." are taken out); path.c says how. */
int kp_classify_norm(struct kp_path *out, char *src, int orig_is_exact);
/* dst = a "/" b, or -ENAMETOOLONG past PATH_MAX. */
int kp_join(char *dst, const char *a, const char *b);
/* links.c: what the last component of a kura path asks ("file/.",
 * "file/..", "file/") checked by the engine, 0 or -errno; and the physical
 * path of an absolute normalised host path of a kura file, as Linux's
 * realpath would find it (out may lie outside the pool). */
int kp_check_last_form(const struct kp_path *kp);
int kp_kura_realpath(const char *in, char *out);
/* The follow argument below: 1 the call follows a symlink in the last
 * component, 0 it does not unless a slash follows it (a lookup: lstat,
 * readlink), KP_NAME never (the call acts on the name: unlink, rmdir,
 * mkdir, rename, the new name of link and symlink). */
#define KP_NAME 2
/* After KURA_ESCAPED: *kp becomes the host path kura_escaped_path() names,
 * reclassified (host symlinks on it that lead into a prefix are followed,
 * the last as `follow` says).  ELOOP once kp->hops passes 40.  Returns 0
 * or -errno. */
int kp_escape(struct kp_path *kp, int follow);
/* The same for a host path the caller made. */
int kp_escape_to(struct kp_path *kp, const char *host, int follow);
/* After a kernel call on kp's path (relative to kdirfd) failed with
 * KP_HOST_MISS(): when host symlinks on the path (the last only if
 * `follow`) lead into a prefix, *kp becomes that kura path, not yet asked
 * whether its own symlinks leave the pool, and 1 is returned.  Else 0,
 * with errno kept, or ELOOP/ENAMETOOLONG met on the way.  Hops count
 * toward kp->hops; a path already walked (hops) is not walked again. */
int kp_host_link(struct kp_path *kp, int kdirfd, int follow);
/* kp_host_link (following the last component) for kp_resolve's callers:
 * the kura path's escapes are resolved too, so kp may come back as a
 * kernel path (1), which the caller tries again. */
int kp_host_resolve(struct kp_path *kp, int kdirfd);
/* The kernel's answer for a path through a host symlink into a prefix. */
#define KP_HOST_MISS() (errno == ENOENT || errno == ENOTDIR)
/* Lexical normalisation of an absolute path in place ("." "..", "//"). */
void kp_normalise(char *p);
/* Which mount holds absolute normalised path p, -1 if none. */
int kp_mount_of(const char *p);
/* "/proc/self/fd/N" or "/dev/fd/N" naming a placeholder: its fd, else -1. */
int kp_procfd(const char *path);
/* Whether path is this process's /proc/.../cwd link while the working
 * directory is kura's (readlink answers the virtual one). */
int kp_proc_cwd(const char *path);
extern char kp_vcwd[PATH_MAX]; /* "" when the working directory is the kernel's */
/* The virtual working directory itself: a kura descriptor on it (its mount
 * in *mnt), so that relative paths follow the directory when it is renamed,
 * as the kernel's cwd does; -1 when only its name is known. */
int kp_vcwd_dir(int *mnt);
/* kp_vcwd brought up to date with where the directory is now: 0, or
 * -ENOENT once it is removed. */
int kp_vcwd_refresh(void);
/* Whether kp_vcwd names it: not when its name is longer than kp_vcwd
 * holds (it then holds the mount's prefix) or unknown. */
int kp_vcwd_named(void);
/* Its name now, of any length (malloc'd; "" if the working directory is
 * the kernel's), or NULL with errno (ENOENT once removed). */
char *kp_vcwd_name(void);
/* ldlibs.c: the libraries in a pool a program needs at start, copied where
 * its loader finds them.  Whether exe (in a pool, or with LD_LIBRARY_PATH
 * or LD_PRELOAD naming one) may need that; an environment with the copies' directory
 * (*dir) in front of LD_LIBRARY_PATH, or NULL when none is needed; undone
 * after a failed exec; and in the new image, taken out again. */
int kp_ldlibs_wanted(int exe_in_pool, char *const envp[]);
char **kp_ldlibs_env(const char *exe, char *const envp[], char **dir);
void kp_ldlibs_failed(char **env, char *dir);
void kp_ldlibs_done(void);
/* handover.c: the environment edited in place (a program's own setenv may
 * not touch it); kp_env_replace changes an existing variable only. */
void kp_env_unset(const char *name);
int kp_env_replace(const char *name, const char *value);
/* The new image's side of an exec that handed the descriptor over. */
void kp_vcwd_adopt(int mnt, int kfd);
void kp_vcwd_fork_prepare(void);
void kp_vcwd_fork_done(void);
/* The kernel's working directory changed (cwd.c): path.c reads it again. */
void kp_refresh_real_cwd(void);
/* The pool program this image runs from a copy (exec of a pool file), which
 * /proc/self/exe names, or NULL; 1 if path is this process's exe link. */
extern char *kp_pool_exe;
int kp_proc_exe(const char *path);

/* ---- fd-level operations used across files (io.c) ---- */
int kp_open_path(struct kp_path *kp, int flags, mode_t mode);
ssize_t kp_read(int fd, void *buf, size_t n);
ssize_t kp_write(int fd, const void *buf, size_t n);
off_t kp_lseek(int fd, off_t off, int whence);
int kp_close(int fd);

/* ---- stdio (stdio.c) ---- */
FILE *kp_cookie_stream(int fd, const char *mode);
/* The cookie stream that stands for fd 0, 1 or 2 while it is a pool file
 * (made once per mode, never freed behind the program's back). */
FILE *kp_std_stream(int fd);
int kp_is_stream(FILE *f);
int kp_stream_fd(FILE *f); /* fd behind one of our streams, or -1 */

/* ---- directories (dir.c) ---- */
DIR *kp_opendir_fd(int fd); /* stream over a placeholder fd */
/* mountpoint.c: after the host's last entry of stream dp (descriptor fd),
 * the prefixes whose parent it lists, one per call, then NULL; forget
 * when the stream is rewound, sought or closed. */
struct dirent64 *kp_mountpoint_next(DIR *dp, int fd);
void kp_mountpoint_forget(DIR *dp);

/* ---- locks (lock.c) ---- */
int kp_lock_fcntl(int fd, struct kp_fd *e, int cmd, struct flock *fl);
int kp_lock_flock(int fd, struct kp_fd *e, int op);
void kp_lock_close(int fd, struct kp_fd *e);
/* pthread_atfork hooks: publish the descriptions a child inherits. */
void kp_lock_fork_prepare(void);
void kp_lock_fork_parent(void);
void kp_lock_fork_child(void);

/* ---- pool files being executed (txtbsy.c) ----
 * Linux refuses to write (ETXTBSY) a file some process is executing, and
 * to execute a file open for writing.  A process executing a pool file
 * runs a copy of it; the table, in the pool's lock table, names the pool
 * file, the process and the copy (a memfd), which /proc/PID/exe shows
 * while the program runs. */
struct kp_exec_rec {
	uint64_t ino;        /* pool inode; 0: free */
	uint64_t kdev, kino; /* the copy's identity */
	int32_t pid, fd;     /* the executing process, and its descriptor of the copy until exec */
};
#define KP_EXECS 256
struct kp_exec_table {
	uint32_t n; /* records in use: with none, writers look no further */
	uint32_t pad;
	struct kp_exec_rec rec[KP_EXECS];
};
/* lock.c: mount m's table (NULL if there can be none) and its mutex. */
struct kp_exec_table *kp_lock_exec_table(int m);
void kp_lock_exec_lock(int m);
void kp_lock_exec_unlock(int m);
/* This process is about to execute pool inode ino of mount m from its
 * copy mfd: returns a mark for kp_exec_unmark (after a failed exec), 0 if
 * none could be made. */
int kp_exec_mark(int m, uint64_t ino, int mfd);
void kp_exec_unmark(int m, int mark);
/* 1 if a process runs pool inode ino of mount m. */
int kp_exec_busy(int m, uint64_t ino);
/* 1 if this process has pool inode ino of mount m open for writing. */
int kp_exec_writing(int m, uint64_t ino);
/* ETXTBSY for a write or truncation of path (resolved from kdirfd, the
 * last component followed if follow) if it is executing, after the errors
 * Linux reports first (the access mode's permission); else 0. */
int kp_exec_check_write(int m, int kdirfd, const char *path, int follow, int acc);

/* ---- change notification (notify.c, notify_inst.c) ----
 * kp_nwatch[m] points at the count of pool watches alive in any process
 * (in mount m's event ring in /dev/shm; a zero word when there is none):
 * a wrapper reports an event only when KP_WATCHED(m), so a process doing
 * file operations while nobody watches pays one load for it. */
extern uint32_t *kp_nwatch[KP_MAX_MOUNTS];
#define KP_WATCHED(m) \
	__builtin_expect(__atomic_load_n(__atomic_load_n(&kp_nwatch[(m)], __ATOMIC_RELAXED), __ATOMIC_RELAXED) != 0, 0)
/* After mount m is mounted: its ring mapped, kp_nwatch[m] pointed at it. */
void kp_notify_attach(int m);
/* At exit, after kura_release: the ring removed if the engine's shared
 * state went (this process was the pool's last). */
void kp_notify_fini(int m);
/* Events on an open description (IN_MODIFY, IN_ACCESS, IN_OPEN, IN_CLOSE_*,
 * IN_ATTRIB): to watches on the file and on the directory it was opened in. */
void kp_notify_fd(struct kp_fd *e, uint32_t mask);
/* An event on (kdirfd, p) of mount m: kind KN_CHILD (IN_CREATE...) goes to
 * the directory's watches only, KN_BOTH (IN_ATTRIB, IN_MODIFY) to the
 * object's too.  IN_ISDIR is added when p is a directory. */
void kp_notify_at(int m, int kdirfd, const char *p, uint32_t mask, int kind);
/* What a name was before a call that removes or replaces it. */
struct kp_nstat {
	uint64_t ino;
	uint64_t nlink;
	int isdir, ok;
};
void kp_notify_pre(int m, int kdirfd, const char *p, struct kp_nstat *st);
void kp_notify_unlinked(int m, int kdirfd, const char *p, const struct kp_nstat *st);
void kp_notify_renamed(int m, int od, const char *op, int nd, const char *np, const struct kp_nstat *src,
		       const struct kp_nstat *dst, unsigned flags);
/* link(2): the link count's IN_ATTRIB on the file, IN_CREATE in the directory. */
void kp_notify_linked(int m, int nd, const char *np);
/* A wrapper's result r passed on, after reporting mask on e when r >= min. */
static inline long kp_noted(struct kp_fd *e, long r, long min, uint32_t mask)
{
	if (r >= min && KP_WATCHED(e->mnt))
		kp_notify_fd(e, mask);
	return r;
}
/* The engine's result r passed on; on success, mask reported for kp's name
 * (notify.c), when anyone watches. */
#define NOTED_AT(kp, r, mask, kind)                                                         \
	({                                                                                  \
		long n_ = (r);                                                              \
		if (n_ == 0 && KP_WATCHED((kp).mnt))                                        \
			kp_notify_at((kp).mnt, (kp).kdirfd, (kp).p, (mask), (kind));        \
		n_;                                                                         \
	})
/* read() of a descriptor that is not a placeholder: once this process has
 * made an inotify instance ours (kp_notify_fds), the read is served as
 * the kernel's if fd is one (*served). */
extern int kp_notify_fds;
ssize_t kp_notify_read(int fd, void *buf, size_t n, int *served);
/* Before an exec (failed: after one that failed): an inotify instance of
 * ours that the new image keeps is kept from reading end-of-file. */
void kp_notify_exec(int failed);
/* fcntl(F_NOTIFY) on a kura directory descriptor. */
int kp_notify_dnotify(int fd, struct kp_fd *e, unsigned long arg);
/* Descriptor fd (e) is about to go: IN_CLOSE_* if it is the last of its
 * description in this process. */
void kp_notify_closing(int fd, struct kp_fd *e);
/* How an event is delivered (the kernel's fsnotify calls): to the watch on
 * the directory, with the name (create, delete, moves); to that and to the
 * watch on the object itself (fsnotify_parent: modify, access, open,
 * close, attrib); or to the object only (delete_self, move_self, the
 * attrib of a link count change). */
enum { KN_CHILD = 1, KN_BOTH = 2, KN_SELF = 3 };

/* ---- processes (proc.c; spawn.c builds on these) ---- */
void kp_inherit(void);
/* The environment for a new image (LD_PRELOAD, KURA_*, KURA_INHERIT);
 * hides close-on-exec kura fds unless keep_cloexec. */
char **kp_build_env(char *const *envp, int keep_cloexec, const char *pool_exe);
/* Whether the image at path (relative to fd; NULL or "": fd itself) will
 * run this layer: not a static binary, not set-id for someone else. */
int kp_preloadable(int fd, const char *path);
/* proc.c: copies in to out until the end; 0, or -1 with errno. */
ssize_t kp_copy_all(int in, int out);
/* After an exec that did not happen: frees env, restores what it hid. */
void kp_exec_failed(char **env);

#endif
