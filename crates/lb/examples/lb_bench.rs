//! The measuring half of `make bench-lb`'s first part (bench/lb.py drives it): ns per packet
//! of the balancer's forwarding path beside the floor, a minimal XDP_TX program (swap the
//! MACs, transmit), both timed by the kernel in BPF_PROG_TEST_RUN.
//!
//! ```text
//! lb_bench testrun [--flows K] [--rounds R] [--repeat N]
//! lb_bench gen --dev IF --src IP:PORT --dst VIP:PORT --dst-mac MAC --seconds S
//!                       send one TCP flow's ACKs (64-byte frames) out of IF for S s (live
//!                       frames redirected by an XDP program that rewrites each whole, as
//!                       the balancer and DNAT change the frames they forward in place)
//! lb_bench hold --dev IF --seconds S [--floor DIR]
//!                       attach a trivial XDP_DROP to IF for S s (the sink of the flood), or
//!                       with --floor the floor (swap MACs, XDP_TX), its link pinned in DIR as
//!                       link_<IF> (`ringx xdp --pin-dir DIR detach --dev IF` removes it)
//! lb_bench hold --dev IF --seconds S --limit DIR --vip IP --src IP --backend IP
//!               --src-mac MAC --dst-mac MAC [--gue-port P]
//!                       the veth bed's limit instead: every IPv4 packet to VIP GUE-encapsulated
//!                       to one backend under a fixed header, XDP_TX (forwarding without
//!                       balancing), its link pinned as with --floor
//! ```
//!
//! `testrun` measures, with `repeat` (N runs per call, the kernel's mean), alternated over R
//! rounds, medians:
//!
//! * established: one flow's ACK, a table hit every run;
//! * new flow: a SYN with a source address and port of its own every run (table miss, ring
//!   lookup, insert; the table fills and evicts as it would under a flood of new flows);
//! * the floor: swap the MACs, XDP_TX.
//!
//! All three run behind the same harness program (`lb_wrap` in bpf/lb_bench.bpf.c), which
//! rewrites the frame before tail-calling the program measured: with live frames
//! (BPF_F_TEST_XDP_LIVE_FRAMES) the kernel resets a frame's pointers between runs but not its
//! bytes, and the balancer encapsulates in place. The harness's few stores and tail call are
//! in every figure alike.
//!
//! Beside them, the same three with one run per call over K different flows (a cold path:
//! every call is a system call, and K flows do not stay in the caches).
//!
//! Prints one JSON object. Needs root.

use std::net::SocketAddr;
use std::path::PathBuf;

use ringx_lb::{
    control, BackendSpec, Balancer, Encap, Floor, LbSettings, NextHop, Proto, Reason, Service,
};
use ringx_xdp::packet::PacketBuilder;
use ringx_xdp::sys::{prog_test_run, BPF_F_TEST_XDP_LIVE_FRAMES};

type R<T> = Result<T, Box<dyn std::error::Error>>;

fn arg(args: &[String], name: &str) -> Option<String> {
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1).cloned())
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let r = match args.first().map(String::as_str) {
        Some("testrun") => testrun(&args),
        Some("gen") => gen(&args),
        Some("hold") => hold(&args),
        _ => {
            eprintln!("usage: lb_bench testrun|gen|hold ... (see the source)");
            std::process::exit(2);
        }
    };
    if let Err(e) = r {
        eprintln!("lb_bench: {e}");
        std::process::exit(1);
    }
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

fn testrun(args: &[String]) -> R<()> {
    let repeat: u32 = arg(args, "--repeat").map_or(Ok(1_000_000), |s| s.parse())?;
    let flows: u32 = arg(args, "--flows").map_or(Ok(20_000), |s| s.parse())?;
    let rounds: u32 = arg(args, "--rounds").map_or(Ok(5), |s| s.parse())?;
    let dir = PathBuf::from(format!("/sys/fs/bpf/ringx-bench-lb-{}", std::process::id()));
    let out = measure(&dir, repeat, flows, rounds);
    let _ = std::fs::remove_dir_all(&dir);
    println!("{}", out?);
    Ok(())
}

fn measure(dir: &std::path::Path, repeat: u32, flows: u32, rounds: u32) -> R<String> {
    let settings = LbSettings {
        encap: Encap::Gue { port: 6080 },
        source_v4: "10.255.0.1".parse()?,
        source_v6: "fd00:ff::1".parse()?,
        conn_table_size: 1 << 20,
        ..LbSettings::default()
    };
    let lb = Balancer::load(&settings, dir)?;
    let vip: SocketAddr = "198.51.100.1:80".parse()?;
    let backends = (1..=3)
        .map(|i| BackendSpec {
            addr: format!("10.0.0.{i}").parse().unwrap(),
            weight: 1,
            quic_host: None,
        })
        .collect();
    // UDP beside it: a plain service, and one whose backends have QUIC hosts 1..=3.
    let udp_vip: SocketAddr = "198.51.100.1:53".parse()?;
    let quic_vip: SocketAddr = "198.51.100.1:443".parse()?;
    let hosts = |quic: bool| -> Vec<BackendSpec> {
        (1..=3u8)
            .map(|i| BackendSpec {
                addr: format!("10.0.0.{i}").parse().unwrap(),
                weight: 1,
                quic_host: quic.then_some(i),
            })
            .collect()
    };
    control::apply(
        lb.maps(),
        &[
            Service {
                addr: vip,
                proto: Proto::Tcp,
                backends,
            },
            Service {
                addr: udp_vip,
                proto: Proto::Udp,
                backends: hosts(false),
            },
            Service {
                addr: quic_vip,
                proto: Proto::Udp,
                backends: hosts(true),
            },
        ],
        &|_| {
            Some(NextHop {
                ifindex: 0,
                mtu: 1500,
                dmac: [2, 0xbe, 0, 0, 0, 1],
                smac: [0; 6],
            })
        },
    )?;
    let floor = Floor::load()?;
    let frames = |syn: bool| -> Vec<Vec<u8>> {
        (0..flows)
            .map(|i| {
                let src = format!(
                    "192.0.{}.{}:{}",
                    2 + i / 60000 % 200,
                    1 + i % 250,
                    1024 + i % 60000
                );
                let b = PacketBuilder::tcp(src.parse().unwrap(), vip);
                if syn {
                    b.syn().payload(&[0u8; 10]).build()
                } else {
                    b.payload(&[0u8; 10]).build()
                }
            })
            .collect()
    };
    let (syns, acks) = (frames(true), frames(false));
    // Mean kernel-timed ns of one run per frame.
    let mean = |frames: &[Vec<u8>], run: &dyn Fn(&[u8]) -> ringx_xdp::Result<u32>| -> R<f64> {
        let mut sum = 0u64;
        for p in frames {
            sum += u64::from(run(p)?);
        }
        Ok(sum as f64 / frames.len() as f64)
    };
    let fwd = || -> R<u64> { Ok(lb.maps().reasons()?[Reason::Fwd as usize].1.packets) };
    let (mut new_flow, mut established, mut flo) = (Vec::new(), Vec::new(), Vec::new());
    let mut misses = 0;
    let fwd0 = fwd()?;
    for _ in 0..rounds {
        // Each round starts with an empty table: the SYNs are new flows, the ACKs that follow
        // are the same flows, established.
        lb.maps().clear_flows()?;
        let m0 = lb.maps().vip_counter(0)?.lru_misses;
        new_flow.push(mean(&syns, &|p| lb.test_run(p, 1).map(|r| r.duration_ns))?);
        misses += lb.maps().vip_counter(0)?.lru_misses - m0;
        established.push(mean(&acks, &|p| lb.test_run(p, 1).map(|r| r.duration_ns))?);
        flo.push(mean(&acks, &|p| {
            floor.test_run(p, 1).map(|r| r.duration_ns)
        })?);
    }
    let all_forwarded = fwd()? - fwd0 == 2 * u64::from(flows) * u64::from(rounds);
    let misses_ok = misses == u64::from(flows) * u64::from(rounds);
    // The floor with repeat and live frames (the frame is reset between runs, which the
    // balancer's in-place encapsulation defeats: see the module doc).
    let live = prog_test_run(
        floor.prog_fd()?,
        &acks[0],
        repeat,
        BPF_F_TEST_XDP_LIVE_FRAMES,
        0,
    )?;
    let (nf, es, fl) = (median(new_flow), median(established), median(flo));

    // With repeat, behind the harness (see the module doc).
    let est_w = ringx_lb::Wrapped::load(lb.prog_fd()?, &acks[0], false)?;
    let new_w = ringx_lb::Wrapped::load(lb.prog_fd()?, &syns[0], true)?;
    let floor_w = ringx_lb::Wrapped::load(floor.prog_fd()?, &acks[0], false)?;
    lb.test_run(&acks[0], 1)?; // the established flow is in the table
    let (mut re, mut rn, mut rf) = (Vec::new(), Vec::new(), Vec::new());
    let f0 = fwd()?;
    let m0 = lb.maps().vip_counter(0)?.lru_misses;
    for _ in 0..rounds {
        re.push(f64::from(est_w.run(repeat)?));
        rn.push(f64::from(new_w.run(repeat)?));
        rf.push(f64::from(floor_w.run(repeat)?));
    }
    let runs = u64::from(repeat) * u64::from(rounds);
    let repeat_forwarded = fwd()? - f0 == 2 * runs;
    let repeat_misses = lb.maps().vip_counter(0)?.lru_misses - m0;
    let (re, rn, rf) = (median(re), median(rn), median(rf));
    let udp = udp_costs(&lb, udp_vip, quic_vip, repeat, rounds)?;
    Ok(format!(
        "{{\"repeat\":{repeat},\"rounds\":{rounds},\"frame_bytes\":{},\
         \"established_ns\":{re:.1},\"new_flow_ns\":{rn:.1},\"floor_ns\":{rf:.1},\
         \"established_ratio\":{:.3},\"new_flow_ratio\":{:.3},\
         \"repeat_all_forwarded\":{repeat_forwarded},\"repeat_new_flow_misses\":{repeat_misses},\
         \"cold\":{{\"flows\":{flows},\"established_ns\":{es:.1},\"new_flow_ns\":{nf:.1},\
         \"floor_ns\":{fl:.1},\"established_ratio\":{:.3},\"new_flow_ratio\":{:.3},\
         \"all_forwarded\":{all_forwarded},\"new_flows_missed\":{misses_ok}}},\
         \"floor_bare_live_ns\":{},\"udp\":{udp}}}",
        acks[0].len(),
        re / rf,
        rn / rf,
        es / fl,
        nf / fl,
        live.duration_ns
    ))
}

/// UDP through the `repeat` harness (64-byte frames): a plain service's established flow
/// and new flows (the ring), and a QUIC service's short-header packets naming host 2, on a
/// path in the table (fast4 with its one extra lookup) and on a new path every run (a client
/// that moved: routed by the ID).
fn udp_costs(
    lb: &Balancer,
    udp: SocketAddr,
    quic: SocketAddr,
    repeat: u32,
    rounds: u32,
) -> R<String> {
    let src: SocketAddr = "192.0.2.9:40000".parse()?;
    let plain = PacketBuilder::udp(src, udp).payload(&[0x41; 22]).build();
    let mut short = vec![0x41, 0x0a, 2, 3];
    short.resize(22, 0x5e);
    let quic_frame = PacketBuilder::udp(src, quic).payload(&short).build();
    lb.test_run(&plain, 1)?;
    lb.test_run(&quic_frame, 1)?; // both paths in the table
    let quic0 = lb.maps().reasons()?[Reason::FwdQuic as usize].1.packets;
    let mut out = Vec::new();
    for (name, frame, vary) in [
        ("established_ns", &plain, false),
        ("new_flow_ns", &plain, true),
        ("quic_established_ns", &quic_frame, false),
        ("quic_new_path_ns", &quic_frame, true),
    ] {
        let w = ringx_lb::Wrapped::load(lb.prog_fd()?, frame, vary)?;
        let mut v = Vec::new();
        for _ in 0..rounds {
            v.push(f64::from(w.run(repeat)?));
        }
        out.push(format!("\"{name}\":{:.1}", median(v)));
    }
    let by_id = lb.maps().reasons()?[Reason::FwdQuic as usize].1.packets - quic0;
    out.push(format!(
        "\"quic_new_paths_by_id\":{by_id},\"quic_new_path_runs\":{}",
        u64::from(repeat) * u64::from(rounds)
    ));
    Ok(format!("{{{}}}", out.join(",")))
}

fn need(args: &[String], name: &str) -> R<String> {
    arg(args, name).ok_or_else(|| format!("missing {name}").into())
}

fn gen(args: &[String]) -> R<()> {
    let dev = need(args, "--dev")?;
    let ifindex = ringx_xdp::sys::ifindex(&dev).ok_or(format!("no device {dev}"))?;
    let src: SocketAddr = need(args, "--src")?.parse()?;
    let dst: SocketAddr = need(args, "--dst")?.parse()?;
    let dst_mac = ringx_lb::nexthop::parse_mac(&need(args, "--dst-mac")?).ok_or("bad MAC")?;
    let secs: f64 = need(args, "--seconds")?.parse()?;
    let pkt = PacketBuilder::tcp(src, dst)
        .payload(&[0u8; 10]) // 64-byte frames (without FCS)
        .macs([0x02, 0, 0, 0, 0, 0x10], dst_mac)
        .build();
    let gen = ringx_lb::Generator::load(ifindex, &pkt)?;
    let start = std::time::Instant::now();
    let mut sent: u64 = 0;
    while start.elapsed().as_secs_f64() < secs {
        gen.send(100_000, 64)?;
        sent += 100_000;
    }
    let el = start.elapsed().as_secs_f64();
    println!(
        "{{\"sent\":{sent},\"seconds\":{el:.4},\"pps\":{:.0},\"frame_len\":{}}}",
        sent as f64 / el,
        pkt.len()
    );
    Ok(())
}

fn hold(args: &[String]) -> R<()> {
    let dev = need(args, "--dev")?;
    let secs: f64 = need(args, "--seconds")?.parse()?;
    if let Some(dir) = arg(args, "--limit") {
        let dir = std::path::PathBuf::from(dir);
        ringx_xdp::ensure_pin_dir(&dir)?;
        let mac = |n: &str| -> R<[u8; 6]> {
            Ok(ringx_lb::nexthop::parse_mac(&need(args, n)?).ok_or("bad MAC")?)
        };
        let h = ringx_lb::LimitHeader {
            vip: need(args, "--vip")?.parse()?,
            src: need(args, "--src")?.parse()?,
            backend: need(args, "--backend")?.parse()?,
            src_mac: mac("--src-mac")?,
            dst_mac: mac("--dst-mac")?,
            gue_port: arg(args, "--gue-port").map_or(Ok(6080), |s| s.parse())?,
        };
        let mut limit = ringx_lb::Limit::load(&h)?;
        let att = limit.attach(&dev, &dir.join(format!("link_{dev}")))?;
        println!("{{\"attached\":\"lb_limit\",\"dev\":{dev:?}}}");
        std::thread::sleep(std::time::Duration::from_secs_f64(secs));
        att.detach()?;
        return Ok(());
    }
    if let Some(dir) = arg(args, "--floor") {
        let dir = std::path::PathBuf::from(dir);
        ringx_xdp::ensure_pin_dir(&dir)?;
        let mut floor = Floor::load()?;
        let att = floor.attach(&dev, &dir.join(format!("link_{dev}")))?;
        println!("{{\"attached\":\"lb_floor_tx\",\"dev\":{dev:?}}}");
        std::thread::sleep(std::time::Duration::from_secs_f64(secs));
        att.detach()?;
        return Ok(());
    }
    let mut progs = ringx_xdp::bench::BenchProgs::load(0)?;
    progs.attach("xdp_drop", &dev, ringx_xdp::Mode::Native)?;
    println!("{{\"attached\":\"xdp_drop\",\"dev\":{dev:?}}}");
    std::thread::sleep(std::time::Duration::from_secs_f64(secs));
    Ok(())
}
