/*
 * ldlibs.c — shared libraries in a pool that a program needs at start.
 *
 * The dynamic loader maps a program's DT_NEEDED libraries before any of
 * the program's code (or this layer) runs, through system calls of its
 * own: a library stored in a pool, found through an RPATH, RUNPATH or
 * LD_LIBRARY_PATH that names a pool directory, is not there for it
 * ("cannot open shared object file"), and a project built in a pool with
 * a shared library of its own cannot run its programs or tests.  So the
 * exec wrappers look ahead as the loader will: they read the program's
 * dynamic section, search for each needed library as the loader does
 * (DT_RPATH unless there is a DT_RUNPATH, LD_LIBRARY_PATH, DT_RUNPATH;
 * $ORIGIN being the object's directory in the pool), and the libraries
 * found in a pool first, with those they need in turn, are copied under
 * their needed names into a private directory (mkdtemp, 0700), which goes
 * in front of LD_LIBRARY_PATH for the new image.  The new image's layer
 * takes the directory out of LD_LIBRARY_PATH again and removes it as it
 * starts (kp_ldlibs_done): by then the loader has mapped every copy.
 * Libraries LD_PRELOAD names in a pool (a malloc built there, say) are
 * copied too, and LD_PRELOAD names the copies for the loader alone.  One
 * left by a program that died before (the loader refused it) is removed
 * by `kura run` as it ends and by `kura gc`.
 *
 * What differs: a directory earlier on the loader's path than
 * LD_LIBRARY_PATH (an RPATH entry of the kernel's) is searched before the
 * copies; the loader's cache and default directories are the kernel's
 * alone, so a name found there first is left to the loader, as is
 * everything for programs the layer cannot run in (static or set-id).
 */
#define _GNU_SOURCE
#include <elf.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "kp.h"

#define MAX_LIBS 64      /* a closure larger than this is left to the loader */
#define MAX_DYN 4096     /* dynamic entries read from one object */
#define MAX_STRTAB (1u << 20)
#define PRELOAD_SEPS " :"     /* between LD_PRELOAD's entries, as the loader reads it */

struct elfinfo {
	char *strtab;
	size_t strsz;
	size_t needed[128];
	int nneeded;
	long rpath, runpath; /* offsets in strtab, -1: none */
};

/* The file offset of virtual address va, through the PT_LOAD segments. */
static int va_to_off(const Elf64_Phdr *ph, int n, uint64_t va, uint64_t *off)
{
	for (int i = 0; i < n; i++)
		if (ph[i].p_type == PT_LOAD && va >= ph[i].p_vaddr && va - ph[i].p_vaddr < ph[i].p_filesz) {
			*off = ph[i].p_offset + (va - ph[i].p_vaddr);
			return 0;
		}
	return -1;
}

/* The dynamic section of the ELF file open as fd: 1 with *info, 0 if it
 * has none or needs no interpreter (is_exe: a static program), -1 if it
 * cannot be read as one.  Every length read from the file is bounded. */
static int read_elf(int fd, int is_exe, struct elfinfo *info)
{
	Elf64_Ehdr eh;
	if (pread(fd, &eh, sizeof eh, 0) != (ssize_t)sizeof eh || memcmp(eh.e_ident, ELFMAG, SELFMAG) ||
	    eh.e_ident[EI_CLASS] != ELFCLASS64 || eh.e_phentsize != sizeof(Elf64_Phdr) || eh.e_phnum == 0 ||
	    eh.e_phnum > 64)
		return -1;
	Elf64_Phdr ph[64];
	if (pread(fd, ph, eh.e_phnum * sizeof *ph, (off_t)eh.e_phoff) != (ssize_t)(eh.e_phnum * sizeof *ph))
		return -1;
	int interp = 0, dyn = -1;
	for (int i = 0; i < eh.e_phnum; i++) {
		interp |= ph[i].p_type == PT_INTERP;
		if (ph[i].p_type == PT_DYNAMIC)
			dyn = i;
	}
	if (dyn < 0 || (is_exe && !interp))
		return 0;
	size_t ndyn = ph[dyn].p_filesz / sizeof(Elf64_Dyn);
	if (ndyn > MAX_DYN)
		ndyn = MAX_DYN;
	Elf64_Dyn *d = malloc(ndyn * sizeof *d + 1);
	if (!d || pread(fd, d, ndyn * sizeof *d, (off_t)ph[dyn].p_offset) != (ssize_t)(ndyn * sizeof *d)) {
		free(d);
		return -1;
	}
	uint64_t strva = 0, strsz = 0;
	info->nneeded = 0;
	info->rpath = info->runpath = -1;
	for (size_t i = 0; i < ndyn && d[i].d_tag != DT_NULL; i++) {
		if (d[i].d_tag == DT_STRTAB)
			strva = d[i].d_un.d_ptr;
		else if (d[i].d_tag == DT_STRSZ)
			strsz = d[i].d_un.d_val;
		else if (d[i].d_tag == DT_RPATH)
			info->rpath = (long)d[i].d_un.d_val;
		else if (d[i].d_tag == DT_RUNPATH)
			info->runpath = (long)d[i].d_un.d_val;
		else if (d[i].d_tag == DT_NEEDED && info->nneeded < (int)(sizeof info->needed / sizeof *info->needed))
			info->needed[info->nneeded++] = d[i].d_un.d_val;
	}
	free(d);
	uint64_t stroff;
	if (!strsz || strsz > MAX_STRTAB || va_to_off(ph, eh.e_phnum, strva, &stroff))
		return -1;
	info->strtab = malloc(strsz + 1);
	if (!info->strtab || pread(fd, info->strtab, strsz, (off_t)stroff) != (ssize_t)strsz) {
		free(info->strtab);
		return -1;
	}
	info->strtab[strsz] = '\0';
	info->strsz = strsz;
	for (int i = 0; i < info->nneeded; i++)
		if (info->needed[i] >= strsz)
			info->needed[i] = strsz; /* the empty string: ignored */
	if (info->rpath >= (long)strsz)
		info->rpath = -1;
	if (info->runpath >= (long)strsz)
		info->runpath = -1;
	return 1;
}

struct found {
	char name[NAME_MAX + 1]; /* as needed, or "preload-<i>-<name>" for LD_PRELOAD's i-th entry */
	char path[PATH_MAX];     /* in the pool (host form) */
};

struct search {
	const char *ldpath;      /* LD_LIBRARY_PATH of the new image, or NULL */
	struct found libs[MAX_LIBS];
	int n;
	int overflow;
};

/* Where the loader would find name along dirs (':'-separated, $ORIGIN the
 * object's directory): 1 with path if in a pool, 0 if on the kernel's side
 * (found, so the loader finds it too), -1 if in none of them. */
static int search_dirs(const char *dirs, const char *origin, const char *name, char *path)
{
	for (const char *s = dirs; s && *s;) {
		const char *e = strchrnul(s, ':');
		char dir[PATH_MAX];
		size_t l = (size_t)(e - s);
		if (l == 0 || l >= sizeof dir) {
			s = *e ? e + 1 : e;
			continue;
		}
		memcpy(dir, s, l);
		dir[l] = '\0';
		char expanded[PATH_MAX];
		const char *o = strstr(dir, "${ORIGIN}");
		size_t ol = 9;
		if (!o) {
			o = strstr(dir, "$ORIGIN");
			ol = 7;
		}
		if (o && snprintf(expanded, sizeof expanded, "%.*s%s%s", (int)(o - dir), dir, origin, o + ol) <
				 (int)sizeof expanded)
			snprintf(dir, sizeof dir, "%s", expanded);
		if (snprintf(path, PATH_MAX, "%s/%s", dir, name) < PATH_MAX) {
			struct stat st;
			struct kp_path kp;
			if (kp_classify(AT_FDCWD, path, &kp) == 0 && stat(path, &st) == 0 && S_ISREG(st.st_mode))
				return kp.where == KP_KURA;
		}
		s = *e ? e + 1 : e;
	}
	return -1;
}

/* name, needed by the object at origin (RPATH/RUNPATH from its info). */
static void resolve(struct search *s, const struct elfinfo *in, const char *origin, const char *name)
{
	if (!*name || strchr(name, '/') || strlen(name) > NAME_MAX)
		return; /* a path the loader opens itself; or nothing */
	for (int i = 0; i < s->n; i++)
		if (!strcmp(s->libs[i].name, name))
			return;
	char path[PATH_MAX];
	int r = -1;
	if (in->runpath < 0 && in->rpath >= 0)
		r = search_dirs(in->strtab + in->rpath, origin, name, path);
	if (r < 0 && s->ldpath)
		r = search_dirs(s->ldpath, origin, name, path);
	if (r < 0 && in->runpath >= 0)
		r = search_dirs(in->strtab + in->runpath, origin, name, path);
	if (r != 1)
		return;
	if (s->n == MAX_LIBS) {
		s->overflow = 1;
		return;
	}
	struct found *f = &s->libs[s->n++];
	snprintf(f->name, sizeof f->name, "%s", name);
	snprintf(f->path, sizeof f->path, "%s", path);
}

/* The libraries the object at path needs, found in a pool, are added to s
 * (kp_ldlibs_env then reads each of them in turn: no recursion). */
static void add_object(struct search *s, const char *path, int is_exe)
{
	struct stat st;
	int fd = stat(path, &st) == 0 && S_ISREG(st.st_mode) ? open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC) : -1;
	if (fd < 0)
		return;
	struct elfinfo in;
	int r = read_elf(fd, is_exe, &in);
	close(fd);
	if (r <= 0)
		return;
	char origin[PATH_MAX];
	snprintf(origin, sizeof origin, "%s", path);
	char *slash = strrchr(origin, '/');
	if (slash)
		*(slash == origin ? slash + 1 : slash) = '\0';
	for (int i = 0; i < in.nneeded; i++)
		resolve(s, &in, origin, in.strtab + in.needed[i]);
	free(in.strtab);
}

static const char *env_get(char *const envp[], const char *name)
{
	size_t l = strlen(name);
	for (size_t i = 0; envp && envp[i]; i++)
		if (!strncmp(envp[i], name, l) && envp[i][l] == '=')
			return envp[i] + l + 1;
	return NULL;
}

static void remove_dir(const char *dir)
{
	DIR *d = opendir(dir);
	struct dirent *e;
	char p[PATH_MAX];
	while (d && (e = readdir(d)))
		if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..") &&
		    snprintf(p, sizeof p, "%s/%s", dir, e->d_name) < (int)sizeof p)
			unlink(p);
	if (d)
		closedir(d);
	rmdir(dir);
}

int kp_ldlibs_wanted(int exe_in_pool, char *const envp[])
{
	if (exe_in_pool)
		return 1;
	const char *lp = env_get(envp, "LD_LIBRARY_PATH"), *pre = env_get(envp, "LD_PRELOAD");
	for (int i = 0; i < kp_nmounts; i++)
		if ((lp && strstr(lp, kp_mounts[i].prefix)) || (pre && strstr(pre, kp_mounts[i].prefix)))
			return 1;
	/* Relative entries, from a working directory in a pool. */
	for (const char *t = lp && kp_vcwd[0] ? lp : ""; *t; t += strcspn(t, ":"), t += *t == ':')
		if (*t != '/' && *t != ':')
			return 1;
	for (const char *t = pre && kp_vcwd[0] ? pre : ""; *t; t += strcspn(t, PRELOAD_SEPS), t += *t != '\0')
		if (*t != '/' && memchr(t, '/', strcspn(t, PRELOAD_SEPS)))
			return 1;
	return 0;
}

/* Libraries LD_PRELOAD names in a pool are copied too, under
 * "preload-<i>-<name>" (i: the entry's place), and LD_PRELOAD names the
 * copies: the first call (dir NULL) adds them to s, the second writes the
 * new value to *rewritten. */
static void add_preloads(struct search *s, const char *preload, char **rewritten, const char *dir)
{
	char *copy = preload ? strdup(preload) : NULL, *save = NULL;
	size_t cap = 0;
	FILE *out = dir ? open_memstream(rewritten, &cap) : NULL;
	int i = 0;
	for (char *t = copy ? strtok_r(copy, PRELOAD_SEPS, &save) : NULL; t;
	     t = strtok_r(NULL, PRELOAD_SEPS, &save), i++) {
		struct kp_path kp;
		struct stat st;
		const char *base = strrchr(t, '/');
		int pool = base && strlen(base + 1) < NAME_MAX - 16 && kp_classify(AT_FDCWD, t, &kp) == 0 &&
			   kp.where == KP_KURA && stat(t, &st) == 0 && S_ISREG(st.st_mode);
		if (pool && !dir && s->n < MAX_LIBS) {
			struct found *f = &s->libs[s->n++];
			snprintf(f->name, sizeof f->name, "preload-%d-%s", i, base + 1);
			snprintf(f->path, sizeof f->path, "%s", t);
		}
		if (!out)
			continue;
		if (i)
			fputc(' ', out);
		if (pool)
			fprintf(out, "%s/preload-%d-%s", dir, i, base + 1);
		else
			fputs(t, out);
	}
	if (out)
		fclose(out);
	free(copy);
}

char **kp_ldlibs_env(const char *exe, char *const envp[], char **dir_out)
{
	*dir_out = NULL;
	struct search *s = calloc(1, sizeof *s);
	if (!s)
		return NULL;
	s->ldpath = env_get(envp, "LD_LIBRARY_PATH");
	const char *preload = env_get(envp, "LD_PRELOAD");
	add_preloads(s, preload, NULL, NULL);
	int npreload = s->n;
	add_object(s, exe, 1);
	for (int i = 0; i < s->n; i++)
		add_object(s, s->libs[i].path, 0);
	char **env = NULL;
	/* The pid (which the new image keeps) tells kura run and kura gc whose
	 * directory a leftover is (tools/cli_pool.c). */
	char tmpl[64];
	snprintf(tmpl, sizeof tmpl, "/dev/shm/kura-ld-%d-XXXXXX", (int)getpid());
	if (!s->n || s->overflow || !mkdtemp(tmpl))
		goto out;
	for (int i = 0; i < s->n; i++) {
		char dst[PATH_MAX];
		int in = open(s->libs[i].path, O_RDONLY | O_CLOEXEC);
		int out = snprintf(dst, sizeof dst, "%s/%s", tmpl, s->libs[i].name) < (int)sizeof dst
				  ? open(dst, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0500)
				  : -1;
		ssize_t r = in >= 0 && out >= 0 ? kp_copy_all(in, out) : -1;
		if (in >= 0)
			close(in);
		if (out >= 0)
			close(out);
		if (r < 0) {
			remove_dir(tmpl);
			goto out;
		}
	}
	char *rewritten = NULL;
	if (npreload)
		add_preloads(s, preload, &rewritten, tmpl);
	size_t n = 0;
	while (envp && envp[n])
		n++;
	env = calloc(n + 5, sizeof *env);
	if (!env || (npreload && !rewritten)) {
		free(env);
		env = NULL;
		remove_dir(tmpl);
		goto out;
	}
	size_t k = 0;
	for (size_t i = 0; i < n; i++)
		if (strncmp(envp[i], "LD_LIBRARY_PATH=", 16) && strncmp(envp[i], "KURA_LIBDIR=", 12) &&
		    strncmp(envp[i], "KURA_PRELOAD=", 13) && (!npreload || strncmp(envp[i], "LD_PRELOAD=", 11)))
			env[k++] = envp[i];
	/* "+DIR": DIR was put in front of LD_LIBRARY_PATH; "-DIR": it was all.
	 * KURA_PRELOAD: LD_PRELOAD as the program gave it. */
	if (asprintf(&env[k++], "LD_LIBRARY_PATH=%s%s%s", tmpl, s->ldpath ? ":" : "", s->ldpath ? s->ldpath : "") < 0 ||
	    asprintf(&env[k++], "KURA_LIBDIR=%c%s", s->ldpath ? '+' : '-', tmpl) < 0 ||
	    (npreload && (asprintf(&env[k++], "LD_PRELOAD=%s", rewritten) < 0 ||
			  asprintf(&env[k++], "KURA_PRELOAD=%s", preload) < 0))) {
		free(env);
		free(rewritten);
		env = NULL;
		remove_dir(tmpl);
		goto out;
	}
	free(rewritten);
	*dir_out = strdup(tmpl);
out:
	free(s);
	return env;
}

void kp_ldlibs_failed(char **env, char *dir)
{
	if (dir) {
		remove_dir(dir);
		free(dir);
	}
	free(env); /* its two strings are leaked: an exec failed, rarely */
}

/* LD_PRELOAD back as the program gave it: each copy's entry (the layer's
 * own, put in front by kp_build_env, stays) becomes the entry it stood
 * for in KURA_PRELOAD. */
static void restore_preload(const char *dir)
{
	const char *orig = getenv("KURA_PRELOAD"), *cur = getenv("LD_PRELOAD");
	if (!orig || !cur) {
		kp_env_unset("KURA_PRELOAD");
		return;
	}
	char *o = strdup(orig), *c = strdup(cur), *out = NULL, *s1 = NULL, *s2 = NULL;
	size_t cap = 0, dl = strlen(dir);
	FILE *f = o && c ? open_memstream(&out, &cap) : NULL;
	char *tokens[MAX_LIBS * 2];
	int nt = 0;
	for (char *t = f ? strtok_r(o, PRELOAD_SEPS, &s1) : NULL; t && nt < MAX_LIBS * 2; t = strtok_r(NULL, PRELOAD_SEPS, &s1))
		tokens[nt++] = t;
	int first = 1;
	for (char *t = f ? strtok_r(c, PRELOAD_SEPS, &s2) : NULL; t; t = strtok_r(NULL, PRELOAD_SEPS, &s2)) {
		long i = -1;
		if (!strncmp(t, dir, dl) && !strncmp(t + dl, "/preload-", 9))
			i = strtol(t + dl + 9, NULL, 10);
		fprintf(f, "%s%s", first ? "" : " ", i >= 0 && i < nt ? tokens[i] : t);
		first = 0;
	}
	if (f && fclose(f) == 0 && out)
		kp_env_replace("LD_PRELOAD", out);
	free(out);
	free(o);
	free(c);
	kp_env_unset("KURA_PRELOAD");
}

void kp_ldlibs_done(void)
{
	const char *v = getenv("KURA_LIBDIR");
	if (!v || (v[0] != '+' && v[0] != '-') || strncmp(v + 1, "/dev/shm/kura-ld-", 17) || strchr(v + 18, '/') ||
	    strlen(v) >= 64)
		return;
	char dir[64];
	snprintf(dir, sizeof dir, "%s", v + 1);
	const char *lp = getenv("LD_LIBRARY_PATH");
	size_t dl = strlen(dir);
	if (v[0] == '-')
		kp_env_unset("LD_LIBRARY_PATH");
	else if (lp && !strncmp(lp, dir, dl) && lp[dl] == ':')
		kp_env_replace("LD_LIBRARY_PATH", lp + dl + 1);
	kp_env_unset("KURA_LIBDIR");
	restore_preload(dir);
	struct stat st;
	/* Only a directory of this user's: the variable is the environment's. */
	if (lstat(dir, &st) == 0 && S_ISDIR(st.st_mode) && st.st_uid == geteuid())
		remove_dir(dir);
}
