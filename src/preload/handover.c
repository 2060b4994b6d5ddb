/*
 * handover.c — what crosses into a new program image at exec: the
 * environment and the kura descriptors (proc.c has the exec calls).
 *
 * fork: pthread_atfork handlers (config.c) bracket it with the engine's
 * fork calls, so the child shares open file descriptions with the parent.
 * vfork becomes fork: a vfork child shares our tables with its parent and
 * would corrupt them (Python's subprocess dup2s in it).
 *
 * exec: the new image must find the preload, the configuration, the
 * virtual cwd and its kura descriptors.  Every exec wrapper rebuilds the
 * environment with LD_PRELOAD and KURA_* re-inserted (programs such as
 * `env -i` drop them) and KURA_INHERIT describing the descriptors:
 *   KURA_INHERIT=<mount>:<state fd>:<item>,...;<mount>:...
 *   item: <fd>=<id>[@<percent-encoded path>]  a descriptor to adopt
 *         x<id>                             a close-on-exec one to drop
 * The kernel closes only the placeholders of close-on-exec descriptors, and
 * only if the exec succeeds; so their engine descriptors are kept (hidden)
 * through the exec, the new image drops their references, and a failed
 * exec puts them back.  The constructor of the new image (kp_inherit)
 * remaps the engine from the state memfd and adopts or drops each id.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <elf.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "kp.h"

extern char **environ;

static char *saved_env[4]; /* "KURA_MOUNT=..." etc. as at start */
static const char *saved_names[4] = { "KURA_MOUNT", "KURA_POOL", "KURA_DEBUG", "KURA_PERSIST" };
static char self_path[PATH_MAX];

static void save_env(void)
{
	for (int i = 0; i < 4; i++) {
		const char *v = getenv(saved_names[i]);
		if (v && asprintf(&saved_env[i], "%s=%s", saved_names[i], v) < 0)
			saved_env[i] = NULL;
	}
	Dl_info info;
	if (dladdr((void *)save_env, &info) && info.dli_fname) {
		kp_inside++;
		if (!REAL(realpath)(info.dli_fname, self_path))
			snprintf(self_path, sizeof self_path, "%s", info.dli_fname);
		kp_inside--;
	}
}

static int env_has(char *const *env, const char *name, size_t nl)
{
	for (char *const *e = env; e && *e; e++)
		if (strncmp(*e, name, nl) == 0 && (*e)[nl] == '=')
			return 1;
	return 0;
}

/* A growable string (KURA_INHERIT can carry many paths). */
struct sbuf {
	char *p;
	size_t len, cap;
	int oom;
};

static void sb_add(struct sbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void sb_add(struct sbuf *b, const char *fmt, ...)
{
	for (int pass = 0; pass < 2 && !b->oom; pass++) {
		va_list ap;
		va_start(ap, fmt);
		int n = vsnprintf(b->p ? b->p + b->len : NULL, b->p ? b->cap - b->len : 0, fmt, ap);
		va_end(ap);
		if (n < 0) {
			b->oom = 1;
			return;
		}
		if (b->p && b->len + (size_t)n < b->cap) {
			b->len += (size_t)n;
			return;
		}
		size_t cap = (b->cap ? b->cap * 2 : 1024) + (size_t)n;
		char *q = realloc(b->p, cap);
		if (!q) {
			b->oom = 1;
			return;
		}
		b->p = q;
		b->cap = cap;
	}
}

/* Paths travel percent-encoded: ',', ';', '@', '=' separate the list. */
static void sb_add_path(struct sbuf *b, const char *path)
{
	for (const unsigned char *c = (const unsigned char *)path; *c; c++) {
		if ((*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') || (*c >= '0' && *c <= '9') ||
		    strchr("/._-+~", *c))
			sb_add(b, "%c", *c);
		else
			sb_add(b, "%%%02X", *c);
	}
}

static void decode_path(char *s)
{
	char *o = s;
	for (; *s; s++) {
		if (s[0] == '%' && s[1] && s[2]) {
			char hex[3] = { s[1], s[2], 0 };
			*o++ = (char)strtol(hex, NULL, 16);
			s += 2;
		} else {
			*o++ = *s;
		}
	}
	*o = '\0';
}

/* Close-on-exec kura descriptors while an exec is under way.  The kernel
 * closes their placeholders only if the exec succeeds, and then nothing of
 * this image runs any more; so they are hidden from the table (their
 * locks dropped as at a close, since a successful exec closes them) but
 * their engine descriptors stay, and the new image drops the references
 * (KURA_INHERIT "x<id>").  A failed exec puts them back unchanged. */
struct hidden {
	int fd;
	int kfd;
	struct kp_fd *e;
};
static __thread struct hidden *hid;
static __thread size_t nhid, caphid;

static int hide(int fd, struct kp_fd *e)
{
	if (nhid == caphid) {
		size_t cap = caphid ? caphid * 2 : 16;
		struct hidden *h = realloc(hid, cap * sizeof *h);
		if (!h)
			return -1;
		hid = h;
		caphid = cap;
	}
	sighold_lock(kp_tab_lock());
	kp_lock_close(fd, e);
	/* One at a time, so a later descriptor of the same description sees
	 * the earlier ones gone, as a sequence of closes would. */
	__atomic_store_n(&e->used, 0, __ATOMIC_RELEASE);
	sighold_unlock(kp_tab_lock());
	hid[nhid++] = (struct hidden){ fd, e->kfd, e };
	return 0;
}

static void unhide_all(void)
{
	sighold_lock(kp_tab_lock());
	for (size_t i = 0; i < nhid; i++) {
		struct kp_fd *e = hid[i].e;
		/* Unless another thread attached something to the number meanwhile. */
		if (!e->used && e->kfd == hid[i].kfd)
			__atomic_store_n(&e->used, 1, __ATOMIC_RELEASE);
	}
	sighold_unlock(kp_tab_lock());
	nhid = 0;
}

struct inh {
	struct sbuf *b;
	int mnt;
	int any;
	int keep_cloexec; /* hide close-on-exec descriptors (else close them now) */
};

static void add_fd(int fd, struct kp_fd *e, void *arg)
{
	struct inh *h = arg;
	if (e->mnt != h->mnt)
		return;
	long id = kura_fd_export(kp_mounts[e->mnt].fs, e->kfd);
	if (id < 0)
		return;
	int cl = REAL(fcntl)(fd, F_GETFD);
	if (cl < 0 || (cl & FD_CLOEXEC)) {
		if (!h->keep_cloexec || hide(fd, e) < 0) {
			kp_release(fd); /* closed now: the kernel drops the placeholder at exec */
			return;
		}
		sb_add(h->b, "%sx%ld", h->any++ ? "," : "", id);
		return;
	}
	sb_add(h->b, "%s%d=%ld", h->any++ ? "," : "", fd, id);
	/* Paths are a nicety (readlink): past 64 KiB they are left out, well
	 * below the kernel's 128 KiB limit on one environment string. */
	if (e->path && h->b->len < 65536) {
		sb_add(h->b, "@");
		sb_add_path(h->b, e->path);
	}
}

/* Will the new image run this layer?  Not if it is statically linked (no
 * PT_INTERP) or set-id for someone else (LD_PRELOAD ignored): then nothing
 * there would drop the references of close-on-exec descriptors, so they
 * are closed before the exec, as a failed exec then cannot undo.  When in
 * doubt (unreadable file), yes: the exec likely fails, and the descriptors
 * must survive that.  path NULL or "": the file open as fd. */
int kp_preloadable(int fd, const char *path)
{
	int own = 0;
	if (path && KP_PATH_OK(path) && *path) {
		fd = REAL(openat)(fd, path, O_RDONLY | O_CLOEXEC);
		if (fd < 0)
			return 1;
		own = 1;
	}
	struct stat st;
	unsigned char b[1024];
	ssize_t n = -1;
	int yes = 1;
	if (fstat(fd, &st) == 0) {
		if (((st.st_mode & S_ISUID) && st.st_uid != geteuid()) || ((st.st_mode & S_ISGID) && st.st_gid != getegid()))
			yes = 0;
		else
			n = pread(fd, b, sizeof b, 0);
	}
	if (yes && n >= (ssize_t)sizeof(Elf64_Ehdr) && !memcmp(b, ELFMAG, SELFMAG) && b[EI_CLASS] == ELFCLASS64) {
		Elf64_Ehdr eh;
		memcpy(&eh, b, sizeof eh);
		yes = 0;
		for (unsigned i = 0; i < eh.e_phnum && !yes; i++) {
			uint64_t off = eh.e_phoff + (uint64_t)i * eh.e_phentsize;
			Elf64_Phdr ph;
			if (eh.e_phentsize < sizeof ph || off + sizeof ph > (uint64_t)n) {
				yes = 1; /* headers beyond what was read: assume the common case */
				break;
			}
			memcpy(&ph, b + off, sizeof ph);
			yes = ph.p_type == PT_INTERP;
		}
	}
	if (own)
		REAL(close)(fd);
	return yes;
}

/* The environment for a new image: envp plus what kura needs.  Hides the
 * close-on-exec kura descriptors (see above).  Returned array and strings
 * are leaked on success (exec replaces us); kp_exec_failed() frees the array
 * and restores the descriptors. */
char **kp_build_env(char *const *envp, int keep_cloexec, const char *pool_exe)
{
	kp_config();
	size_t n = 0;
	while (envp && envp[n])
		n++;
	char **env = calloc(n + 12, sizeof *env);
	char *cwd = NULL, *preload = NULL, *exe = NULL, *added = NULL;
	/* What the program's environment lacked and the layer puts in so that
	 * the new image runs it too: that image takes them out again, so
	 * env -i shows what it was given (kp_inherit). */
	char names[128] = "KURA_ADDED=";
	size_t nl = strlen(names);
	if (!env)
		return NULL;
	size_t k = 0;
	const char *old_preload = NULL;
	for (size_t i = 0; i < n; i++) {
		if (!strncmp(envp[i], "KURA_INHERIT=", 13) || !strncmp(envp[i], "KURA_CWD=", 9) ||
		    !strncmp(envp[i], "KURA_EXE=", 9) || !strncmp(envp[i], "KURA_ADDED=", 11))
			continue;
		if (!strncmp(envp[i], "LD_PRELOAD=", 11)) {
			old_preload = envp[i] + 11;
			continue;
		}
		env[k++] = envp[i];
	}
	if (self_path[0] && (!old_preload || !strstr(old_preload, self_path))) {
		if (asprintf(&preload, "LD_PRELOAD=%s%s%s", self_path, old_preload && *old_preload ? " " : "",
			     old_preload ? old_preload : "") > 0)
			env[k++] = preload;
		if (!old_preload)
			nl += (size_t)snprintf(names + nl, sizeof names - nl, "LD_PRELOAD,");
	} else if (old_preload) {
		env[k++] = (char *)old_preload - 11;
	}
	for (int i = 0; i < 4; i++)
		if (saved_env[i] && !env_has(env, saved_names[i], strlen(saved_names[i]))) {
			env[k++] = saved_env[i];
			nl += (size_t)snprintf(names + nl, sizeof names - nl, "%s,", saved_names[i]);
		}
	if (names[nl - 1] == ',' && (added = strdup(names)))
		env[k++] = added;
	kp_vcwd_refresh();
	if (kp_vcwd[0] && asprintf(&cwd, "KURA_CWD=%s", kp_vcwd) > 0)
		env[k++] = cwd;
	int cwd_mnt, cwd_kfd = kp_vcwd_dir(&cwd_mnt);
	if (pool_exe && asprintf(&exe, "KURA_EXE=%s", pool_exe) > 0)
		env[k++] = exe;
	struct sbuf b = { 0 };
	sb_add(&b, "KURA_INHERIT=");
	size_t head = b.len;
	for (int m = 0; m < kp_nmounts; m++) {
		if (!kp_mounts[m].fs)
			continue;
		size_t mark = b.len;
		sb_add(&b, "%s%d:%d:", mark > head ? ";" : "", m, kura_state_fd(kp_mounts[m].fs));
		struct inh h = { &b, m, 0, keep_cloexec };
		kp_foreach(add_fd, &h);
		/* The working directory goes over as itself: "c" and its id. */
		long cwd_id = cwd_kfd >= 0 && cwd_mnt == m ? kura_fd_export(kp_mounts[m].fs, cwd_kfd) : -1;
		if (cwd_id >= 0)
			sb_add(&b, "%sc%ld", h.any++ ? "," : "", cwd_id);
		if (!h.any)
			b.len = mark; /* nothing to hand over from this mount */
		else /* the engine keeps them close-on-exec except for this hand-over */
			kura_exec_prepare(kp_mounts[m].fs);
		if (b.p)
			b.p[b.len] = '\0';
	}
	if (b.oom) {
		free(b.p);
		free(env);
		unhide_all();
		errno = ENOMEM;
		return NULL;
	}
	if (b.len > head)
		env[k++] = b.p; /* leaked with the rest on success */
	else
		free(b.p);
	env[k] = NULL;
	kp_map_exec(0); /* exec drops the maps; kp_exec_failed takes them back */
	kp_notify_exec(0);
	return env;
}

/* After a failed exec: the state memfds go back to close-on-exec and the
 * hidden descriptors come back. */
void kp_exec_failed(char **env)
{
	int er = errno;
	for (int m = 0; m < kp_nmounts; m++)
		if (kp_mounts[m].fs)
			kura_exec_failed(kp_mounts[m].fs);
	unhide_all();
	free(env);
	kp_map_exec(1);
	kp_notify_exec(1);
	errno = er;
}

/* ---- the new image's side ---- */

/* The environment is edited in place, not through setenv and unsetenv: a
 * program may define those itself (bash does, over its own variables,
 * which do not exist yet while constructors run), and its main reads the
 * array the kernel gave it, which is environ until anything is added. */
void kp_env_unset(const char *name)
{
	size_t l = strlen(name);
	char **w = environ;
	for (char **r = environ; r && *r; r++)
		if (strncmp(*r, name, l) || (*r)[l] != '=')
			*w++ = *r;
	if (w)
		*w = NULL;
}

int kp_env_replace(const char *name, const char *value)
{
	size_t l = strlen(name);
	for (char **e = environ; e && *e; e++)
		if (!strncmp(*e, name, l) && (*e)[l] == '=') {
			char *s;
			if (asprintf(&s, "%s=%s", name, value) < 0)
				return -1;
			*e = s; /* kept for the program's lifetime, as setenv's are */
			return 0;
		}
	return -1;
}

void kp_inherit(void)
{
	kp_ldlibs_done(); /* before save_env: LD_LIBRARY_PATH goes back to the program's */
	save_env();
	const char *added = getenv("KURA_ADDED");
	char *names = added ? strdup(added) : NULL, *at = NULL;
	for (char *n = names ? strtok_r(names, ",", &at) : NULL; n; n = strtok_r(NULL, ",", &at))
		if (!strcmp(n, "LD_PRELOAD") || !strncmp(n, "KURA_", 5))
			kp_env_unset(n);
	free(names);
	kp_env_unset("KURA_ADDED");
	const char *exe = getenv("KURA_EXE");
	if (exe && kp_mount_of(exe) >= 0)
		kp_pool_exe = strdup(exe);
	kp_env_unset("KURA_EXE");
	const char *cwd = getenv("KURA_CWD");
	if (cwd && kp_mount_of(cwd) >= 0)
		snprintf(kp_vcwd, sizeof kp_vcwd, "%s", cwd);
	const char *inh = getenv("KURA_INHERIT");
	if (!inh) {
		kp_env_unset("KURA_CWD");
		return;
	}
	char *copy = strdup(inh);
	/* Grandchildren exec'd behind our back must not see a stale list. */
	kp_env_unset("KURA_INHERIT");
	kp_env_unset("KURA_CWD");
	if (!copy)
		return;
	char *save = NULL;
	for (char *grp = strtok_r(copy, ";", &save); grp; grp = strtok_r(NULL, ";", &save)) {
		char *end;
		long m = strtol(grp, &end, 10);
		if (*end != ':' || m < 0 || m >= kp_nmounts)
			continue;
		long sfd = strtol(end + 1, &end, 10);
		if (*end != ':')
			continue;
		char *list = end + 1;
		struct kura_mount_opts opts = { .persist = KURA_PERSIST_AUTO };
		int err = 0;
		kp_inside++;
		kura_fs *fs = kura_mount_inherit(kp_mounts[m].pool, &opts, (int)sfd, &err);
		kp_inside--;
		if (!fs) {
			kp_debug("inherit %s: %s", kp_mounts[m].pool, kura_last_error());
			continue;
		}
		kp_set_fs((int)m, fs);
		char *s2 = NULL;
		for (char *it = strtok_r(list, ",", &s2); it; it = strtok_r(NULL, ",", &s2)) {
			if (*it == 'c') {
				int kfd = kura_fd_import(fs, strtol(it + 1, NULL, 10));
				if (kfd >= 0)
					kp_vcwd_adopt((int)m, kfd);
				continue;
			}
			if (*it == 'x') {
				/* A close-on-exec descriptor of the old image: the
				 * exec succeeded, so its reference ends here. */
				int kfd = kura_fd_import(fs, strtol(it + 1, NULL, 10));
				if (kfd >= 0)
					kura_close(fs, kfd);
				continue;
			}
			long fd = strtol(it, &end, 10);
			if (*end != '=')
				continue;
			long id = strtol(end + 1, &end, 10);
			char *path = NULL;
			if (*end == '@') {
				path = end + 1;
				decode_path(path);
			}
			int kfd = kura_fd_import(fs, id);
			if (kfd < 0) {
				kp_debug("inherit fd %ld (id %ld): %s", fd, id, strerror(-kfd));
				continue;
			}
			struct stat st;
			int isdir = kura_fstat(fs, kfd, &st) == 0 && S_ISDIR(st.st_mode);
			kp_attach((int)fd, (int)m, kfd, path, isdir);
		}
	}
	free(copy);
}
