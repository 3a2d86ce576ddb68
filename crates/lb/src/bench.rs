//! The programs of `make bench-lb` (bpf/lb_bench.bpf.c): the floor the forwarding path is
//! measured against, the flood's generator, the `repeat` harness, and the veth bed's limit.

use std::net::Ipv4Addr;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd};
use std::path::Path;

use ringx_xdp::sys::{self, MapFd, TestRun};
use ringx_xdp::{attach_program, Attachment, Error, Mode, Result};

use crate::loader::Loaded;

static BENCH_OBJ: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/lb_bench.o"));

/// The benchmark's floor: swap MACs, XDP_TX (bpf/lb_bench.bpf.c).
pub struct Floor {
    prog: Loaded,
}

impl Floor {
    pub fn load() -> Result<Floor> {
        let mut loader = ringx_xdp::loader()?;
        loader.btf(None);
        Ok(Floor {
            prog: Loaded::load(BENCH_OBJ, "lb_floor_tx", loader)?,
        })
    }

    pub fn test_run(&self, packet: &[u8], repeat: u32) -> Result<TestRun> {
        self.prog.test_run(packet, repeat)
    }

    pub fn prog_fd(&self) -> Result<BorrowedFd<'_>> {
        self.prog.fd()
    }

    /// Attaches it to `dev` through a link pinned at `pin` (for the flood benchmark's floor).
    pub fn attach(&mut self, dev: &str, pin: &Path) -> Result<Attachment> {
        attach_program(self.prog.xdp()?, pin, dev, Mode::Native)
    }
}

/// The flood's generator (bpf/lb_bench.bpf.c `lb_gen`): sends a 64-byte frame out of a
/// device with live frames, rewriting it whole on every run.
pub struct Generator {
    prog: Loaded,
    frame: [u8; 64],
}

impl Generator {
    pub fn load(ifindex: u32, frame: &[u8]) -> Result<Generator> {
        let frame: [u8; 64] = frame
            .try_into()
            .map_err(|_| Error::Invalid(format!("a 64-byte frame, not {}", frame.len())))?;
        let words: [u64; 8] = std::array::from_fn(|i| {
            u64::from_ne_bytes(frame[8 * i..8 * i + 8].try_into().unwrap())
        });
        let mut loader = ringx_xdp::loader()?;
        loader
            .btf(None)
            .set_global("lbg_frame", &words, true)
            .set_global("lbg_ifindex", &ifindex, true);
        Ok(Generator {
            prog: Loaded::load(BENCH_OBJ, "lb_gen", loader)?,
            frame,
        })
    }

    /// Sends `count` frames in batches of `batch`, on the calling CPU.
    pub fn send(&self, count: u32, batch: u32) -> Result<()> {
        sys::prog_test_run(
            self.prog.fd()?,
            &self.frame,
            count,
            sys::BPF_F_TEST_XDP_LIVE_FRAMES,
            batch,
        )
        .map(drop)
        .map_err(|e| Error::io("BPF_PROG_RUN (live frames)", e))
    }
}

/// The `repeat` harness (bpf/lb_bench.bpf.c `lb_wrap`): rewrites a 64-byte frame on every
/// run of a live-frame BPF_PROG_TEST_RUN and tail-calls the program measured.
pub struct Wrapped {
    prog: Loaded,
    frame: [u8; 64],
}

impl Wrapped {
    /// Wraps the program `target` (an XDP program's descriptor); with `vary`, every run is a
    /// new flow.
    pub fn load(target: BorrowedFd<'_>, frame: &[u8], vary: bool) -> Result<Wrapped> {
        let frame: [u8; 64] = frame
            .try_into()
            .map_err(|_| Error::Invalid(format!("a 64-byte frame, not {}", frame.len())))?;
        let words: [u64; 8] = std::array::from_fn(|i| {
            u64::from_ne_bytes(frame[8 * i..8 * i + 8].try_into().unwrap())
        });
        let vary = u32::from(vary);
        let mut loader = ringx_xdp::loader()?;
        loader
            .btf(None)
            .set_global("lbg_frame", &words, true)
            .set_global("lbw_vary", &vary, true);
        let prog = Loaded::load(BENCH_OBJ, "lb_wrap", loader)?;
        let next = prog
            .ebpf
            .map("lbw_next")
            .ok_or_else(|| Error::Load("no map lbw_next".into()))?;
        let fd = match next {
            aya::maps::Map::ProgramArray(m) => m.fd().as_fd().try_clone_to_owned(),
            _ => return Err(Error::Load("lbw_next is not a program array".into())),
        }
        .map_err(|e| Error::io("dup lbw_next", e))?;
        let next = MapFd::new(fd).map_err(|e| Error::io("lbw_next", e))?;
        let t = target.as_raw_fd() as u32;
        next.update(&0u32.to_ne_bytes(), &t.to_ne_bytes(), sys::BPF_ANY)
            .map_err(|e| Error::io("set lbw_next", e))?;
        Ok(Wrapped { prog, frame })
    }

    /// `repeat` runs with live frames; the kernel's mean ns per run.
    pub fn run(&self, repeat: u32) -> Result<u32> {
        sys::prog_test_run(
            self.prog.fd()?,
            &self.frame,
            repeat,
            sys::BPF_F_TEST_XDP_LIVE_FRAMES,
            0,
        )
        .map(|r| r.duration_ns)
        .map_err(|e| Error::io("BPF_PROG_TEST_RUN (live frames)", e))
    }
}

/// The veth bed's limit (bpf/lb_bench.bpf.c `lb_limit`): every IPv4 packet to one address
/// GUE-encapsulated under a fixed outer header to one backend, XDP_TX; forwarding without
/// balancing.
pub struct Limit {
    prog: Loaded,
}

/// The fixed outer headers of [`Limit`].
#[derive(Clone, Copy, Debug)]
pub struct LimitHeader {
    pub vip: Ipv4Addr,
    pub src: Ipv4Addr,
    pub backend: Ipv4Addr,
    pub src_mac: [u8; 6],
    pub dst_mac: [u8; 6],
    pub gue_port: u16,
}

impl Limit {
    pub fn load(h: &LimitHeader) -> Result<Limit> {
        let mut b = Vec::with_capacity(42);
        b.extend_from_slice(&h.dst_mac);
        b.extend_from_slice(&h.src_mac);
        b.extend_from_slice(&[0x08, 0x00]);
        // IPv4: no length or checksum yet (the program writes them), DF, TTL 64, UDP.
        b.extend_from_slice(&[0x45, 0, 0, 0, 0, 0, 0x40, 0, 64, 17, 0, 0]);
        b.extend_from_slice(&h.src.octets());
        b.extend_from_slice(&h.backend.octets());
        b.extend_from_slice(&0xc000u16.to_be_bytes());
        b.extend_from_slice(&h.gue_port.to_be_bytes());
        b.extend_from_slice(&[0, 0, 0, 0]);
        let words: [u16; 21] =
            std::array::from_fn(|i| u16::from_ne_bytes([b[2 * i], b[2 * i + 1]]));
        let vip = u32::from_ne_bytes(h.vip.octets());
        let mut loader = ringx_xdp::loader()?;
        loader
            .btf(None)
            .set_global("lbl_hdr", &words, true)
            .set_global("lbl_vip", &vip, true);
        Ok(Limit {
            prog: Loaded::load(BENCH_OBJ, "lb_limit", loader)?,
        })
    }

    pub fn test_run(&self, packet: &[u8], repeat: u32) -> Result<TestRun> {
        self.prog.test_run(packet, repeat)
    }

    /// Attaches it to `dev` (native) through a link pinned at `pin`.
    pub fn attach(&mut self, dev: &str, pin: &Path) -> Result<Attachment> {
        attach_program(self.prog.xdp()?, pin, dev, Mode::Native)
    }
}
