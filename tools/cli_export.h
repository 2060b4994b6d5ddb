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
	struct cli_stage *stage;         /* workers filling files, if any */
	unsigned long unsettled;         /* --watch: files left for a later pass */
	struct cli_linkmap *links;
	int as_root;
	unsigned long errors;
	int fatal;
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
void export_contents(struct exp *c, int fd, const char *hpath, const char *kpath);
void export_dir(struct exp *c, int dfd, const char *name, const char *hpath, const char *kpath,
		const struct stat *st);
void export_file(struct exp *c, int dfd, const char *name, const char *hpath, const char *kpath,
		 const struct stat *st, int kflags);
/* A stage-out worker's job (cli_stage_fill_fn). */
void exp_fill_job(void *ctx, struct cli_stage_job *j, char *buf);
#endif
