/*
 * vfs.h — sqlite_batch's counting VFS over SQLite's "unix" VFS: what
 * SQLite asks of the file system (cnt), a write failed inside a batch (inj)
 * and a SIGKILL of itself inside one (maybe_die).  The parts are headers
 * that sqlite_batch.c includes once: scripts/sqlite-batch-atomic.sh compiles
 * sqlite_batch.c alone against the amalgamation, so all of it stays static
 * in one translation unit, and the parts include each other by their own
 * directory's name.
 */
#ifndef SQLITE_BATCH_VFS_H
#define SQLITE_BATCH_VFS_H

#include <errno.h>
#include <signal.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "sqlite3.h"

/* ---- the counting VFS ---------------------------------------------------- */

static sqlite3_vfs *real_vfs;
static sqlite3_vfs count_vfs;

static struct {
	int journal_opens;      /* SQLITE_OPEN_MAIN_JOURNAL */
	int begin, commit, rollback; /* SQLITE_FCNTL_*_ATOMIC_WRITE */
	int begin_rc, commit_rc;     /* the last answers */
	int main_dc;            /* xDeviceCharacteristics of the main database */
	int main_dc_seen;
	int syncs;              /* xSync of the main database */
	int mmap_failures;      /* mmap() refused, as sqlite3_log reports it */
	int mapped_reads;       /* pages xFetch gave from a map */
} cnt;

/* SQLite logs an mmap() that failed (os_unix.c, unixRemapfile) and then
 * reads and writes that file without a map. */
static void log_cb(void *arg, int code, const char *msg)
{
	(void)arg;
	if (msg && strstr(msg, "mmap"))
		cnt.mmap_failures++;
	if (getenv("SQLITE_BATCH_LOG"))
		fprintf(stderr, "sqlite3_log %d: %s\n", code, msg ? msg : "");
}

/* Failing a write inside a batch (abort mode). */
static struct {
	int armed;              /* fail the at-th write of the next batch */
	int at;
	int rc;                 /* SQLITE_FULL or SQLITE_IOERR_WRITE */
	int in_batch;
	int writes;             /* writes forwarded in this batch */
	int fired;
	int probe_fd;           /* a second descriptor on the main database */
	uint64_t hash_before;   /* the file through probe_fd at BEGIN */
	uint64_t hash_during;   /* ... when the write failed */
	uint64_t hash_after;    /* ... after ROLLBACK_ATOMIC_WRITE */
	int own_sees_group;     /* the batch's descriptor read back its first write */
	int own_sees_file_after; /* ... and, after the abort, the file again */
	sqlite3_int64 first_off;
	int first_len;
	unsigned char first_new[65536], first_old[65536];
} inj;

/* Killing itself inside a batch (crash mode with a seed): with probability
 * selfkill_pm / 1000 at each point of the kind selfkill_at names: "write"
 * (before a write of a batch), "precommit" or "postcommit" (just before,
 * just after COMMIT_ATOMIC_WRITE), "any"; says where on standard output
 * first. */
static int selfkill_pm;
static const char *selfkill_at = "any";

static void maybe_die(const char *where)
{
	if (selfkill_pm && (!strcmp(selfkill_at, "any") || !strcmp(selfkill_at, where)) &&
	    rand() % 1000 < selfkill_pm) {
		printf("selfkill %s\n", where);
		fflush(stdout);
		kill(getpid(), SIGKILL);
	}
}

typedef struct CFile {
	sqlite3_file base;
	sqlite3_file *real;
	int flags;
} CFile;

static uint64_t fnv(uint64_t h, const unsigned char *p, size_t n)
{
	while (n--)
		h = (h ^ *p++) * 0x100000001b3ULL;
	return h;
}

/* The whole file through a descriptor of its own. */
static uint64_t hash_fd(int fd)
{
	unsigned char buf[65536];
	uint64_t h = 0xcbf29ce484222325ULL;
	off_t off = 0;
	ssize_t n;
	while ((n = pread(fd, buf, sizeof buf, off)) > 0) {
		h = fnv(h, buf, (size_t)n);
		off += n;
	}
	if (n < 0)
		return 0;
	return fnv(h, (const unsigned char *)&off, sizeof off);
}

#define REAL(f) (((CFile *)(f))->real)
#define MAINDB(f) (((CFile *)(f))->flags & SQLITE_OPEN_MAIN_DB)

static int c_close(sqlite3_file *f)
{
	return REAL(f)->pMethods->xClose(REAL(f));
}

static int c_read(sqlite3_file *f, void *b, int n, sqlite3_int64 o)
{
	return REAL(f)->pMethods->xRead(REAL(f), b, n, o);
}

static int c_write(sqlite3_file *f, const void *b, int n, sqlite3_int64 o)
{
	sqlite3_file *r = REAL(f);
	if (MAINDB(f) && inj.in_batch) {
		if (inj.armed && inj.writes + 1 == inj.at) {
			inj.armed = 0;
			inj.fired = 1;
			if (inj.probe_fd >= 0)
				inj.hash_during = hash_fd(inj.probe_fd);
			/* The batch's own descriptor sees the batch. */
			if (inj.first_len > 0) {
				unsigned char tmp[65536];
				if (r->pMethods->xRead(r, tmp, inj.first_len, inj.first_off) == SQLITE_OK)
					inj.own_sees_group = !memcmp(tmp, inj.first_new, (size_t)inj.first_len);
			}
			return inj.rc;
		}
		/* Only a test that injects a failure looks at the batch's first
		 * page: a timed run must not pay a read per transaction. */
		if (inj.armed && inj.writes == 0 && n <= (int)sizeof inj.first_new) {
			inj.first_off = o;
			inj.first_len = n;
			memcpy(inj.first_new, b, (size_t)n);
			int rc = r->pMethods->xRead(r, inj.first_old, n, o);
			if (rc == SQLITE_IOERR_SHORT_READ)
				rc = SQLITE_OK; /* zero-filled past the end */
			if (rc != SQLITE_OK)
				inj.first_len = 0;
		}
		inj.writes++;
		maybe_die("write");
	}
	return r->pMethods->xWrite(r, b, n, o);
}

static int c_truncate(sqlite3_file *f, sqlite3_int64 size)
{
	return REAL(f)->pMethods->xTruncate(REAL(f), size);
}

static int c_sync(sqlite3_file *f, int flags)
{
	if (MAINDB(f))
		cnt.syncs++;
	return REAL(f)->pMethods->xSync(REAL(f), flags);
}

static int c_size(sqlite3_file *f, sqlite3_int64 *size)
{
	return REAL(f)->pMethods->xFileSize(REAL(f), size);
}

static int c_lock(sqlite3_file *f, int l)
{
	return REAL(f)->pMethods->xLock(REAL(f), l);
}

static int c_unlock(sqlite3_file *f, int l)
{
	return REAL(f)->pMethods->xUnlock(REAL(f), l);
}

static int c_reserved(sqlite3_file *f, int *out)
{
	return REAL(f)->pMethods->xCheckReservedLock(REAL(f), out);
}

static int c_fcntl(sqlite3_file *f, int op, void *arg)
{
	sqlite3_file *r = REAL(f);
	int rc;
	switch (op) {
	case SQLITE_FCNTL_BEGIN_ATOMIC_WRITE:
		cnt.begin++;
		if (inj.armed && inj.probe_fd >= 0)
			inj.hash_before = hash_fd(inj.probe_fd);
		rc = r->pMethods->xFileControl(r, op, arg);
		cnt.begin_rc = rc;
		if (rc == SQLITE_OK) {
			inj.in_batch = 1;
			inj.writes = 0;
			inj.first_len = 0;
		}
		return rc;
	case SQLITE_FCNTL_COMMIT_ATOMIC_WRITE:
		cnt.commit++;
		maybe_die("precommit");
		rc = r->pMethods->xFileControl(r, op, arg);
		cnt.commit_rc = rc;
		inj.in_batch = 0;
		if (rc == SQLITE_OK)
			maybe_die("postcommit");
		return rc;
	case SQLITE_FCNTL_ROLLBACK_ATOMIC_WRITE:
		cnt.rollback++;
		rc = r->pMethods->xFileControl(r, op, arg);
		if (inj.in_batch && inj.fired) {
			if (inj.probe_fd >= 0)
				inj.hash_after = hash_fd(inj.probe_fd);
			if (inj.first_len > 0) {
				unsigned char tmp[65536];
				int rr = r->pMethods->xRead(r, tmp, inj.first_len, inj.first_off);
				if (rr == SQLITE_IOERR_SHORT_READ) /* the batch had grown the file */
					rr = SQLITE_OK;
				inj.own_sees_file_after = rr == SQLITE_OK &&
							  !memcmp(tmp, inj.first_old, (size_t)inj.first_len);
			}
		}
		inj.in_batch = 0;
		return rc;
	}
	return r->pMethods->xFileControl(r, op, arg);
}

static int c_sector(sqlite3_file *f)
{
	return REAL(f)->pMethods->xSectorSize(REAL(f));
}

static int c_dc(sqlite3_file *f)
{
	int dc = REAL(f)->pMethods->xDeviceCharacteristics(REAL(f));
	if (MAINDB(f)) {
		cnt.main_dc = dc;
		cnt.main_dc_seen = 1;
	}
	return dc;
}

static int c_shmmap(sqlite3_file *f, int pg, int sz, int ext, void volatile **pp)
{
	return REAL(f)->pMethods->xShmMap(REAL(f), pg, sz, ext, pp);
}

static int c_shmlock(sqlite3_file *f, int off, int n, int flags)
{
	return REAL(f)->pMethods->xShmLock(REAL(f), off, n, flags);
}

static void c_shmbarrier(sqlite3_file *f)
{
	REAL(f)->pMethods->xShmBarrier(REAL(f));
}

static int c_shmunmap(sqlite3_file *f, int del)
{
	return REAL(f)->pMethods->xShmUnmap(REAL(f), del);
}

static int c_fetch(sqlite3_file *f, sqlite3_int64 o, int n, void **pp)
{
	int rc = REAL(f)->pMethods->xFetch(REAL(f), o, n, pp);
	if (rc == SQLITE_OK && *pp)
		cnt.mapped_reads++;
	return rc;
}

static int c_unfetch(sqlite3_file *f, sqlite3_int64 o, void *p)
{
	return REAL(f)->pMethods->xUnfetch(REAL(f), o, p);
}

static const sqlite3_io_methods c_methods = {
	3, c_close, c_read, c_write, c_truncate, c_sync, c_size, c_lock, c_unlock, c_reserved,
	c_fcntl, c_sector, c_dc, c_shmmap, c_shmlock, c_shmbarrier, c_shmunmap, c_fetch, c_unfetch,
};

static int c_open(sqlite3_vfs *v, const char *name, sqlite3_file *f, int flags, int *out)
{
	(void)v;
	CFile *c = (CFile *)f;
	c->real = (sqlite3_file *)&c[1];
	c->flags = flags;
	c->base.pMethods = NULL;
	if (flags & SQLITE_OPEN_MAIN_JOURNAL)
		cnt.journal_opens++;
	int rc = real_vfs->xOpen(real_vfs, name, c->real, flags, out);
	if (c->real->pMethods) {
		if (c->real->pMethods->iVersion < 3) {
			fprintf(stderr, "FAIL: the default VFS's files are version %d\n", c->real->pMethods->iVersion);
			exit(1);
		}
		c->base.pMethods = &c_methods;
	}
	return rc;
}

#define FWD(name, ...) real_vfs->name(real_vfs, __VA_ARGS__)
static int c_delete(sqlite3_vfs *v, const char *n, int s) { (void)v; return FWD(xDelete, n, s); }
static int c_access(sqlite3_vfs *v, const char *n, int fl, int *o) { (void)v; return FWD(xAccess, n, fl, o); }
static int c_full(sqlite3_vfs *v, const char *n, int sz, char *o) { (void)v; return FWD(xFullPathname, n, sz, o); }
static void *c_dlopen(sqlite3_vfs *v, const char *n) { (void)v; return FWD(xDlOpen, n); }
static void c_dlerr(sqlite3_vfs *v, int n, char *o) { (void)v; FWD(xDlError, n, o); }
static void (*c_dlsym(sqlite3_vfs *v, void *h, const char *s))(void) { (void)v; return FWD(xDlSym, h, s); }
static void c_dlclose(sqlite3_vfs *v, void *h) { (void)v; FWD(xDlClose, h); }
static int c_random(sqlite3_vfs *v, int n, char *o) { (void)v; return FWD(xRandomness, n, o); }
static int c_sleep(sqlite3_vfs *v, int us) { (void)v; return FWD(xSleep, us); }
static int c_time(sqlite3_vfs *v, double *t) { (void)v; return FWD(xCurrentTime, t); }
static int c_lasterr(sqlite3_vfs *v, int n, char *o) { (void)v; return FWD(xGetLastError, n, o); }
static int c_time64(sqlite3_vfs *v, sqlite3_int64 *t) { (void)v; return FWD(xCurrentTimeInt64, t); }
static int c_setsys(sqlite3_vfs *v, const char *n, sqlite3_syscall_ptr p) { (void)v; return FWD(xSetSystemCall, n, p); }
static sqlite3_syscall_ptr c_getsys(sqlite3_vfs *v, const char *n) { (void)v; return FWD(xGetSystemCall, n); }
static const char *c_nextsys(sqlite3_vfs *v, const char *n) { (void)v; return FWD(xNextSystemCall, n); }

static void vfs_register(void)
{
	real_vfs = sqlite3_vfs_find(NULL);
	if (!real_vfs) {
		fprintf(stderr, "FAIL: no default VFS\n");
		exit(1);
	}
	count_vfs = (sqlite3_vfs){
		3, (int)sizeof(CFile) + real_vfs->szOsFile, real_vfs->mxPathname, NULL, "count", NULL,
		c_open, c_delete, c_access, c_full, c_dlopen, c_dlerr, c_dlsym, c_dlclose,
		c_random, c_sleep, c_time, c_lasterr, c_time64, c_setsys, c_getsys, c_nextsys,
	};
	sqlite3_vfs_register(&count_vfs, 1);
}

#endif
