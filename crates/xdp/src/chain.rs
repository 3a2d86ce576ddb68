//! Several XDP programs on one device: a stage that passes a packet hands it to the next one
//! through a pinned one-slot program array (a tail call), the filter's `rx_chain` and the
//! load balancer's `lb_chain` (crate ringx-lb): filter -> balancer -> software steering ->
//! the stack. The slot is the whole protocol: putting a program in it replaces the stage that
//! was there in one map update, so no packet meets neither, and an empty slot makes the tail
//! call fall through (the packet passes).

use std::os::fd::{AsRawFd, BorrowedFd};
use std::path::{Path, PathBuf};

use crate::abi::map_names;
use crate::error::{Error, Result};
use crate::sys::{self, MapFd};

/// A pinned one-slot program array that one stage tail-calls.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ChainSlot {
    path: PathBuf,
}

impl ChainSlot {
    /// The filter's slot, pinned under its pin directory (a filter loaded with
    /// [`Settings::chain`](crate::Settings::chain)).
    pub fn filter(pin_dir: &Path) -> ChainSlot {
        ChainSlot::at(pin_dir.join(map_names::CHAIN))
    }

    /// The program array pinned at `path`.
    pub fn at(path: impl Into<PathBuf>) -> ChainSlot {
        ChainSlot { path: path.into() }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Puts `prog` (an XDP program) in the slot: from the next packet on, what the stage
    /// in front passes goes to it.
    pub fn set(&self, prog: BorrowedFd<'_>) -> Result<()> {
        let fd = prog.as_raw_fd() as u32;
        self.open()?
            .update(&0u32.to_ne_bytes(), &fd.to_ne_bytes(), sys::BPF_ANY)
            .map_err(|e| Error::io(format!("set the next stage in {}", self.path.display()), e))
    }

    /// Empties the slot (what the stage in front passes then passes); false when it was
    /// empty.
    pub fn clear(&self) -> Result<bool> {
        self.open()?.delete(&0u32.to_ne_bytes()).map_err(|e| {
            Error::io(
                format!("clear the next stage in {}", self.path.display()),
                e,
            )
        })
    }

    /// The id of the program in the slot, if any.
    pub fn prog_id(&self) -> Result<Option<u32>> {
        let mut id = [0u8; 4];
        let found = self
            .open()?
            .lookup(&0u32.to_ne_bytes(), &mut id)
            .map_err(|e| Error::io(format!("read the next stage in {}", self.path.display()), e))?;
        Ok(found.then(|| u32::from_ne_bytes(id)))
    }

    fn open(&self) -> Result<MapFd> {
        MapFd::open_pinned(&self.path).map_err(|e| match e.raw_os_error() {
            Some(libc::ENOENT) => Error::NotPinned {
                path: self.path.clone(),
            },
            _ => Error::io(format!("open {}", self.path.display()), e),
        })
    }
}
