// SPDX-License-Identifier: GPL-2.0
/*
 * LD_PRELOAD shim for cc-testbed's iperf3 clients (and its pings).
 *
 * Held at the first connect(): the process stops itself (SIGSTOP) at its first connect(), and goes
 * on when it is continued (SIGCONT). The runner starts every iperf3 client ahead of traffic and
 * continues each shortly before its start time. Held here, a client has already been exec'd,
 * linked and has read its options: in a 2-vCPU TCG guest that start-up costs tens of milliseconds
 * a process, and 210 clients continued together before exec spread their first packets over
 * 0-8 s. iperf3's first connect() is its control connection, so nothing has been sent yet.
 *
 * Held at the first socket() instead (only when CC_TESTBED_HOLD_AT_SOCKET is set: ping, which has
 * no connect() when given its source address): exec'd, linked, its options read, nothing sent. A ping
 * exec'd at its start time read its binary and libraries over the guest's shared root filesystem
 * while the traffic ran, and in virtual time that wait on the host moved its start by the host's load.
 *
 * Drained before the end (only when CC_TESTBED_DRAIN is set: fixed-size transfers, iperf3 -n):
 * iperf3 counts a byte as sent once it is written to the socket, and tells the server the test has
 * ended (one byte, TEST_END, on the control connection) while the socket may still hold most of
 * the transfer; the server then stops reading, and the rest never arrives. Before that byte is
 * written, the shim waits until every data connection's bytes are acknowledged (SIOCOUTQ = 0) or
 * the connection is no longer established, so a transfer ends when its last byte has arrived.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <linux/sockios.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define TEST_END 4 /* iperf3's state byte (iperf_api.h) */
#define MAX_DATA_FDS 64

typedef int (*socket_fn)(int, int, int);
typedef int (*connect_fn)(int, const struct sockaddr *, socklen_t);
typedef ssize_t (*write_fn)(int, const void *, size_t);

static int control_fd = -1;
static int data_fds[MAX_DATA_FDS];
static int n_data_fds;

int socket(int domain, int type, int protocol)
{
	static socket_fn real_socket;
	static int held;

	if (!real_socket)
		real_socket = (socket_fn)dlsym(RTLD_NEXT, "socket");
	if (!held && getenv("CC_TESTBED_HOLD_AT_SOCKET")) {
		held = 1;
		raise(SIGSTOP);
	}
	return real_socket(domain, type, protocol);
}

int connect(int fd, const struct sockaddr *addr, socklen_t len)
{
	static connect_fn real_connect;

	if (!real_connect)
		real_connect = (connect_fn)dlsym(RTLD_NEXT, "connect");
	if (control_fd < 0) {
		control_fd = fd;
		if (!getenv("CC_TESTBED_HOLD_AT_SOCKET")) /* held at socket() already */
			raise(SIGSTOP);
	} else if (n_data_fds < MAX_DATA_FDS) {
		data_fds[n_data_fds++] = fd;
	}
	return real_connect(fd, addr, len);
}

/* bytes written to fd and not yet acknowledged; 0 once the connection is no longer established */
static int unacknowledged(int fd)
{
	struct tcp_info info;
	socklen_t len = sizeof(info);
	int queued = 0;

	if (getsockopt(fd, IPPROTO_TCP, TCP_INFO, &info, &len) != 0)
		return 0;
	if (info.tcpi_state != TCP_ESTABLISHED && info.tcpi_state != TCP_CLOSE_WAIT)
		return 0;
	if (ioctl(fd, SIOCOUTQ, &queued) != 0)
		return 0;
	return queued;
}

static void drain(void)
{
	const struct timespec tick = { 0, 1000000 }; /* 1 ms */

	for (int i = 0; i < n_data_fds; i++)
		while (unacknowledged(data_fds[i]) > 0)
			nanosleep(&tick, NULL);
}

ssize_t write(int fd, const void *buf, size_t count)
{
	static write_fn real_write;

	if (!real_write)
		real_write = (write_fn)dlsym(RTLD_NEXT, "write");
	if (fd == control_fd && count == 1 && *(const signed char *)buf == TEST_END && getenv("CC_TESTBED_DRAIN"))
		drain();
	return real_write(fd, buf, count);
}
