//! The measuring half of `make bench`'s XDP section (bench/xdp.py drives it):
//!
//! ```text
//! xdp_bench testrun [--repeat N]          ns per packet of the filter, BPF_PROG_TEST_RUN
//! xdp_bench gen --dev IF --src IP --dst IP --dst-mac MAC --seconds S [--kind udp|short]
//!                                         send UDP frames out of IF (live-frame XDP
//!                                         redirect, xdp-trafficgen's technique) for S s
//! xdp_bench hold --dev IF --prog xdp_drop|xdp_pass --seconds S
//!                                         attach a trivial program for S s (the floor)
//! ```
//!
//! Each prints one JSON object per line. Needs root.

use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use ringx_xdp::bench::BenchProgs;
use ringx_xdp::packet::{Ext, PacketBuilder, ETH_P_8021Q};
use ringx_xdp::{Filter, List, Mode, Origin, Settings};

fn arg(args: &[String], name: &str) -> Option<String> {
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1).cloned())
}

fn need(args: &[String], name: &str) -> String {
    arg(args, name).unwrap_or_else(|| panic!("missing {name}"))
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let r = match args.first().map(String::as_str) {
        Some("testrun") => testrun(&args),
        Some("gen") => gen(&args),
        Some("hold") => hold(&args),
        _ => {
            eprintln!("usage: xdp_bench testrun|gen|hold ... (see the source)");
            std::process::exit(2);
        }
    };
    if let Err(e) = r {
        eprintln!("xdp_bench: {e}");
        std::process::exit(1);
    }
}

type R = Result<(), Box<dyn std::error::Error>>;

/// The filter with realistic lists (1000 blocked IPv4 /24s and 1000 IPv6 /48s, 100 allowed
/// hosts, SYN limit and port filter on), each packet kind run `repeat` times in the kernel.
fn testrun(args: &[String]) -> R {
    let repeat: u32 = arg(args, "--repeat").map_or(Ok(2_000_000), |s| s.parse())?;
    let dir = PathBuf::from(format!("/sys/fs/bpf/ringx-bench-{}", std::process::id()));
    let settings = Settings {
        syn_rate: 1_000_000_000, // never limiting, but the bucket code runs
        syn_burst: 1_000_000_000,
        port_filter: true,
        ephemeral_low: Some(32768),
        ..Settings::default()
    };
    let result = (|| -> R {
        let f = Filter::load(&settings, &dir)?;
        let m = f.maps();
        for i in 0..1000u32 {
            let v4: IpAddr = IpAddr::from([100, (i >> 8) as u8, i as u8, 0]);
            m.add(List::Block, ringx_xdp::Cidr::new(v4, 24)?, Origin::Cli)?;
            let v6: IpAddr = format!("2001:db8:{i:x}::").parse()?;
            m.add(List::Block, ringx_xdp::Cidr::new(v6, 48)?, Origin::Cli)?;
        }
        for i in 0..100u8 {
            m.add(
                List::Allow,
                IpAddr::from([192, 168, 0, i]).into(),
                Origin::Cli,
            )?;
        }
        m.serve_port(80, true, false)?;
        let web4: SocketAddr = "192.0.2.2:80".parse()?;
        let web6: SocketAddr = "[2001:db9::2]:80".parse()?;
        let cases: Vec<(&str, Vec<u8>)> = vec![
            (
                "v4 tcp ack, pass",
                PacketBuilder::tcp("192.0.2.1:40000".parse()?, web4).build(),
            ),
            (
                "v4 tcp syn, pass (bucket updated)",
                PacketBuilder::tcp("192.0.2.1:40000".parse()?, web4)
                    .syn()
                    .build(),
            ),
            (
                "v4 udp, blocked source, drop",
                PacketBuilder::udp("100.3.7.9:1".parse()?, web4).build(),
            ),
            (
                "v4 tcp, unserved port, drop",
                PacketBuilder::tcp("192.0.2.1:1".parse()?, "192.0.2.2:22".parse()?).build(),
            ),
            (
                "v4 tcp, allowed source, pass",
                PacketBuilder::tcp("192.168.0.7:1".parse()?, web4).build(),
            ),
            (
                "v4 802.1Q tcp ack, pass",
                PacketBuilder::tcp("192.0.2.1:40000".parse()?, web4)
                    .vlan(ETH_P_8021Q, 5)
                    .build(),
            ),
            (
                "v6 tcp ack, pass",
                PacketBuilder::tcp("[2001:db9::1]:40000".parse()?, web6).build(),
            ),
            (
                "v6 blocked source, drop",
                PacketBuilder::tcp("[2001:db8:3e7::1]:1".parse()?, web6).build(),
            ),
            (
                "v6 3 extension headers, tcp ack, pass",
                PacketBuilder::tcp("[2001:db9::1]:40000".parse()?, web6)
                    .ext(Ext::HopByHop { len8: 0 })
                    .ext(Ext::Routing { len8: 2 })
                    .ext(Ext::DestOpts { len8: 0 })
                    .build(),
            ),
            (
                "truncated ipv4, drop",
                PacketBuilder::tcp("192.0.2.1:40000".parse()?, web4).build()[..30].to_vec(),
            ),
        ];
        for (name, pkt) in &cases {
            let r = f.test_run(pkt, repeat)?;
            println!(
                "{{\"case\":{name:?},\"ns_per_packet\":{},\"verdict\":{},\"len\":{},\"repeat\":{repeat}}}",
                r.duration_ns,
                r.retval,
                pkt.len()
            );
        }
        Ok(())
    })();
    let _ = std::fs::remove_dir_all(&dir);
    result
}

fn mac(s: &str) -> Result<[u8; 6], String> {
    let v: Vec<u8> = s
        .split(':')
        .map(|x| u8::from_str_radix(x, 16).map_err(|_| format!("bad MAC {s}")))
        .collect::<Result<_, _>>()?;
    v.try_into().map_err(|_| format!("bad MAC {s}"))
}

fn gen(args: &[String]) -> R {
    let dev = need(args, "--dev");
    let ifindex = ringx_xdp::sys::ifindex(&dev).ok_or(format!("no device {dev}"))?;
    let src: IpAddr = need(args, "--src").parse()?;
    let dst: IpAddr = need(args, "--dst").parse()?;
    let dst_mac = mac(&need(args, "--dst-mac"))?;
    let secs: f64 = need(args, "--seconds").parse()?;
    let mut pkt = PacketBuilder::udp(SocketAddr::new(src, 12345), SocketAddr::new(dst, 9))
        .payload(&[0u8; 18]) // 64-byte frames (without FCS)
        .macs([0x02, 0, 0, 0, 0, 0x10], dst_mac)
        .build();
    // --kind short: the same frame cut inside its IPv4 header (the filter drops it as
    // malformed before any map lookup).
    if arg(args, "--kind").as_deref() == Some("short") {
        pkt.truncate(14 + 10);
    }
    let mut progs = BenchProgs::load(ifindex)?;
    let chunk = 100_000;
    let start = Instant::now();
    let mut sent: u64 = 0;
    while start.elapsed() < Duration::from_secs_f64(secs) {
        progs.generate(&pkt, chunk, 64)?;
        sent += chunk as u64;
    }
    let el = start.elapsed().as_secs_f64();
    println!(
        "{{\"sent\":{sent},\"seconds\":{el:.4},\"pps\":{:.0},\"frame_len\":{}}}",
        sent as f64 / el,
        pkt.len()
    );
    Ok(())
}

fn hold(args: &[String]) -> R {
    let dev = need(args, "--dev");
    let prog = need(args, "--prog");
    let secs: f64 = need(args, "--seconds").parse()?;
    let mut progs = BenchProgs::load(0)?;
    progs.attach(&prog, &dev, Mode::Native)?;
    println!("{{\"attached\":{prog:?},\"dev\":{dev:?}}}");
    std::thread::sleep(Duration::from_secs_f64(secs));
    Ok(())
}
