/*
 * groupset.c — one commit for the atomic groups of several files and a
 * list of name changes (kura_group_commit in kura.h).
 *
 * Each file's group is applied (group_apply), then the name operations
 * run in order, all inside one transaction: the undo log (or the journal
 * record) that makes one operation all-or-nothing makes the whole set so.
 * The groups' descriptions are cleared only with the transaction; if it
 * fails they are put back, so a failed commit leaves every group as it
 * was.  kura_atomic_commit is this with one file.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>

#include "api.h"
#include "fs.h"
#include "group.h"
#include "inode.h"
#include "kura.h"
#include "ofile.h"

#define SMALL_SET 4

/* Where each op's paths start, looked up before the transaction as the
 * single calls do; a LINK's file held so that a close cannot free it. */
struct prepared {
	uint64_t ostart, nstart;
	struct ofile *file;
};

static int prepare_op(struct kura_fs *fs, const struct kura_group_op *op, struct prepared *p)
{
	int err;
	switch (op->kind) {
	case KURA_GROUP_LINK:
		if (!op->newpath)
			return -EFAULT;
		if (!(p->file = ofile_get(fs, op->olddirfd)))
			return -EBADF;
		return fd_dir_ino(fs, op->newdirfd, op->newpath, &p->nstart);
	case KURA_GROUP_RENAME:
		if (!op->oldpath || !op->newpath)
			return -EFAULT;
		if (op->flags & ~(unsigned)(RENAME_NOREPLACE | RENAME_EXCHANGE) ||
		    (op->flags & RENAME_NOREPLACE && op->flags & RENAME_EXCHANGE))
			return -EINVAL;
		if ((err = fd_dir_ino(fs, op->olddirfd, op->oldpath, &p->ostart)))
			return err;
		return fd_dir_ino(fs, op->newdirfd, op->newpath, &p->nstart);
	case KURA_GROUP_UNLINK:
	case KURA_GROUP_RMDIR:
		if (!op->oldpath)
			return -EFAULT;
		return fd_dir_ino(fs, op->olddirfd, op->oldpath, &p->ostart);
	default:
		return -EINVAL;
	}
}

static int run_op(struct kura_fs *fs, const struct kura_group_op *op, const struct prepared *p)
{
	switch (op->kind) {
	case KURA_GROUP_LINK: return do_link(fs, 0, "", p->nstart, op->newpath, 0, p->file->ino);
	case KURA_GROUP_RENAME: return do_rename(fs, p->ostart, op->oldpath, p->nstart, op->newpath, op->flags);
	case KURA_GROUP_UNLINK: return remove_name(fs, p->ostart, op->oldpath, 0);
	default: return remove_name(fs, p->ostart, op->oldpath, 1);
	}
}

int kura_group_commit(kura_fs *fs, struct kura_group_file *files, int nfiles, const struct kura_group_op *ops,
		      int nops, int *failed)
{
	if (failed)
		*failed = -1;
	if (nfiles < 0 || nops < 0 || nfiles > KURA_GROUP_MAX || nops > KURA_GROUP_MAX || (nfiles && !files) ||
	    (nops && !ops))
		return -EINVAL;
	if (fs->read_only)
		return -EROFS;
	/* A commit of one file (kura_atomic_commit, a database's every
	 * transaction) allocates nothing. */
	struct ofile *of_few[SMALL_SET] = { 0 };
	uint64_t had_few[SMALL_SET] = { 0 };
	struct prepared prep_few[SMALL_SET] = { { 0 } };
	struct ofile **of = nfiles <= SMALL_SET ? of_few : calloc((size_t)nfiles, sizeof *of);
	uint64_t *had = nfiles <= SMALL_SET ? had_few : calloc((size_t)nfiles, sizeof *had);
	struct prepared *prep = nops <= SMALL_SET ? prep_few : calloc((size_t)nops, sizeof *prep);
	int err = of && had && prep ? 0 : -ENOMEM, bad = -1;
	for (int i = 0; i < nfiles && !err; i++) {
		files[i].copied = 0;
		if (!(of[i] = ofile_get(fs, files[i].fd)))
			err = -EBADF, bad = i;
		for (int k = 0; k < i && !err; k++)
			if (of[k] == of[i])
				err = -EINVAL, bad = i; /* one description twice */
	}
	for (int i = 0; i < nops && !err; i++)
		if ((err = prepare_op(fs, &ops[i], &prep[i])))
			bad = nfiles + i;
	int begun = !err && !(err = fs_begin(fs));
	for (int i = 0; begun && i < nfiles && !err; i++) {
		had[i] = of[i]->group_ino;
		if (!had[i])
			continue;
		const struct kura_inode *sp = group_shadow(fs, of[i]);
		int r = sp ? group_apply(fs, of[i], sp, files[i].own_pins) : -EIO;
		if (r < 0)
			err = r, bad = i;
		else
			files[i].copied = r;
		__atomic_store_n(&of[i]->group_ino, 0, __ATOMIC_RELEASE);
		if (!sp)
			had[i] = 0; /* its shadow is not what the description says (a damaged pool): the
				     * group's writes are lost, and it ends, as the caller hears */
	}
	for (int i = 0; begun && i < nops && !err; i++)
		if ((err = run_op(fs, &ops[i], &prep[i])) || (err = fs->tx.err))
			bad = nfiles + i;
	if (begun) {
		err = fs_end(fs, err);
		if (err && bad < 0)
			bad = nfiles + nops; /* the commit itself (the log's room, the disk) */
		for (int i = 0; err && i < nfiles; i++)
			if (had[i]) { /* rolled back: its shadow no spare (group_apply) */
				__atomic_store_n(&of[i]->spare_ino, 0, __ATOMIC_RELEASE);
				__atomic_store_n(&of[i]->group_ino, had[i], __ATOMIC_RELEASE);
			}
	}
	for (int i = 0; of && i < nfiles; i++)
		if (of[i])
			ofile_put(fs, of[i]);
	for (int i = 0; prep && i < nops; i++)
		if (prep[i].file)
			ofile_put(fs, prep[i].file);
	if (of != of_few)
		free(of);
	if (had != had_few)
		free(had);
	if (prep != prep_few)
		free(prep);
	if (err && failed)
		*failed = bad;
	return err ? err : fs_sync(fs);
}
