/*
 * notify_queue.c — an instance's events on their way to the program
 * (notify_inst.c feeds them): the packets, the queue that holds them while
 * the socket is full, merging and IN_Q_OVERFLOW as the kernel's, and an
 * instance's watch slots.  Everything here runs under kn_mu.
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <linux/sockios.h>
#include <sys/ioctl.h>
#include <sys/inotify.h>
#include <sys/socket.h>
#include <unistd.h>

#include "notify.h"

static unsigned qmax;

/* max_queued_events, read once. */
void kn_queue_limit(void)
{
	if (qmax)
		return;
	qmax = 16384;
	int fd = REAL(open)("/proc/sys/fs/inotify/max_queued_events", O_RDONLY | O_CLOEXEC);
	char b[32];
	ssize_t n = fd >= 0 ? REAL(read)(fd, b, sizeof b - 1) : -1;
	if (fd >= 0)
		REAL(close)(fd);
	if (n > 0) {
		b[n] = 0;
		long v = strtol(b, NULL, 10);
		if (v > 0 && v < 1 << 24)
			qmax = (unsigned)v;
	}
}

/* ---- queueing ---- */

size_t kn_ev_make(char *b, int wd, uint32_t mask, uint32_t cookie, const char *name, size_t nl)
{
	size_t len = nl ? (nl + 1 + EV_SZ - 1) / EV_SZ * EV_SZ : 0;
	struct inotify_event ev = { .wd = wd, .mask = mask, .cookie = cookie, .len = (uint32_t)len };
	memcpy(b, &ev, EV_SZ);
	memset(b + EV_SZ, 0, len);
	if (nl)
		memcpy(b + EV_SZ, name, nl);
	return EV_SZ + len;
}

static int unread_in_socket(struct inst *in)
{
	int n = 0;
	return ioctl(in->my, SIOCOUTQ, &n) == 0 && n > 0;
}

void kn_push(struct inst *in, const char *ev, size_t sz)
{
	if ((in->qn || unread_in_socket(in)) && sz == in->lastlen && !memcmp(ev, in->last, sz))
		return;
	const struct inotify_event *last = (const void *)in->last;
	char o[EV_SZ];
	if (in->qn >= qmax) {
		if (in->lastlen && last->mask == IN_Q_OVERFLOW && in->qn)
			return;
		ev = o;
		sz = kn_ev_make(o, -1, IN_Q_OVERFLOW, 0, NULL, 0);
		if (in->qn > qmax) /* the overflow event itself is past the limit */
			return;
	}
	if (in->qhead && in->qhead + in->qlen + sz > in->qcap) {
		memmove(in->q, in->q + in->qhead, in->qlen);
		in->qhead = 0;
	}
	if (in->qlen + sz > in->qcap) {
		size_t nc = in->qcap ? in->qcap * 2 : 4096;
		while (nc < in->qlen + sz)
			nc *= 2;
		char *nq = realloc(in->q, nc);
		if (!nq)
			return;
		in->q = nq;
		in->qcap = nc;
	}
	memcpy(in->q + in->qhead + in->qlen, ev, sz);
	in->qlen += sz;
	in->qn++;
	memcpy(in->last, ev, sz);
	in->lastlen = sz;
}

void kn_flush(struct inst *in)
{
	while (in->qlen) {
		const struct inotify_event *ev = (const void *)(in->q + in->qhead);
		size_t sz = EV_SZ + ev->len;
		if (send(in->my, ev, sz, MSG_DONTWAIT | MSG_NOSIGNAL) < 0)
			return; /* full, or the program closed it: the thread sees which */
		in->qhead += sz;
		in->qlen -= sz;
		in->qn--;
	}
	in->qhead = 0;
}

/* ---- watches ---- */

void kn_drop_watch(struct inst *in, int i, int ignored)
{
	struct watch *w = &in->w[i];
	if (w->kwd < 0) {
		kn_unref(w->mnt);
	}
	if (ignored) {
		char b[EV_SZ];
		kn_push(in, b, kn_ev_make(b, w->wd, IN_IGNORED, 0, NULL, 0));
	}
	in->w[i] = in->w[--in->nw];
}

int kn_new_wd(struct inst *in)
{
	if (in->nextwd <= 0) /* wrapped, as idr_alloc_cyclic does */
		in->nextwd = 1;
	for (;;) {
		int wd = in->nextwd++, used = 0;
		for (int i = 0; i < in->nw; i++)
			used |= in->w[i].wd == wd;
		if (!used)
			return wd;
	}
}

struct watch *kn_add_slot(struct inst *in)
{
	if (in->nw == in->cap) {
		int nc = in->cap ? in->cap * 2 : 8;
		struct watch *nw = realloc(in->w, (size_t)nc * sizeof *nw);
		if (!nw)
			return NULL;
		in->w = nw;
		in->cap = nc;
	}
	return &in->w[in->nw++];
}

