/*
 * session.c — daemon, login_tty and forkpty: glibc moves descriptors and
 * the working directory inside them with its own internal dup2, close and
 * chdir, which no wrapper sees.  Left alone, a standard descriptor that was
 * a kura file stays one in the table after the terminal or /dev/null took
 * its number (isatty(1) says no, writes land in the old file), and the
 * working directory stays kura's after daemon's chdir("/").  So these are
 * done here with the wrapped calls, or followed by the table's repair.
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <pty.h>
#include <sys/stat.h>
#include <unistd.h>
#include <utmp.h>

#include "kp.h"

/* After login_tty put the terminal on 0, 1 and 2 (it closed the terminal's
 * own number, which was the kernel's, never a placeholder). */
static void std_now_kernel(void)
{
	for (int n = 0; n < 3; n++) {
		if (kp_get(n))
			kp_release(n);
		kp_std_fixup(n);
	}
}

KP_EXPORT int login_tty(int fd)
{
	kp_config();
	for (int n = 1; n < 3; n++)
		kp_std_preflush(n);
	/* A kura file is no terminal: glibc's TIOCSCTTY on its placeholder
	 * fails before anything moves. */
	int r = REAL(login_tty)(fd);
	if (r == 0)
		std_now_kernel();
	return r;
}

/* The child's side runs glibc's login_tty; the parent's only closes the
 * terminal, a kernel descriptor. */
KP_EXPORT pid_t forkpty(int *master, char *name, const struct termios *termp, const struct winsize *winp)
{
	kp_config();
	pid_t pid = REAL(forkpty)(master, name, termp, winp);
	if (pid == 0)
		std_now_kernel();
	return pid;
}

/* glibc's daemon, step for step, through the wrappers. */
KP_EXPORT int daemon(int nochdir, int noclose)
{
	kp_config();
	pid_t pid = fork();
	if (pid < 0)
		return -1;
	if (pid > 0)
		_exit(0);
	if (setsid() < 0)
		return -1;
	if (!nochdir)
		(void)chdir("/");
	if (noclose)
		return 0;
	int fd = open("/dev/null", O_RDWR);
	if (fd < 0)
		return -1;
	struct stat st;
	if (fstat(fd, &st) < 0 || !S_ISCHR(st.st_mode)) {
		close(fd);
		errno = ENODEV;
		return -1;
	}
	for (int n = 0; n < 3; n++)
		dup2(fd, n);
	if (fd > 2)
		close(fd);
	return 0;
}
