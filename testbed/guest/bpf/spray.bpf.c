// SPDX-License-Identifier: GPL-2.0
/*
 * Per-packet round-robin spraying over parallel paths at tc egress, for cc-testbed (paper 004).
 *
 * Attached to the egress of a router's first path interface, where the routing table sends the
 * traffic. Packet n (TCP and UDP over IPv4, counted since the program was armed) leaves on path
 * n mod n_paths: path 0 is this interface (the packet passes), path i > 0 is redirected to
 * `paths[i].ifindex` with `paths[i].nexthop` (IPv4, network order) as its next hop, whose MAC
 * address the neighbour subsystem fills in. ICMP (ping) and everything else stays on path 0,
 * so a pair's base RTT is the first path's. `sent[i]` counts the packets put on path i.
 */
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/in.h>
#include <linux/ip.h>
#include <linux/pkt_cls.h>
#include <bpf/bpf_endian.h>
#include <bpf/bpf_helpers.h>

#define MAX_PATHS 8

#ifndef AF_INET
#define AF_INET 2
#endif

struct path {
	__u32 ifindex;
	__u32 nexthop; /* IPv4, network byte order */
};

struct control {
	__u64 n_paths; /* 0 = not armed: everything passes */
	__u64 next;	/* packets sprayed so far */
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, MAX_PATHS);
	__type(key, __u32);
	__type(value, struct path);
} paths SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct control);
} spray_control SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, MAX_PATHS);
	__type(key, __u32);
	__type(value, __u64);
} sent SEC(".maps");

SEC("tc")
int spray(struct __sk_buff *skb)
{
	void *data = (void *)(long)skb->data;
	void *data_end = (void *)(long)skb->data_end;
	struct ethhdr *eth = data;
	struct iphdr *ip = data + sizeof(*eth);
	__u32 zero = 0;

	if ((void *)(ip + 1) > data_end || eth->h_proto != bpf_htons(ETH_P_IP))
		return TC_ACT_OK;
	if (ip->protocol != IPPROTO_TCP && ip->protocol != IPPROTO_UDP)
		return TC_ACT_OK;
	struct control *control = bpf_map_lookup_elem(&spray_control, &zero);
	if (!control || control->n_paths == 0 || control->n_paths > MAX_PATHS)
		return TC_ACT_OK;
	__u32 index = __sync_fetch_and_add(&control->next, 1) % control->n_paths;
	__u64 *count = bpf_map_lookup_elem(&sent, &index);
	if (count)
		__sync_fetch_and_add(count, 1);
	if (index == 0)
		return TC_ACT_OK;
	struct path *path = bpf_map_lookup_elem(&paths, &index);
	if (!path)
		return TC_ACT_OK;
	struct bpf_redir_neigh nexthop = {.nh_family = AF_INET, .ipv4_nh = path->nexthop};
	return bpf_redirect_neigh(path->ifindex, &nexthop, sizeof(nexthop), 0);
}

char LICENSE[] SEC("license") = "GPL";
