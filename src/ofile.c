/* ofile.c — the shared table of open file descriptions (see ofile.h). */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include "api.h"
#include "group.h"
#include "inode.h"
#include "sighold.h"
#include "tracee.h"
#include "xattr.h"
#include "kura.h"
#include "ofile.h"
#include "reap.h"
#include "super.h"

#define TABLE_BYTES ((size_t)OFILE_SLOTS * sizeof(struct ofile))

/* After the descriptions: the family's owner of its open counts in the
 * lock table (lock.h, "Owners"), for an exec'd image to adopt. */
struct ofile_family {
	uint32_t owner;
	int32_t owner_fd;
	uint64_t owner_gen;
};
#define STATE_BYTES (TABLE_BYTES + 4096)

static struct ofile_family *family(struct kura_fs *fs)
{
	return (struct ofile_family *)((char *)fs->ofiles + TABLE_BYTES);
}

/* A new family: reaps dead ones first (their slots and counts are what a
 * full table is made of), then takes an owner slot.  Without one, which
 * takes a thousand live families, the counts go unattributed: they stay
 * if the family is killed, as they did before owners existed. */
static void family_new(struct kura_fs *fs)
{
	for (int try = 0; try < 2; try++) {
		if (try || !fs->mounted_alone)
			reap_dead_owners(fs);
		int err = lock_owner_new(&fs->lk);
		if (err != -ENOSPC)
			break;
	}
	struct ofile_family *f = family(fs);
	f->owner = fs->lk.owner;
	f->owner_gen = fs->lk.owner_gen;
	f->owner_fd = fs->lk.owner_fd;
}

/* An exec'd image: the old image's owner, unless a reaper has begun on it
 * (the exec'ing process was its family's last and the exec was not
 * prepared: kura_exec_prepare) or the table was rebuilt (this mount is
 * alone).  The counts of the inherited descriptions may then be gone: a
 * mount that is alone counts them again (kura_mount_inherit), any other
 * must not use them. */
static int family_join(struct kura_fs *fs)
{
	struct ofile_family *f = family(fs);
	if (!f->owner)
		return 0; /* the family's counts were never attributed: nothing reaps them */
	int err = lock_owner_join(&fs->lk, f->owner_fd, f->owner, f->owner_gen);
	if (!err)
		return 0;
	if (!fs->mounted_alone)
		return err;
	family_new(fs);
	return 0;
}

int ofile_attach(struct kura_fs *fs, int state_fd)
{
	int fd = state_fd;
	if (fd < 0) {
		/* Close-on-exec: the interposition layer clears it just for the exec
		 * that should hand the table over. */
		fd = memfd_create("kura-ofiles", MFD_CLOEXEC);
		if (fd < 0)
			return -errno;
		int e = media_ftruncate(fd, STATE_BYTES);
		if (e) {
			close(fd);
			return e;
		}
	} else {
		struct stat st;
		if (fstat(fd, &st) || (size_t)st.st_size < STATE_BYTES)
			return -EBADF;
		/* The old image cleared close-on-exec for its hand-over only:
		 * left clear, every later exec, handing over or not, would
		 * leak the table into the program it runs. */
		fcntl(fd, F_SETFD, FD_CLOEXEC);
	}
	void *p = mmap(NULL, STATE_BYTES, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (p == MAP_FAILED) {
		int e = -errno;
		if (state_fd < 0)
			close(fd);
		return e;
	}
	fs->ofiles = p;
	fs->state_fd = fd;
	if (state_fd < 0) {
		family_new(fs);
		return 0;
	}
	int err = family_join(fs);
	if (err) {
		munmap(p, STATE_BYTES);
		fs->ofiles = NULL;
		fs->state_fd = -1;
	}
	return err;
}

int kura_owner_fd(kura_fs *fs)
{
	return fs->lk.owner_fd;
}

void kura_exec_prepare(kura_fs *fs)
{
	fcntl(fs->state_fd, F_SETFD, 0);
	/* The new image closes the descriptor this image holds the family's
	 * lock on, by its number here: an image that joined holds it on a
	 * number of its own, not the one the family began with.  (Two
	 * members exec'ing at once may leave the other's number: the new
	 * image then keeps the old descriptor open, nothing worse.) */
	family(fs)->owner_fd = fs->lk.owner_fd;
	lock_owner_bridge(&fs->lk, 1);
}

void kura_exec_failed(kura_fs *fs)
{
	fcntl(fs->state_fd, F_SETFD, FD_CLOEXEC);
	lock_owner_bridge(&fs->lk, 0);
}

void ofile_detach(struct kura_fs *fs)
{
	if (!fs->ofiles)
		return;
	for (int i = 0; i < fs->nfds; i++) {
		struct ofile *of = fd_remove(fs, i);
		if (of)
			ofile_put(fs, of);
	}
	munmap(fs->ofiles, STATE_BYTES);
	close(fs->state_fd);
	fs->ofiles = NULL;
}

static void init_pos_lock(struct ofile *of)
{
	pthread_mutexattr_t a;
	pthread_mutexattr_init(&a);
	pthread_mutexattr_setpshared(&a, PTHREAD_PROCESS_SHARED);
	pthread_mutexattr_setrobust(&a, PTHREAD_MUTEX_ROBUST);
	pthread_mutex_init(&of->pos_lock, &a);
	pthread_mutexattr_destroy(&a);
}

struct ofile *ofile_new(struct kura_fs *fs, uint64_t ino, int flags)
{
	/* Slots are claimed by a 0 -> 1 swap of refs, so processes sharing the
	 * table never take the same one. */
	for (uint32_t n = 0; n < OFILE_SLOTS; n++) {
		uint32_t i = (__atomic_load_n(&fs->ofile_hint, __ATOMIC_RELAXED) + n) % OFILE_SLOTS;
		struct ofile *of = &fs->ofiles[i];
		int32_t zero = 0;
		if (__atomic_load_n(&of->refs, __ATOMIC_RELAXED) != 0 ||
		    !__atomic_compare_exchange_n(&of->refs, &zero, 1, 0, __ATOMIC_ACQ_REL, __ATOMIC_RELAXED))
			continue;
		of->ino = ino;
		of->pos = 0;
		of->flags = flags;
		of->group_ino = 0;
		of->spare_ino = 0;
		init_pos_lock(of);
		__atomic_store_n(&fs->ofile_hint, i + 1, __ATOMIC_RELAXED); /* a hint: any value is safe */
		return of;
	}
	return NULL;
}

long ofile_id(const struct kura_fs *fs, const struct ofile *of)
{
	return (long)(of - fs->ofiles);
}

int fd_install(struct kura_fs *fs, struct ofile *of)
{
	sighold_lock(&fs->fd_mutex);
	int fd = -1;
	for (int i = 0; i < fs->nfds; i++)
		if (fs->fds[i] < 0) {
			fd = i;
			break;
		}
	if (fd < 0) {
		int n = fs->nfds ? fs->nfds * 2 : 64;
		int32_t *t = realloc(fs->fds, (size_t)n * sizeof *t);
		if (!t) {
			sighold_unlock(&fs->fd_mutex);
			return -ENOMEM;
		}
		for (int i = fs->nfds; i < n; i++)
			t[i] = -1;
		fd = fs->nfds;
		fs->fds = t;
		fs->nfds = n;
	}
	fs->fds[fd] = (int32_t)ofile_id(fs, of);
	sighold_unlock(&fs->fd_mutex);
	return fd;
}

struct ofile *ofile_get(struct kura_fs *fs, int fd)
{
	struct ofile *of = NULL;
	sighold_lock(&fs->fd_mutex);
	if (fd >= 0 && fd < fs->nfds && fs->fds[fd] >= 0) {
		of = &fs->ofiles[fs->fds[fd]];
		__atomic_add_fetch(&of->refs, 1, __ATOMIC_ACQ_REL);
	}
	sighold_unlock(&fs->fd_mutex);
	return of;
}

struct ofile *fd_remove(struct kura_fs *fs, int fd)
{
	struct ofile *of = NULL;
	sighold_lock(&fs->fd_mutex);
	if (fd >= 0 && fd < fs->nfds && fs->fds[fd] >= 0) {
		of = &fs->ofiles[fs->fds[fd]];
		fs->fds[fd] = -1;
	}
	sighold_unlock(&fs->fd_mutex);
	return of;
}

/* The last reference anywhere: drop the pool-wide open count, free the
 * inode if it was unlinked meanwhile, and abort the description's atomic
 * group if it has one (a close without commit). */
static void release(struct kura_fs *fs, uint64_t ino, uint64_t group_ino, uint32_t group_gen, uint64_t spare_ino,
		    uint32_t spare_gen)
{
	/* Without the right to change the pool (read-only, or an msync failed),
	 * an unlinked file, or a group's shadow, stays an orphan for the next
	 * mount to reclaim. */
	if (fs->read_only || fs->m.io_err) {
		fs_lock_for_read(fs);
		lock_open_dec(&fs->lk, ino);
		fs_unlock_for_read(fs);
		return;
	}
	if (!group_ino && !spare_ino) {
		/* The common close: the file keeps a name, so only its count
		 * changes, which is the lock table's and no change to the pool
		 * (no transaction, no clock).  Its links change only under the
		 * mutex held here. */
		fs_lock_for_read(fs);
		const struct kura_inode *ip = ino_get(fs, ino);
		int linked = ip && ip->nlink > 0;
		if (linked)
			lock_open_dec(&fs->lk, ino);
		fs_unlock_for_read(fs);
		if (linked)
			return;
	}
	if (fs_begin(fs) == 0) {
		if (group_ino)
			group_discard(fs, group_ino, group_gen);
		if (spare_ino && spare_ino != group_ino)
			group_discard(fs, spare_ino, spare_gen);
		uint64_t left = lock_open_dec(&fs->lk, ino);
		const struct kura_inode *ip = ino_get(fs, ino);
		if (!left && ip && ip->nlink == 0) {
			orphan_remove(fs, ino);
			inode_dispose(fs, ino);
		}
		fs_end(fs, 0);
	}
}

void ofile_put(struct kura_fs *fs, struct ofile *of)
{
	/* Read before the count can reach 0: a free slot may be claimed at
	 * once.  The group read here may be one another holder has since
	 * committed; group_discard checks the generation before it frees. */
	uint64_t ino = of->ino;
	uint64_t group_ino = __atomic_load_n(&of->group_ino, __ATOMIC_ACQUIRE);
	uint32_t group_gen = of->group_gen;
	uint64_t spare_ino = __atomic_load_n(&of->spare_ino, __ATOMIC_ACQUIRE);
	uint32_t spare_gen = of->spare_gen;
	if (__atomic_load_n(&of->refs, __ATOMIC_ACQUIRE) == 1) {
		/* Ours alone (a reference is only taken through a descriptor, which
		 * holds one): release while the slot is still claimed. */
		release(fs, ino, group_ino, group_gen, spare_ino, spare_gen);
		__atomic_store_n(&of->group_ino, 0, __ATOMIC_RELEASE);
		__atomic_store_n(&of->spare_ino, 0, __ATOMIC_RELEASE);
		__atomic_sub_fetch(&of->refs, 1, __ATOMIC_ACQ_REL);
		/* The next open takes this slot again: a program opening and
		 * closing files keeps to a few hot slots instead of walking the
		 * 65,536 and faulting in every page of the table. */
		uint32_t i = (uint32_t)(of - fs->ofiles);
		if (i < __atomic_load_n(&fs->ofile_hint, __ATOMIC_RELAXED))
			__atomic_store_n(&fs->ofile_hint, i, __ATOMIC_RELAXED);
		return;
	}
	if (__atomic_sub_fetch(&of->refs, 1, __ATOMIC_ACQ_REL) == 0) /* the other holders let go between our load and our decrement */
		release(fs, ino, group_ino, group_gen, spare_ino, spare_gen);
}

void ofile_lock_pos(struct ofile *of)
{
	sighold_enter();
	if (tracee_robust_lock(&of->pos_lock) == EOWNERDEAD)
		pthread_mutex_consistent(&of->pos_lock); /* the offset is a plain number: still usable */
}

void ofile_unlock_pos(struct ofile *of)
{
	pthread_mutex_unlock(&of->pos_lock);
	sighold_leave();
}

/* ---- fork and exec --------------------------------------------------------- */

void kura_fork_prepare(kura_fs *fs)
{
	/* The child will hold every descriptor too: count its references now,
	 * while no thread can change the table. */
	pthread_mutex_lock(&fs->fd_mutex);
	for (int i = 0; i < fs->nfds; i++)
		if (fs->fds[i] >= 0)
			__atomic_add_fetch(&fs->ofiles[fs->fds[i]].refs, 1, __ATOMIC_ACQ_REL);
}

void kura_fork_parent(kura_fs *fs)
{
	pthread_mutex_unlock(&fs->fd_mutex);
}

void kura_fork_child(kura_fs *fs)
{
	/* Only the forking thread exists here; the mutex copy is not ours to unlock. */
	pthread_mutex_init(&fs->fd_mutex, NULL);
	sighold_fork_child();
	fs_fork_child(fs);
}

int kura_state_fd(kura_fs *fs)
{
	return fs->state_fd;
}

int kura_mount_fds(kura_fs *fs, int *out, int max)
{
	const int all[] = { fs->pool_fd, fs->m.disk_fd, fs->m.dio_fd, fs->copy_fd, fs->lk.fd, fs->state_fd, fs->lk.owner_fd };
	int n = 0;
	for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) {
		if (all[i] < 0)
			continue;
		if (n < max)
			out[n] = all[i];
		n++;
	}
	return n;
}

long kura_fd_export(kura_fs *fs, int fd)
{
	long id = -EBADF;
	sighold_lock(&fs->fd_mutex);
	if (fd >= 0 && fd < fs->nfds && fs->fds[fd] >= 0)
		id = fs->fds[fd];
	sighold_unlock(&fs->fd_mutex);
	return id;
}

int kura_fd_import(kura_fs *fs, long id)
{
	if (id < 0 || id >= (long)OFILE_SLOTS || __atomic_load_n(&fs->ofiles[id].refs, __ATOMIC_ACQUIRE) <= 0)
		return -EBADF;
	return fd_install(fs, &fs->ofiles[id]);
}

kura_fs *kura_mount_inherit(const char *pool_path, const struct kura_mount_opts *opts, int state_fd, int *err)
{
	struct kura_fs *fs = fs_open(pool_path, opts, 0, err);
	if (!fs)
		return NULL;
	int e = ofile_attach(fs, state_fd);
	if (e == -ESTALE) {
		set_error("%s: the inherited descriptions' hold on the pool was lost before the exec, so another "
			  "process may have freed what they had open: not adopting them", pool_path);
		fs_close(fs);
		if (err)
			*err = e;
		return NULL;
	}
	if (e) {
		set_error("%s: cannot map the inherited descriptor table: %s", pool_path, strerror(-e));
		fs_close(fs);
		if (err)
			*err = e;
		return NULL;
	}
	if (fs->mounted_alone) {
		/* The lock table was rebuilt empty: count the inherited
		 * descriptions again, so none of their inodes looks unused. */
		fs_lock_for_read(fs);
		for (uint32_t i = 0; i < OFILE_SLOTS; i++)
			if (__atomic_load_n(&fs->ofiles[i].refs, __ATOMIC_ACQUIRE) > 0)
				lock_open_inc(&fs->lk, fs->ofiles[i].ino);
		fs_unlock_for_read(fs);
	}
	return fs;
}
