// SPDX-License-Identifier: Apache-2.0
/*
 * The programs of `make bench-lb` (src/bench.rs loads them). First the floor it measures the
 * balancer against: the least an XDP forwarder does, swap the MAC addresses and send the
 * frame back out (XDP_TX), with no parsing, lookup or encapsulation.
 */
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

char LICENSE[] SEC("license") = "Apache-2.0";

SEC("xdp")
int lb_floor_tx(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = data;
	unsigned char tmp[ETH_ALEN];

	if ((void *)(eth + 1) > end)
		return XDP_DROP;
	__builtin_memcpy(tmp, eth->h_dest, ETH_ALEN);
	__builtin_memcpy(eth->h_dest, eth->h_source, ETH_ALEN);
	__builtin_memcpy(eth->h_source, tmp, ETH_ALEN);
	return XDP_TX;
}

/* The flood's generator (run with BPF_PROG_RUN and live frames, as bench/xdp.py's): writes
 * the whole 64-byte frame from lbg_frame before sending it out of lbg_ifindex. Live frames
 * get their pointers reset between runs but not their bytes, and the balancer rewrites the
 * frames it forwards in place (so does DNAT): without the rewrite, recycled pages would carry
 * the previous run's encapsulated frame. Read word by word: see lb_src_v6 in ringx_lb.bpf.c. */
const volatile __u64 lbg_frame[8] = {};
const volatile __u32 lbg_ifindex = 0;

SEC("xdp")
int lb_gen(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;
	__u64 *w = data;

	if (data + 64 > end)
		return XDP_ABORTED;
	w[0] = lbg_frame[0];
	w[1] = lbg_frame[1];
	w[2] = lbg_frame[2];
	w[3] = lbg_frame[3];
	w[4] = lbg_frame[4];
	w[5] = lbg_frame[5];
	w[6] = lbg_frame[6];
	w[7] = lbg_frame[7];
	return bpf_redirect(lbg_ifindex, 0);
}

/* The `repeat` harness: BPF_PROG_TEST_RUN with live frames runs this, which rewrites the
 * frame from lbg_frame (see lb_gen) and tail-calls the program measured (slot 0 of
 * lbw_next: the balancer, or the floor), so every run sees the original frame although the
 * balancer encapsulates in place. With lbw_vary, each run gets a source port and address of
 * its own (a new flow every time). Its cost is in every figure alike. */
const volatile __u32 lbw_vary = 0;

struct {
	__uint(type, BPF_MAP_TYPE_PROG_ARRAY);
	__type(key, __u32);
	__type(value, __u32);
	__uint(max_entries, 1);
} lbw_next SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__type(key, __u32);
	__type(value, __u32);
	__uint(max_entries, 1);
} lbw_count SEC(".maps");

SEC("xdp")
int lb_wrap(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;
	__u64 *w = data;
	__u8 *b = data;

	if (data + 64 > end)
		return XDP_ABORTED;
	w[0] = lbg_frame[0];
	w[1] = lbg_frame[1];
	w[2] = lbg_frame[2];
	w[3] = lbg_frame[3];
	w[4] = lbg_frame[4];
	w[5] = lbg_frame[5];
	w[6] = lbg_frame[6];
	w[7] = lbg_frame[7];
	if (lbw_vary) {
		__u32 k = 0, *n = bpf_map_lookup_elem(&lbw_count, &k);

		if (n) {
			__u32 v = ++*n;

			/* IPv4 source's last two bytes (offsets 28, 29) and the TCP source port
			 * (34, 35) of an untagged frame: 2^32 flows before one repeats. */
			b[28] = v >> 24;
			b[29] = v >> 16;
			b[34] = v >> 8;
			b[35] = v;
		}
	}
	bpf_tail_call(ctx, &lbw_next, 0);
	return XDP_ABORTED;
}

/* The limit of the veth test bed (bench/lb.py's `limit` set-up): what forwarding costs there
 * without balancing. Every IPv4 packet to lbl_vip is sent, GUE-encapsulated under a fixed
 * outer header (lbl_hdr: Ethernet, IPv4 and UDP, from user space), to one backend with
 * XDP_TX: no parsing beyond the address, no lookup, no counters. The bed's answers come
 * straight from the backend, as with the balancer, so the same requests complete. */
const volatile __u16 lbl_hdr[21] = {}; /* 42 bytes; the IPv4 length and checksum zero */
const volatile __u32 lbl_vip = 0;      /* network order */

SEC("xdp")
int lb_limit(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = data;
	__u16 *ip = data + sizeof(*eth), *w;
	__u32 tot, sum;

	if (data + sizeof(*eth) + 20 > end || eth->h_proto != bpf_htons(ETH_P_IP) ||
	    *(__u32 *)(ip + 8) != lbl_vip)
		return XDP_PASS;
	tot = bpf_ntohs(ip[1]);
	if (bpf_xdp_adjust_head(ctx, -28))
		return XDP_DROP;
	data = (void *)(long)ctx->data;
	end = (void *)(long)ctx->data_end;
	if (data + 42 > end)
		return XDP_DROP;
	w = data;
#pragma unroll
	for (int i = 0; i < 21; i++)
		w[i] = lbl_hdr[i];
	w[8] = bpf_htons(tot + 28); /* IPv4 total length */
	sum = w[8];
#pragma unroll
	for (int i = 7; i < 17; i++)
		if (i != 8)
			sum += w[i];
	sum = (sum & 0xffff) + (sum >> 16);
	sum = (sum & 0xffff) + (sum >> 16);
	w[12] = ~sum;                /* IPv4 checksum */
	w[19] = bpf_htons(tot + 8); /* UDP length */
	return XDP_TX;
}
