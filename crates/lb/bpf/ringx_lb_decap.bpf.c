// SPDX-License-Identifier: Apache-2.0
/*
 * The backends' half of ringx's load balancer (ringx_lb.bpf.c): takes the outer headers off
 * what the balancer sent (IP-in-IP, or GUE: IP in UDP to lbd_gue_port) and passes the
 * client's packet, addressed to the VIP, to the stack. The VIP is on the backend's loopback,
 * so the stack accepts it, and the answer goes from the VIP straight to the client (direct
 * server return). Everything else passes untouched.
 *
 * It is its own object so that a backend loads only this and its one counter map. The
 * production alternative is the kernel's own tunnel devices (ipip, ip6tnl, or fou for GUE),
 * where they exist.
 */
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/in.h>
#include <linux/ip.h>
#include <linux/ipv6.h>
#include <linux/udp.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

#include "ringx_lb.h"
#include "parsing.h"

char LICENSE[] SEC("license") = "Apache-2.0";

/* GUE: the UDP port encapsulated packets arrive on (network order). */
const volatile __u16 lbd_gue_port = 0;

/* Counters by reason (LBD_REASONS); 64 slots for reasons a newer version may add. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__type(key, __u32);
	__type(value, struct lb_reason_counter);
	__uint(max_entries, 64);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} lbd_stats SEC(".maps");

static __always_inline int dverdict(struct xdp_md *ctx, __u32 reason)
{
	struct lb_reason_counter *c = bpf_map_lookup_elem(&lbd_stats, &reason);

	if (c) {
		c->packets++;
		c->bytes += ctx->data_end - ctx->data;
	}
	return reason == LBD_DROP_MALFORMED ? XDP_DROP : XDP_PASS;
}

/* Strips `olen` bytes of outer headers after the Ethernet header; `inner`: 4 or 6. */
static __always_inline int decap(struct xdp_md *ctx, __u32 olen, __u8 inner, __u32 reason)
{
	void *data = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = data, saved;

	if ((void *)(eth + 1) > end)
		return dverdict(ctx, LBD_DROP_MALFORMED);
	saved = *eth;
	if (bpf_xdp_adjust_head(ctx, (int)olen))
		return dverdict(ctx, LBD_DROP_MALFORMED);
	data = (void *)(long)ctx->data;
	end = (void *)(long)ctx->data_end;
	eth = data;
	if ((void *)(eth + 1) > end)
		return dverdict(ctx, LBD_DROP_MALFORMED);
	__builtin_memcpy(eth->h_dest, saved.h_dest, 6);
	__builtin_memcpy(eth->h_source, saved.h_source, 6);
	eth->h_proto = inner == 4 ? bpf_htons(ETH_P_IP) : bpf_htons(ETH_P_IPV6);
	return dverdict(ctx, reason);
}

/* The inner packet's IP version at `c` (4 or 6), checking that its fixed header is there;
 * 0 when it is neither. */
static __always_inline __u8 inner_version(struct cursor *c)
{
	__u8 *v = c->pos;

	if ((void *)(v + 1) > c->end)
		return 0;
	if ((*v >> 4) == 4 && cursor_left(c) >= sizeof(struct iphdr))
		return 4;
	if ((*v >> 4) == 6 && cursor_left(c) >= sizeof(struct ipv6hdr))
		return 6;
	return 0;
}

SEC("xdp")
int ringx_lb_decap(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	struct cursor c = { .pos = data, .end = (void *)(long)ctx->data_end };
	struct ethhdr *eth = cursor_take(&c, sizeof(*eth));
	__u32 olen;
	__u8 proto, v;

	if (!eth)
		return dverdict(ctx, LBD_PASS_OTHER);
	if (eth->h_proto == bpf_htons(ETH_P_IP)) {
		struct iphdr *ip = cursor_take(&c, sizeof(*ip));

		if (!ip || ip->version != 4 || ip->ihl < 5)
			return dverdict(ctx, LBD_PASS_OTHER);
		if (ip->protocol != IPPROTO_IPIP && ip->protocol != IPPROTO_IPV6 &&
		    ip->protocol != IPPROTO_UDP)
			return dverdict(ctx, LBD_PASS_OTHER);
		/* A fragmented tunnel packet is the stack's to reassemble. */
		if (ip->frag_off & bpf_htons(0x3fff))
			return dverdict(ctx, LBD_PASS_OTHER);
		/* Bounded in a register the verifier sees (clang re-reads ihl otherwise). */
		olen = (ip->ihl * 4) & 0x3c;
		if (olen < sizeof(*ip) || !cursor_take(&c, (olen - sizeof(*ip)) & 0x3f))
			return dverdict(ctx, LBD_PASS_OTHER);
		proto = ip->protocol;
	} else if (eth->h_proto == bpf_htons(ETH_P_IPV6)) {
		struct ipv6hdr *ip6 = cursor_take(&c, sizeof(*ip6));

		if (!ip6 || ip6->version != 6)
			return dverdict(ctx, LBD_PASS_OTHER);
		olen = sizeof(*ip6);
		proto = ip6->nexthdr;
	} else {
		return dverdict(ctx, LBD_PASS_OTHER);
	}
	if (proto == IPPROTO_UDP) {
		struct udphdr *u = cursor_take(&c, sizeof(*u));

		if (!u || !lbd_gue_port || u->dest != lbd_gue_port)
			return dverdict(ctx, LBD_PASS_OTHER);
		v = inner_version(&c);
		if (!v)
			return dverdict(ctx, LBD_DROP_MALFORMED);
		return decap(ctx, olen + sizeof(*u), v, LBD_DECAP_GUE);
	}
	if (proto == IPPROTO_IPIP || proto == IPPROTO_IPV6) {
		v = inner_version(&c);
		if (v != (proto == IPPROTO_IPIP ? 4 : 6))
			return dverdict(ctx, LBD_DROP_MALFORMED);
		return decap(ctx, olen, v, LBD_DECAP_IPIP);
	}
	return dverdict(ctx, LBD_PASS_OTHER);
}
