/*
 * mapsig.c — the layer's SIGBUS and SIGSEGV handlers, for kura maps: a
 * SIGBUS on a page that has come within the file since mmap is mapped and
 * the access repeated (map.c), a SIGSEGV store that joins an atomic group
 * is taken (groupmap.c).  Every other fault goes to the program's own
 * handler, kept aside by sigaction and signal, or kills as it would have.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <signal.h>

#include "kp.h"
#include "maptab.h"

/* The program's dispositions of the two signals, once the layer handles
 * them (slot 0 SIGBUS, 1 SIGSEGV). */
static struct sigaction user_act[2];
static int installed[2];
static pthread_mutex_t bus_lock = PTHREAD_MUTEX_INITIALIZER;

static int slot_of_sig(int sig)
{
	return sig == SIGBUS ? 0 : sig == SIGSEGV ? 1 : -1;
}

/* A fault that is not the layer's goes to the program's handler, or
 * kills as the default would when the access repeats. */
static void pass_on(int sig, siginfo_t *si, void *uc)
{
	struct sigaction u = user_act[slot_of_sig(sig)];
	if ((u.sa_flags & SA_SIGINFO) && u.sa_sigaction) {
		u.sa_sigaction(sig, si, uc);
	} else if (u.sa_handler != SIG_DFL && u.sa_handler != SIG_IGN) {
		u.sa_handler(sig);
	} else {
		struct sigaction dfl = { .sa_handler = SIG_DFL };
		REAL(sigaction)(sig, &dfl, NULL);
	}
}

static void on_bus(int sig, siginfo_t *si, void *uc)
{
	if (si->si_code == BUS_ADRERR && kp_map_fault_in(si->si_addr))
		return;
	pass_on(sig, si, uc);
}

/* A store a group cannot take (it is full, or the pool is) is what a
 * store into a page the kernel cannot back is: SIGBUS. */
static void on_segv(int sig, siginfo_t *si, void *uc)
{
	int r = si->si_code == SEGV_ACCERR ? kp_group_fault(si->si_addr) : 0;
	if (r > 0)
		return;
	if (r < 0) {
		/* The program's SIGBUS disposition decides, as for a store
		 * the kernel cannot back; a handler that returns sees the
		 * store fault again, as on Linux. */
		raise(SIGBUS);
		return;
	}
	pass_on(sig, si, uc);
}

static void install_handler(int sig, void (*fn)(int, siginfo_t *, void *))
{
	int k = slot_of_sig(sig);
	if (__atomic_load_n(&installed[k], __ATOMIC_ACQUIRE))
		return;
	sighold_lock(&bus_lock);
	if (!installed[k]) {
		struct sigaction sa = { .sa_sigaction = fn, .sa_flags = SA_SIGINFO | SA_NODEFER | SA_ONSTACK };
		sigemptyset(&sa.sa_mask);
		REAL(sigaction)(sig, &sa, &user_act[k]);
		__atomic_store_n(&installed[k], 1, __ATOMIC_RELEASE);
	}
	sighold_unlock(&bus_lock);
}

void kp_install_bus_handler(void)
{
	install_handler(SIGBUS, on_bus);
}

void kp_install_segv_handler(void)
{
	install_handler(SIGSEGV, on_segv);
}

/* Once the layer handles a signal, the program's handler is kept aside and
 * called for the faults that are not the layer's (sigdefer.c asks first). */
int kp_fault_sigaction(int sig, const struct sigaction *act, struct sigaction *old)
{
	int k = slot_of_sig(sig);
	if (k < 0 || !__atomic_load_n(&installed[k], __ATOMIC_ACQUIRE))
		return KP_NOT_MINE;
	struct sigaction set = act ? *act : (struct sigaction){ 0 }; /* act may be old */
	sighold_lock(&bus_lock);
	if (old)
		*old = user_act[k];
	if (act)
		user_act[k] = set;
	sighold_unlock(&bus_lock);
	return 0;
}
