/*
 * aio.c — asynchronous I/O on kura descriptors.
 *
 * glibc's POSIX AIO runs requests in helper threads with internal pread/
 * pwrite calls that no wrapper sees: on a placeholder they would read an
 * empty file and report success.  For kura descriptors the request is
 * therefore carried out at once, in the caller, and its result stored in
 * the aiocb's error/return fields, which glibc's own aio_error, aio_return
 * and aio_suspend read; completion notification is then delivered as
 * requested.  Kura calls take well under a microsecond to a few, so doing
 * the work synchronously costs nothing an application could notice.
 *
 * libaio (io_submit) cannot be served the same way without also owning
 * io_getevents; a batch naming a kura descriptor is refused (-EINVAL)
 * rather than handed to the kernel, which would read the empty placeholder.
 */
#define _GNU_SOURCE
#include <aio.h>
#include <fcntl.h>
#include <linux/aio_abi.h>
#include <signal.h>
#include <stdlib.h>
#include <unistd.h>

#include "kp.h"

static void *notify_thread(void *arg)
{
	struct sigevent *sev = arg;
	sev->sigev_notify_function(sev->sigev_value);
	free(sev);
	return NULL;
}

static void notify(const struct sigevent *sev)
{
	if (sev->sigev_notify == SIGEV_SIGNAL) {
		sigqueue(getpid(), sev->sigev_signo, sev->sigev_value);
	} else if (sev->sigev_notify == SIGEV_THREAD) {
		struct sigevent *copy = malloc(sizeof *copy);
		pthread_t t;
		pthread_attr_t a;
		if (!copy)
			return;
		*copy = *sev;
		pthread_attr_init(&a);
		pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
		if (pthread_create(&t, sev->sigev_notify_attributes ? sev->sigev_notify_attributes : &a, notify_thread,
				   copy))
			free(copy);
		pthread_attr_destroy(&a);
	}
}

/* Runs one request on a kura fd; returns 0 (result in the aiocb). */
static void run(struct aiocb *cb, int op)
{
	ssize_t r;
	if (op == LIO_READ)
		r = pread(cb->aio_fildes, (void *)cb->aio_buf, cb->aio_nbytes, cb->aio_offset);
	else if (op == LIO_WRITE)
		r = (fcntl(cb->aio_fildes, F_GETFL) & O_APPEND) ? write(cb->aio_fildes, (const void *)cb->aio_buf, cb->aio_nbytes)
								 : pwrite(cb->aio_fildes, (const void *)cb->aio_buf, cb->aio_nbytes, cb->aio_offset);
	else
		r = fsync(cb->aio_fildes);
	cb->__error_code = r < 0 ? errno : 0;
	cb->__return_value = r < 0 ? -1 : r;
}

static int submit(struct aiocb *cb, int op)
{
	run(cb, op);
	notify(&cb->aio_sigevent);
	return 0;
}

KP_EXPORT int aio_read(struct aiocb *cb)
{
	return kp_get(cb->aio_fildes) ? submit(cb, LIO_READ) : REAL(aio_read)(cb);
}
KP_EXPORT int aio_read64(struct aiocb64 *cb) { return aio_read((struct aiocb *)cb); }
KP_EXPORT int aio_write(struct aiocb *cb)
{
	return kp_get(cb->aio_fildes) ? submit(cb, LIO_WRITE) : REAL(aio_write)(cb);
}
KP_EXPORT int aio_write64(struct aiocb64 *cb) { return aio_write((struct aiocb *)cb); }
KP_EXPORT int aio_fsync(int op, struct aiocb *cb)
{
	if (!kp_get(cb->aio_fildes))
		return REAL(aio_fsync)(op, cb);
	if (op != O_SYNC && op != O_DSYNC) {
		errno = EINVAL;
		return -1;
	}
	return submit(cb, LIO_NOP);
}
KP_EXPORT int aio_fsync64(int op, struct aiocb64 *cb) { return aio_fsync(op, (struct aiocb *)cb); }

/* Already complete: nothing to cancel. */
KP_EXPORT int aio_cancel(int fd, struct aiocb *cb)
{
	return kp_get(fd) ? AIO_ALLDONE : REAL(aio_cancel)(fd, cb);
}
KP_EXPORT int aio_cancel64(int fd, struct aiocb64 *cb) { return aio_cancel(fd, (struct aiocb *)cb); }

KP_EXPORT int lio_listio(int mode, struct aiocb *const list[], int n, struct sigevent *sev)
{
	int any = 0, all = 1;
	for (int i = 0; i < n; i++)
		if (list[i] && list[i]->aio_lio_opcode != LIO_NOP) {
			int k = kp_get(list[i]->aio_fildes) != NULL;
			any |= k;
			all &= k;
		}
	if (!any)
		return REAL(lio_listio)(mode, list, n, sev);
	if (!all) /* a mixed batch: the kernel half through glibc, ours here */
		return kp_unsupported("lio_listio mixing kura and kernel descriptors", EINVAL);
	int failed = 0;
	for (int i = 0; i < n; i++)
		if (list[i] && list[i]->aio_lio_opcode != LIO_NOP) {
			run(list[i], list[i]->aio_lio_opcode);
			failed |= list[i]->__error_code != 0;
		}
	if (mode == LIO_NOWAIT && sev)
		notify(sev);
	if (mode == LIO_WAIT && failed) {
		errno = EIO;
		return -1;
	}
	return 0;
}
KP_EXPORT int lio_listio64(int mode, struct aiocb64 *const list[], int n, struct sigevent *sev)
{
	return lio_listio(mode, (struct aiocb *const *)list, n, sev);
}

/* libaio */
KP_EXPORT int io_submit(aio_context_t ctx, long nr, struct iocb **iocbs)
{
	for (long i = 0; i < nr; i++)
		if (iocbs[i] && kp_get((int)iocbs[i]->aio_fildes)) {
			kp_unsupported("io_submit (libaio) on kura files", EINVAL);
			return -EINVAL; /* libaio's convention: -errno */
		}
	int (*real)(aio_context_t, long, struct iocb **) = REALT(int (*)(aio_context_t, long, struct iocb **), "io_submit");
	if (!real)
		return -ENOSYS;
	return real(ctx, nr, iocbs);
}
