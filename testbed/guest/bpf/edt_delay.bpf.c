// SPDX-License-Identifier: GPL-2.0
/*
 * Per-destination delay at tc egress by earliest departure time (EDT), for cc-testbed.
 *
 * One node forwards many flows, each of which needs its own base RTT (paper 000 §3.2: up to 200
 * flows with RTTs spread over [20, 250] ms). The program stamps every IPv4 packet whose
 * destination is in `delay_ns` with the time it may leave (now + that delay); the interface's
 * root qdisc, `fq`, holds each packet until its time (per-flow time-ordered trees, one timer for
 * the whole qdisc). Packets to other destinations (and ARP) leave at once.
 *
 * Why not one netem per destination under HTB: the cost grows with the number of classes (each
 * netem arms its own timer, HTB visits the classes whose netem holds nothing due yet); in a 2-vCPU
 * TCG guest 210 flows through 210 such classes kept the CPU 100 % busy, mostly in the kernel.
 *
 * Use it on a forwarding node: a packet from a local socket would stay charged to the socket while
 * it waits (TCP small queues would throttle the flow), a forwarded one is not.
 */
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/ip.h>
#include <linux/pkt_cls.h>
#include <bpf/bpf_endian.h>
#include <bpf/bpf_helpers.h>

#define MAX_DESTINATIONS 65536

/* destination IPv4 address (network byte order) -> one-way delay in nanoseconds */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, MAX_DESTINATIONS);
	__type(key, __u32);
	__type(value, __u64);
} delay_ns SEC(".maps");

SEC("tc")
int edt_delay(struct __sk_buff *skb)
{
	void *data = (void *)(long)skb->data;
	void *data_end = (void *)(long)skb->data_end;
	struct ethhdr *eth = data;
	struct iphdr *ip = data + sizeof(*eth);

	if ((void *)(ip + 1) > data_end || eth->h_proto != bpf_htons(ETH_P_IP))
		return TC_ACT_OK;
	__u32 dst = ip->daddr;
	__u64 *delay = bpf_map_lookup_elem(&delay_ns, &dst);
	if (delay)
		/* a forwarded packet carries no departure time of its own: the delay counts from now */
		skb->tstamp = bpf_ktime_get_ns() + *delay;
	return TC_ACT_OK;
}

char LICENSE[] SEC("license") = "GPL";
