/* locks2.c — POSIX record locks, OFD locks, flock and lockf across
 * processes: range splitting and merging, whence and negative lengths,
 * F_GETLK's holder, upgrades and flock conversions, what fork and exec do
 * to each kind, release when the last descriptor of a description closes
 * anywhere, EDEADLK, and EINTR versus SA_RESTART in blocking waits.
 *
 * Usage: locks2 DIR.  Output must be the same on tmpfs and under kura: no
 * pids are printed, processes are named.  Processes synchronise through
 * pipes only; alarm() bounds every process in case a wait never ends.
 * The sections are headers in locks2/ (locks2/common.h says why). */
#include "locks2/ranges.h"
#include "locks2/lifetime.h"
#include "locks2/waits.h"

int main(int argc, char **argv)
{
	if (argc < 2)
		return 2;
	base = argv[1];
	main_pid = getpid();
	self_exe = realpath("/proc/self/exe", NULL);
	if (argc > 2 && !strcmp(argv[2], "exec-holder"))
		return exec_holder(argv);
	if (argc > 2 && !strcmp(argv[2], "posix-exec"))
		return posix_exec_child(argv);
	alarm(90);
	setvbuf(stdout, NULL, _IONBF, 0);
	signal(SIGPIPE, SIG_IGN);
	/* Peers first: they must not inherit any descriptor of the files. */
	A = peer_start("A");
	B = peer_start("B");
	C = peer_start("C");
	send_cmd(&A, "n B %d", (int)B.pid);
	get_reply(&A);
	send_cmd(&B, "n A %d", (int)A.pid);
	get_reply(&B);
	ranges();
	lockf_section();
	flock_section();
	fork_section();
	printf("== description lifetime\n");
	shared_close(0);
	shared_close(1);
	locker_exits(0);
	locker_exits(1);
	across_exec();
	posix_exec();
	deadlock_section();
	cycle3();
	killed_holder(0);
	killed_holder(1);
	printf("== signals\n");
	for (int how = W_FCNTL; how <= W_LOCKF; how++) {
		interrupted(how, 0);
		interrupted(how, 1);
	}
	send_cmd(&A, "q");
	send_cmd(&B, "q");
	send_cmd(&C, "q");
	waitpid(A.pid, NULL, 0);
	waitpid(B.pid, NULL, 0);
	waitpid(C.pid, NULL, 0);
	printf("done\n");
	return 0;
}
