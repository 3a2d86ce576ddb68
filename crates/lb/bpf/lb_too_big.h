/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The balancer's answers to packets too big once encapsulated (included by ringx_lb.bpf.c):
 * ICMP fragmentation-needed (IPv4 with DF) and ICMPv6 packet-too-big, built in the frame and
 * sent back to the client with XDP_TX.
 */
#ifndef RINGX_LB_TOO_BIG_H
#define RINGX_LB_TOO_BIG_H

/* An Ethernet header read and written in 16-bit words (linux/if_ether.h's is packed, which
 * makes clang move MAC addresses a byte at a time). */
struct eth16 {
	__u16 dst[3];
	__u16 src[3];
	__u16 proto;
};

static __always_inline __u16 csum_fold(__u32 sum)
{
	sum = (sum & 0xffff) + (sum >> 16);
	sum = (sum & 0xffff) + (sum >> 16);
	return ~sum;
}

/* The answer to an IPv4 packet with DF that would exceed the path's MTU once encapsulated:
 * ICMP destination unreachable / fragmentation needed back to the client (RFC 1191), with
 * the MTU left for the inner packet, from the address the client sent to, so that its TCP
 * lowers the segment size instead of losing these packets silently. The quoted part is the
 * client's IP header (without options; with options the packet is dropped) and 8 bytes,
 * already in place after growing the head by the new headers. Returns LB_TX_ICMP_TOO_BIG
 * (send the frame back with XDP_TX), or the reason to drop the packet. */
static __always_inline int too_big4(struct xdp_md *ctx, __u32 mtu)
{
	void *data = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = data;
	struct iphdr *in = data + sizeof(*eth);
	__u8 dst[6], src[6];
	__u32 saddr, daddr, sum = 0;
	struct iphdr *o;
	struct icmp_hdr *ic;
	__u16 *w;
	int len;

	if ((void *)(in + 1) + 8 > end || in->ihl != 5)
		return LB_DROP_TOO_BIG;
	__builtin_memcpy(dst, eth->h_source, 6);
	__builtin_memcpy(src, eth->h_dest, 6);
	saddr = in->daddr;
	daddr = in->saddr;
	/* [eth][ip 20][icmp 8] in front of the quoted 28 bytes, then nothing after them. */
	if (bpf_xdp_adjust_head(ctx, 0 - (int)(sizeof(struct iphdr) + sizeof(*ic))))
		return LB_DROP_TOO_BIG;
	data = (void *)(long)ctx->data;
	end = (void *)(long)ctx->data_end;
	len = end - data;
	if (bpf_xdp_adjust_tail(ctx, 14 + 20 + 8 + 28 - len))
		return LB_DROP_TOO_BIG;
	data = (void *)(long)ctx->data;
	end = (void *)(long)ctx->data_end;
	if (data + 14 + 20 + 8 + 28 > end)
		return LB_DROP_TOO_BIG;
	eth = data;
	__builtin_memcpy(eth->h_dest, dst, 6);
	__builtin_memcpy(eth->h_source, src, 6);
	eth->h_proto = bpf_htons(ETH_P_IP);
	o = (void *)(eth + 1);
	o->version = 4;
	o->ihl = 5;
	o->tos = 0;
	o->tot_len = bpf_htons(20 + 8 + 28);
	o->id = 0;
	o->frag_off = 0;
	o->ttl = 64;
	o->protocol = IPPROTO_ICMP;
	o->check = 0;
	o->saddr = saddr;
	o->daddr = daddr;
	w = (__u16 *)o;
#pragma unroll
	for (int i = 0; i < 10; i++)
		sum += w[i];
	o->check = csum_fold(sum);
	ic = (void *)(o + 1);
	ic->type = ICMP_DEST_UNREACH;
	ic->code = ICMP_FRAG_NEEDED;
	ic->check = 0;
	ic->rest = bpf_htonl(mtu & 0xffff); /* unused (2 bytes), next-hop MTU (2 bytes) */
	w = (__u16 *)ic;
	sum = 0;
#pragma unroll
	for (int i = 0; i < (8 + 28) / 2; i++)
		sum += w[i];
	ic->check = csum_fold(sum);
	return LB_TX_ICMP_TOO_BIG;
}

/* What an ICMPv6 packet-too-big quotes of the client's packet: as much as keeps the error
 * within IPv6's minimum MTU (RFC 4443 2.4 (c): 1280 - 40 - 8 bytes), which every packet too
 * big for a link of IPv6's minimum MTU has; or, from a packet too big for a smaller link
 * (an IPv4 link carrying IPv6 inside), its IPv6 header and 8 bytes, all a receiver needs to
 * find the connection. Two fixed sizes keep the checksum free of loops for the verifier. */
#define LB_PTB6_QUOTE 1232
#define LB_PTB6_QUOTE_MIN 48

static __always_inline __u16 csum_fold64(__u64 sum)
{
	sum = (sum & 0xffffffff) + (sum >> 32);
	sum = (sum & 0xffffffff) + (sum >> 32);
	return csum_fold(sum);
}

/* The IPv6 counterpart of too_big4 (IPv6 is never fragmented on the way, so every packet too
 * big once encapsulated gets it): ICMPv6 packet too big (RFC 8201) back to the client from
 * the address it sent to, with the MTU left for the inner packet and the start of its packet
 * quoted, so that its TCP lowers the segment size. `frame_len` is the frame's length as it
 * arrived. Returns LB_TX_ICMP_TOO_BIG (send the frame back with XDP_TX), or the reason to
 * drop the packet. */
static __always_inline int too_big6(struct xdp_md *ctx, __u32 mtu, __u32 frame_len)
{
	void *data = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;
	struct eth16 *eth = data;
	struct ipv6hdr *in = data + sizeof(*eth);
	__u16 dst[3], src[3];
	__u32 saddr[4], daddr[4], q;
	struct ipv6hdr *o;
	struct icmp_hdr *ic;
	__u64 sum;
	__u16 *w;
	void *quote;

	if ((void *)(in + 1) > end)
		return LB_DROP_TOO_BIG;
	q = bpf_ntohs(in->payload_len) + sizeof(*in) >= LB_PTB6_QUOTE ? LB_PTB6_QUOTE
									: LB_PTB6_QUOTE_MIN;
	__builtin_memcpy(dst, eth->src, 6);
	__builtin_memcpy(src, eth->dst, 6);
	__builtin_memcpy(saddr, &in->daddr, 16);
	__builtin_memcpy(daddr, &in->saddr, 16);
	/* [eth][ipv6 40][icmpv6 8] in front of the quoted q bytes, then nothing after them. */
	if (bpf_xdp_adjust_head(ctx, 0 - (int)(sizeof(*o) + sizeof(*ic))))
		return LB_DROP_TOO_BIG;
	/* The frame is now frame_len + 48 bytes long; keep the headers and the quote. */
	if (bpf_xdp_adjust_tail(ctx, (int)(sizeof(*eth) + q) - (int)frame_len))
		return LB_DROP_TOO_BIG;
	data = (void *)(long)ctx->data;
	end = (void *)(long)ctx->data_end;
	if (data + sizeof(*eth) + sizeof(*o) + sizeof(*ic) + LB_PTB6_QUOTE_MIN > end)
		return LB_DROP_TOO_BIG;
	eth = data;
	__builtin_memcpy(eth->dst, dst, 6);
	__builtin_memcpy(eth->src, src, 6);
	eth->proto = bpf_htons(ETH_P_IPV6);
	o = (void *)(eth + 1);
	*(__u32 *)o = bpf_htonl(0x60000000); /* version 6, traffic class 0, flow label 0 */
	o->payload_len = bpf_htons(sizeof(*ic) + q);
	o->nexthdr = IPPROTO_ICMPV6;
	o->hop_limit = 64;
	__builtin_memcpy(&o->saddr, saddr, 16);
	__builtin_memcpy(&o->daddr, daddr, 16);
	ic = (void *)(o + 1);
	ic->type = ICMPV6_PKT_TOOBIG;
	ic->code = 0;
	ic->check = 0;
	ic->rest = bpf_htonl(mtu);
	/* The checksum: the pseudo-header (addresses, upper-layer length, next header), the
	 * ICMPv6 header and the quote, in 16-bit words as they lie (see outer4). */
	sum = bpf_htons(sizeof(*ic) + q) + bpf_htons(IPPROTO_ICMPV6);
	w = (__u16 *)&o->saddr;
#pragma unroll
	for (int k = 0; k < 16; k++) /* both addresses */
		sum += w[k];
	w = (__u16 *)ic;
#pragma unroll
	for (int k = 0; k < 4 + LB_PTB6_QUOTE_MIN / 2; k++) /* the header, the least quote */
		sum += w[k];
	if (q == LB_PTB6_QUOTE) {
		/* The rest of the quote through bpf_csum_diff (at most 512 bytes a call, in
		 * multiples of 4). */
		long s1, s2, s3;

		quote = (void *)(ic + 1) + LB_PTB6_QUOTE_MIN;
		if (quote + (LB_PTB6_QUOTE - LB_PTB6_QUOTE_MIN) > end)
			return LB_DROP_TOO_BIG;
		s1 = bpf_csum_diff(0, 0, quote, 512, 0);
		s2 = bpf_csum_diff(0, 0, quote + 512, 512, 0);
		s3 = bpf_csum_diff(0, 0, quote + 1024, LB_PTB6_QUOTE - LB_PTB6_QUOTE_MIN - 1024, 0);
		if (s1 < 0 || s2 < 0 || s3 < 0)
			return LB_DROP_TOO_BIG;
		sum += (__u32)s1 + (__u64)(__u32)s2 + (__u32)s3;
	}
	ic->check = csum_fold64(sum);
	return LB_TX_ICMP_TOO_BIG;
}

#endif /* RINGX_LB_TOO_BIG_H */
