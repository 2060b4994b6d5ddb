/*
 * notify_dn.c — fcntl(F_NOTIFY) (dnotify) on a pool directory: events from
 * the pool's ring (notify.c) on the directory's entries raise the
 * descriptor's signal in this process, as fs/notify/dnotify does: SIGIO,
 * or the F_SETSIG signal queued with si_fd, si_band POLL_MSG's band.
 * Without DN_MULTISHOT a registration goes after its first signal.
 *
 * The signal is queued to the process by the watcher thread.  The kernel
 * lets a thread queue a positive si_code (the kernel's own, POLL_MSG) only
 * to itself, which would keep the signal from the program's other threads
 * (and from sigwait in them); so it comes with si_code SI_QUEUE, si_band
 * and si_fd set as the kernel sets them.  SIGIO without F_SETSIG is sent
 * with kill (SI_USER where the kernel says SI_KERNEL).
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "notify.h"

struct dn {
	int fd, kfd, mnt;
	uint64_t ino;
	unsigned long mask;
	struct dn *next;
};
static struct dn *dns;

/* The inotify events each DN_ bit stands for (dnotify.c convert_arg). */
static uint32_t dn_events(unsigned long a)
{
	uint32_t m = 0;
	if (a & DN_ACCESS)
		m |= IN_ACCESS;
	if (a & DN_MODIFY)
		m |= IN_MODIFY;
	if (a & DN_CREATE)
		m |= IN_CREATE | IN_MOVED_TO;
	if (a & DN_DELETE)
		m |= IN_DELETE | IN_MOVED_FROM;
	if (a & DN_RENAME)
		m |= IN_MOVED_FROM | IN_MOVED_TO;
	if (a & DN_ATTRIB)
		m |= IN_ATTRIB;
	return m;
}

static void unregister(struct dn **p)
{
	struct dn *d = *p;
	*p = d->next;
	kn_unref(d->mnt);
	free(d);
}

void kn_dn_deliver(int m, const struct kn_rec *r)
{
	for (struct dn **p = &dns; *p;) {
		struct dn *d = *p;
		struct kp_fd *e = kp_get(d->fd);
		if (!e || e->kfd != d->kfd) { /* closed: dnotify_flush would have dropped it */
			unregister(p);
			continue;
		}
		if (d->mnt != m || (r->kind & ~KN_UNLINKED) == KN_SELF || r->dir != d->ino || !(r->mask & dn_events(d->mask))) {
			p = &d->next;
			continue;
		}
		int sig = REAL(fcntl)(d->fd, F_GETSIG);
		siginfo_t si;
		memset(&si, 0, sizeof si);
		si.si_signo = sig > 0 ? sig : SIGIO;
		si.si_code = SI_QUEUE;
		si.si_band = POLLIN | POLLRDNORM | POLLMSG;
		si.si_fd = d->fd;
		if (sig > 0)
			kp_syscall(SYS_rt_sigqueueinfo, (long)getpid(), (long)sig, (long)&si);
		else
			kill(getpid(), SIGIO);
		if (!(d->mask & DN_MULTISHOT))
			unregister(p);
		else
			p = &d->next;
	}
}

void kn_dn_child(void)
{
	while (dns) {
		struct dn *d = dns;
		dns = d->next;
		free(d);
	}
}

int kp_notify_dnotify(int fd, struct kp_fd *e, unsigned long arg)
{
	if (!e->isdir)
		return (int)kp_ret(-ENOTDIR);
	int64_t ino = kura_fd_ino(kp_mounts[e->mnt].fs, e->kfd);
	struct kn_ring *ring = kn_ring_get(e->mnt);
	if (ino <= 0 || !ring)
		return (int)kp_ret(ino < 0 ? (int)ino : -ENOSPC);
	sighold_lock(&kn_mu);
	struct dn **p = &dns;
	while (*p && !((*p)->fd == fd && (*p)->kfd == e->kfd))
		p = &(*p)->next;
	int r = 0;
	if (!(arg & ~(unsigned long)DN_MULTISHOT)) {
		if (*p) /* no events: the registration goes */
			unregister(p);
	} else if (*p) {
		(*p)->mask = arg;
	} else if (!(r = kn_start_thread())) {
		struct dn *d = calloc(1, sizeof *d);
		if (!d || (r = kn_ref(e->mnt))) {
			free(d);
			r = r ? r : -ENOMEM;
		} else {
			*d = (struct dn){ .fd = fd, .kfd = e->kfd, .mnt = e->mnt, .ino = (uint64_t)ino, .mask = arg, .next = dns };
			dns = d;
		}
	}
	sighold_unlock(&kn_mu);
	return (int)kp_ret(r);
}
