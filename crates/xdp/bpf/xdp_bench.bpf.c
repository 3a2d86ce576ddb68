// SPDX-License-Identifier: Apache-2.0
/*
 * Helpers for `make bench` (bench/xdp.py), not part of the filter:
 *   xdp_gen   a traffic generator: run through BPF_PROG_RUN with BPF_F_TEST_XDP_LIVE_FRAMES
 *             it redirects each copy of the test packet out of gen_ifindex (xdp-trafficgen's
 *             technique), so a veth peer receives frames at rates no socket sender reaches;
 *   xdp_drop  the cheapest possible drop, the floor the filter is compared with;
 *   xdp_pass  the cheapest possible pass;
 *   xdp_touch_drop  reads the Ethernet header, then drops: what the first touch of the
 *             packet's data costs (every real filter pays it, the kernel's stack too).
 */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

char LICENSE[] SEC("license") = "Apache-2.0";

const volatile __u32 gen_ifindex = 0;

SEC("xdp")
int xdp_gen(struct xdp_md *ctx)
{
	return bpf_redirect(gen_ifindex, 0);
}

SEC("xdp")
int xdp_drop(struct xdp_md *ctx)
{
	return XDP_DROP;
}

SEC("xdp")
int xdp_pass(struct xdp_md *ctx)
{
	return XDP_PASS;
}

SEC("xdp")
int xdp_touch_drop(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;
	volatile __u8 *p = data;

	if (data + 14 > end)
		return XDP_DROP;
	/* Read the EtherType; volatile so the load is not optimised away. */
	if (p[12] == 0x42)
		return XDP_PASS;
	return XDP_DROP;
}
