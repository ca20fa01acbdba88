// SPDX-License-Identifier: GPL-2.0
/*
 * LD_PRELOAD shim for cc-testbed: the process stops itself (SIGSTOP) at its first connect(), and
 * goes on when it is continued (SIGCONT).
 *
 * The runner starts every iperf3 client ahead of traffic and continues each at its start time.
 * Held here, a client has already been exec'd, linked and has read its options: in a 2-vCPU TCG
 * guest that start-up costs tens of milliseconds a process, and 210 clients continued together
 * before exec spread their first packets over 0-8 s. iperf3's first connect() is its control
 * connection, so nothing has been sent yet.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <signal.h>
#include <sys/socket.h>

typedef int (*connect_fn)(int, const struct sockaddr *, socklen_t);

int connect(int fd, const struct sockaddr *addr, socklen_t len)
{
	static connect_fn real_connect;
	static int held;

	if (!real_connect)
		real_connect = (connect_fn)dlsym(RTLD_NEXT, "connect");
	if (!held) {
		held = 1;
		raise(SIGSTOP);
	}
	return real_connect(fd, addr, len);
}
