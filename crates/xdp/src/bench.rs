//! Programs for measuring the filter (bench/xdp.py through `examples/xdp_bench.rs`): an
//! in-kernel traffic generator and the cheapest possible drop and pass, to compare with.

use std::os::fd::{AsFd, BorrowedFd};

use aya::programs::{Xdp, XdpFlags};
use aya::Ebpf;

use crate::error::{Error, Result};
use crate::loader::Mode;
use crate::sys;

static BENCH_OBJ: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/xdp_bench.o"));

/// `xdp_gen`, `xdp_drop`, `xdp_pass` and `xdp_touch_drop` from bpf/xdp_bench.bpf.c, loaded. Attachments live as
/// long as this value (they are not pinned).
pub struct BenchProgs {
    ebpf: Ebpf,
}

impl BenchProgs {
    /// Loads the programs; `xdp_gen` redirects to `gen_ifindex`.
    pub fn load(gen_ifindex: u32) -> Result<BenchProgs> {
        let mut ebpf = crate::loader()?
            .btf(None)
            .set_global("gen_ifindex", &gen_ifindex, true)
            .load(BENCH_OBJ)
            .map_err(|e| Error::from_aya("load the bench object", &e))?;
        for name in ["xdp_gen", "xdp_drop", "xdp_pass", "xdp_touch_drop"] {
            prog(&mut ebpf, name)?
                .load()
                .map_err(|e| Error::from_aya(&format!("load {name}"), &e))?;
        }
        Ok(BenchProgs { ebpf })
    }

    /// Attaches `name` (`xdp_drop`, `xdp_pass` or `xdp_touch_drop`) to `dev` until this value is dropped.
    pub fn attach(&mut self, name: &str, dev: &str, mode: Mode) -> Result<()> {
        let ifindex = sys::ifindex(dev).ok_or_else(|| Error::NoDevice(dev.to_string()))?;
        let flags = match mode {
            Mode::Native => XdpFlags::DRV_MODE,
            Mode::Generic => XdpFlags::SKB_MODE,
        };
        prog(&mut self.ebpf, name)?
            .attach_to_if_index(ifindex, flags)
            .map_err(|e| Error::from_aya(&format!("attach {name} to {dev}"), &e))?;
        Ok(())
    }

    /// Sends `count` copies of `packet` out of the generator's device (BPF_PROG_RUN with
    /// live frames, batches of `batch`), on the calling CPU.
    pub fn generate(&mut self, packet: &[u8], count: u32, batch: u32) -> Result<()> {
        let fd = self.fd("xdp_gen")?;
        sys::prog_test_run(fd, packet, count, sys::BPF_F_TEST_XDP_LIVE_FRAMES, batch)
            .map_err(|e| Error::io("BPF_PROG_RUN (live frames)", e))?;
        Ok(())
    }

    fn fd(&self, name: &str) -> Result<BorrowedFd<'_>> {
        let p: &Xdp = self
            .ebpf
            .program(name)
            .ok_or_else(|| Error::Load(format!("no program {name}")))?
            .try_into()
            .map_err(|e| Error::from_aya(name, &e))?;
        Ok(p.fd().map_err(|e| Error::from_aya(name, &e))?.as_fd())
    }
}

fn prog<'a>(ebpf: &'a mut Ebpf, name: &str) -> Result<&'a mut Xdp> {
    ebpf.program_mut(name)
        .ok_or_else(|| Error::Load(format!("no program {name} in the bench object")))?
        .try_into()
        .map_err(|e| Error::from_aya(name, &e))
}
