/*
 * cli_import.h — between cli_import.c (the walk that copies a host tree
 * into a pool, object by object) and cli_import_cmd.c (the import and
 * stage-in commands).
 */
#ifndef KURA_CLI_IMPORT_H
#define KURA_CLI_IMPORT_H
#include <sys/stat.h>

#include "cli.h"
#include "cli_stage.h"

struct imp {
	const char *cmd; /* "import" or "stage-in", for messages */
	kura_fs *fs;
	char *buf;
	const struct cli_stage_opts *so; /* stage-in's options, NULL for import */
	struct cli_stage *stage;         /* workers filling files, if any */
	struct cli_linkmap *links;
	int as_root;
	dev_t pool_dev;
	ino_t pool_ino;
	int have_pool;
	unsigned long skipped;
	unsigned long errors;
	int fatal;
};

/* Reports err for path; ENOSPC, EROFS, EIO and the like stop the walk. */
void imp_fail(struct imp *c, const char *path, int err);
int imp_stopped(struct imp *c);
/* fresh: kpath was made by this pass, so nothing in it needs comparing. */
void import_contents(struct imp *c, int fd, const char *spath, const char *kpath, int fresh);
void import_dir(struct imp *c, int dfd, const char *name, const char *spath, const char *kpath,
		const struct stat *st, int oflags);
void import_file(struct imp *c, int dfd, const char *name, const char *spath, const char *kpath,
		 const struct stat *st, int oflags, int fresh);
/* A stage-in worker's job (cli_stage_fill_fn). */
void imp_fill_job(void *ctx, struct cli_stage_job *j, char *buf);
#endif
