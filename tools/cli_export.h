/*
 * cli_export.h — between cli_export.c (the walk that recreates a pool tree
 * on the host, object by object) and cli_export_cmd.c (the export and
 * stage-out commands: passes, workers, --watch).
 */
#ifndef KURA_CLI_EXPORT_H
#define KURA_CLI_EXPORT_H
#include <sys/stat.h>

#include "cli.h"
#include "cli_stage.h"

struct exp {
	const char *cmd; /* "export" or "stage-out", for messages */
	kura_fs *fs;
	char *buf;
	const struct cli_stage_opts *so; /* stage-out's options, NULL for export */
	struct exp_par *par;             /* stage-out's threads walking subtrees, if any */
	unsigned long unsettled;         /* --watch: files left for a later pass */
	struct cli_linkmap *links;
	int as_root;
	/* A file made in a fresh directory with the creator's ids and these
	 * permission bits already has the pool's: no fchown or fchmod. */
	uid_t euid;
	gid_t egid;
	mode_t umask;
	unsigned long errors;
	int fatal;
};

/* A host directory whose entries a walk makes. */
struct exp_dir {
	int fd;          /* -1 until its task opens it (at_fd, name) */
	int at_fd;       /* the parent's, open until this one is done */
	int fresh;       /* made by this pass: nothing in it to compare with */
	int own;         /* its owner, mode and times are the pool's (not an existing DST's) */
	int plain;       /* fresh, with our ids and no default ACL: see create_mode */
	int queued;      /* in the parallel walk, which frees it */
	unsigned pending; /* parallel walk: 1 + subdirectories and big files not done */
	struct exp_dir *parent; /* parallel walk: told when this one is done; NULL at the top */
	char *name, *hpath, *kpath;
	struct stat st;
};

struct names {
	char **v;
	size_t n, cap;
};

/* Reports err for path; ENOSPC, EROFS, EIO and the like stop the walk. */
void exp_fail(struct exp *c, const char *path, int err);
int exp_stopped(struct exp *c);
/* A pool directory's names, read whole (one kura directory handle open at
 * a time however deep the tree); 0 or -1 after a report. */
int exp_list_dir(struct exp *c, const char *kpath, struct names *ns);
void exp_free_names(struct names *ns);
const char *exp_base_name(const char *p);
void export_contents(struct exp *c, struct exp_dir *d);
void export_dir(struct exp *c, struct exp_dir *parent, const char *name, const char *hpath, const char *kpath,
		const struct stat *st);
void export_file(struct exp *c, struct exp_dir *d, const char *name, const char *hpath, const char *kpath,
		 const struct stat *st, int kflags);
/* Owner, mode and times of a directory whose entries are all made, its
 * descriptor closed and its extended attributes copied. */
void exp_dir_done(struct exp *c, struct exp_dir *d);
/* What a file was made with already (set_attrs need not do it again). */
#define EXP_HAS_MODE 1
#define EXP_HAS_OWNER 2
/* The file's contents, owner, mode and times; closes both descriptors. */
void exp_fill_file(struct exp *c, int kfd, int fd, const char *kpath, const char *hpath, const struct stat *st,
		   int has);
/* Opens d->fd (relative to at_fd) for a directory task; 0 or -1 after a report. */
int exp_dir_open(struct exp *c, struct exp_dir *d);
/* The calling thread's copy buffer (CLI_COPY_BUF bytes; NULL: none). */
void exp_set_thread_buf(char *buf);

/* stage-out's parallel walk (cli_export_par.c): threads that each take a
 * directory, make its entries and fill its small files, so that the host
 * file system's creates, the costly part, run side by side in different
 * directories; big files are jobs of their own. */
struct exp_par *exp_par_start(struct exp *c, int threads);
/* Queues a copy of d (names copied too; its descriptor, if open, is the
 * walk's from now on) below parent (NULL: at the top); 0 or -ENOMEM. */
int exp_par_dir(struct exp_par *p, const struct exp_dir *d, struct exp_dir *parent);
/* Queues a file of d's to fill; 0, or -ENOMEM (the caller fills it). */
int exp_par_file(struct exp_par *p, struct exp_dir *d, int kfd, int fd, const char *kpath, const char *hpath,
		 const struct stat *st, int has);
/* Waits until everything queued is done. */
void exp_par_wait(struct exp_par *p);
void exp_par_stop(struct exp_par *p);
/* d has one thing fewer to wait for; the last one finishes it (and maybe its parent). */
void exp_par_release(struct exp *c, struct exp_dir *d);
#endif
