/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The balancer's parser (included by ringx_lb.bpf.c after its maps): what a packet is, the
 * flow it belongs to (for an ICMP error, the flow it quotes), or the reason to stop.
 */
#ifndef RINGX_LB_PARSE_H
#define RINGX_LB_PARSE_H

/* ICMP's fixed header (linux/icmp.h would pull in the C library's socket headers). */
struct icmp_hdr {
	__u8 type;
	__u8 code;
	__u16 check;
	__u32 rest; /* unused, or the next-hop MTU (RFC 1191) / the MTU (RFC 8201) */
};
#define ICMP_DEST_UNREACH 3
#define ICMP_FRAG_NEEDED 4
#define ICMPV6_PKT_TOOBIG 2


/* The inner packet to send on: its IP header's start and length, and the flow it belongs
 * to (the client's direction, also for an ICMP error about it). */
struct pkt {
	struct lb_flow_key flow;
	__u32 ip_off;  /* the IP header's offset in the frame */
	__u32 ip_len;  /* the IP packet's length (its header says so; any padding excluded) */
	__u8 tos;      /* for the outer header */
	__u8 df;       /* IPv4 with don't-fragment (IPv6: never fragmented on the way) */
	__u8 family;   /* of the inner packet: 4 or 6 */
	__u8 syn;      /* TCP SYN without ACK */
	__u8 icmp;     /* an ICMP error about the flow, not a packet of it */
};

/* Reads source and destination ports at `c`; `l4_len` is what the IP header says. For TCP,
 * checks the data offset too. Returns 0, or a reason to stop. */
static __always_inline int ports(struct cursor *c, __u8 proto, __u32 l4_len, struct pkt *p)
{
	if (proto == IPPROTO_TCP) {
		struct tcphdr *th = cursor_take(c, sizeof(*th));

		if (!th || l4_len < sizeof(*th) || th->doff * 4 < sizeof(*th) ||
		    th->doff * 4 > l4_len)
			return LB_DROP_MALFORMED;
		p->flow.sport = th->source;
		p->flow.dport = th->dest;
		p->syn = th->syn && !th->ack;
		return 0;
	}
	if (proto == IPPROTO_UDP) {
		struct udphdr *uh = cursor_take(c, sizeof(*uh));

		if (!uh || l4_len < sizeof(*uh))
			return LB_DROP_MALFORMED;
		p->flow.sport = uh->source;
		p->flow.dport = uh->dest;
		return 0;
	}
	return LB_PASS_NOT_VIP;
}

static __always_inline int vip_addr(const __u8 *addr, __u8 family, __u32 len)
{
	struct lb_addr a = { .family = family };

	__builtin_memcpy(a.addr, addr, 16);
	(void)len;
	return bpf_map_lookup_elem(&lb_vip_addrs, &a) != 0;
}

/* The embedded packet of an ICMP error (at `c`): the backend's reply that could not go on,
 * source = VIP. Fills `p->flow` in the client's direction. Returns 0, or a reason. */
static __always_inline int icmp_inner4(struct cursor *c, struct pkt *p)
{
	struct iphdr *in = cursor_take(c, sizeof(*in));
	__u16 *l4;

	if (!in || in->version != 4 || in->ihl < 5)
		return LB_DROP_MALFORMED;
	if (!cursor_take(c, (in->ihl * 4 - sizeof(*in)) & 0x3f))
		return LB_DROP_MALFORMED;
	if (in->protocol != IPPROTO_TCP && in->protocol != IPPROTO_UDP)
		return LB_PASS_ICMP;
	l4 = cursor_take(c, 4); /* the first 8 bytes are quoted; the ports are enough */
	if (!l4)
		return LB_DROP_MALFORMED;
	__builtin_memcpy(p->flow.src, &in->daddr, 4);
	__builtin_memcpy(p->flow.dst, &in->saddr, 4);
	p->flow.sport = l4[1];
	p->flow.dport = l4[0];
	p->flow.proto = in->protocol;
	return 0;
}

static __always_inline int icmp_inner6(struct cursor *c, struct pkt *p)
{
	struct ipv6hdr *in = cursor_take(c, sizeof(*in));
	__u16 *l4;

	if (!in || in->version != 6)
		return LB_DROP_MALFORMED;
	if (in->nexthdr != IPPROTO_TCP && in->nexthdr != IPPROTO_UDP)
		return LB_PASS_ICMP;
	l4 = cursor_take(c, 4);
	if (!l4)
		return LB_DROP_MALFORMED;
	__builtin_memcpy(p->flow.src, &in->daddr, 16);
	__builtin_memcpy(p->flow.dst, &in->saddr, 16);
	p->flow.sport = l4[1];
	p->flow.dport = l4[0];
	p->flow.proto = in->nexthdr;
	return 0;
}

/* IPv4: fills `p`; returns 0 to balance it, or the reason to stop with. */
static __always_inline int parse4(struct cursor *c, void *data, struct pkt *p)
{
	struct iphdr *ip = cursor_take(c, sizeof(*ip));
	__u32 hlen, tot;

	if (!ip || ip->version != 4 || ip->ihl < 5)
		return LB_DROP_MALFORMED;
	hlen = ip->ihl * 4;
	tot = bpf_ntohs(ip->tot_len);
	if (tot < hlen || tot > cursor_left(c) + sizeof(*ip))
		return LB_DROP_MALFORMED;
	if (!cursor_take(c, (hlen - sizeof(*ip)) & 0x3f)) /* 0..40, bounded for the verifier */
		return LB_DROP_MALFORMED;
	p->ip_off = (void *)ip - data;
	p->ip_len = tot;
	p->tos = ip->tos;
	p->df = !!(ip->frag_off & bpf_htons(0x4000));
	p->family = 4;
	p->flow.family = 4;
	__builtin_memcpy(p->flow.src, &ip->saddr, 4);
	__builtin_memcpy(p->flow.dst, &ip->daddr, 4);
	/* More fragments, or an offset: the ports are in the first fragment only, so the
	 * fragments of one datagram could not be kept together (Katran drops them too). */
	if (ip->frag_off & bpf_htons(0x3fff))
		return vip_addr(p->flow.dst, 4, 4) ? LB_DROP_FRAGMENT : LB_PASS_NOT_VIP;
	if (ip->protocol == IPPROTO_ICMP) {
		struct icmp_hdr *ic = cursor_take(c, sizeof(*ic));

		if (!ic)
			return LB_DROP_MALFORMED;
		if (ic->type != ICMP_DEST_UNREACH || ic->code != ICMP_FRAG_NEEDED)
			return LB_PASS_ICMP;
		p->icmp = 1;
		return icmp_inner4(c, p);
	}
	p->flow.proto = ip->protocol;
	return ports(c, ip->protocol, tot - hlen, p);
}

static __always_inline int parse6(struct cursor *c, void *data, struct pkt *p)
{
	struct ipv6hdr *ip6 = cursor_take(c, sizeof(*ip6));
	__u32 plen;

	if (!ip6 || ip6->version != 6)
		return LB_DROP_MALFORMED;
	plen = bpf_ntohs(ip6->payload_len);
	if (plen == 0 || plen > cursor_left(c)) /* 0: a jumbogram, never balanced */
		return LB_DROP_MALFORMED;
	p->ip_off = (void *)ip6 - data;
	p->ip_len = plen + sizeof(*ip6);
	p->tos = (ip6->priority << 4) | (ip6->flow_lbl[0] >> 4);
	p->family = 6;
	p->flow.family = 6;
	__builtin_memcpy(p->flow.src, &ip6->saddr, 16);
	__builtin_memcpy(p->flow.dst, &ip6->daddr, 16);
	if (ip6->nexthdr == IPPROTO_FRAGMENT)
		return vip_addr(p->flow.dst, 6, 16) ? LB_DROP_FRAGMENT : LB_PASS_NOT_VIP;
	if (ip6->nexthdr == IPPROTO_ICMPV6) {
		struct icmp_hdr *ic = cursor_take(c, sizeof(*ic));

		if (!ic)
			return LB_DROP_MALFORMED;
		if (ic->type != ICMPV6_PKT_TOOBIG)
			return LB_PASS_ICMP;
		p->icmp = 1;
		return icmp_inner6(c, p);
	}
	if (ip6->nexthdr != IPPROTO_TCP && ip6->nexthdr != IPPROTO_UDP)
		return ip6->nexthdr == IPPROTO_HOPOPTS || ip6->nexthdr == IPPROTO_ROUTING ||
			       ip6->nexthdr == IPPROTO_DSTOPTS
			   ? LB_PASS_IPV6_EXT
			   : LB_PASS_NOT_VIP;
	p->flow.proto = ip6->nexthdr;
	return ports(c, ip6->nexthdr, plen, p);
}

#endif /* RINGX_LB_PARSE_H */
