//! The passive side: `SO_REUSEPORT` TCP listeners of one address become one steered group,
//! and each listener is given the CPU of the thread that waits on it.
//!
//! * `listen` on a reuseport TCP socket: the group of its address is found (or created) in
//!   the tree's [`crate::registry`], and ringx's CPU steering program
//!   (`ringx_steer::reuseport`, the one `[steering] listen = "cpu"` attaches) is attached to
//!   the group. Its CPU → listener map starts empty, so until a listener is claimed the
//!   kernel's hash decides, as it did without the library.
//! * A thread *claims* a listener when it starts waiting on it (`epoll_ctl(EPOLL_CTL_ADD)`,
//!   or a first `accept`/`accept4`): the listener goes into the slot of the one CPU the
//!   thread may run on. A thread allowed on several CPUs is pinned to a free one first when
//!   `RINGX_PRELOAD_PIN=1` (a CPU whose slot is empty, or the one this listener already
//!   holds), and otherwise leaves its listener to the kernel's hash. nginx with
//!   `worker_cpu_affinity auto` pins its workers before it adds its listeners to epoll.
//! * A listener is in one slot at most (the kernel refuses a second): a claim from another
//!   CPU moves it. Closing the last descriptor of a listener empties its slot (the kernel
//!   does it), and that CPU's connections go to the kernel's hash again.

use std::os::fd::BorrowedFd;

use ringx_steer::reuseport::CpuSteering;

use crate::fdstate::{self, FdState};
use crate::lock::SpinLock;
use crate::log::Once;
use crate::registry::{self, AddrKey, Found, GROUPS};
use crate::sock;
use crate::stats::{self, Counter};

/// This process's handles on the tree's groups, at the registry's indexes.
pub struct Group {
    key: AddrKey,
    steering: CpuSteering,
}

pub static GROUPS_LOCAL: SpinLock<[Option<Group>; GROUPS]> =
    SpinLock::new([const { None }; GROUPS]);

static ATTACHED: [Once; GROUPS] = [const { Once::new() }; GROUPS];
static NO_GROUP: Once = Once::new();
static NO_ATTACH: Once = Once::new();
static UNPINNED: Once = Once::new();
static CLAIM_FAILED: Once = Once::new();
static ALL_TAKEN: Once = Once::new();

/// Upper bound on the CPUs looked at in a claim (the size of a `cpu_set_t`).
const CPUS_MAX: usize = libc::CPU_SETSIZE as usize;

/// After a successful `listen(fd)`: steers `fd`'s group if it is a reuseport TCP listener.
pub fn on_listen(fd: libc::c_int) {
    if sock::opt_int(fd, libc::SOL_SOCKET, libc::SO_REUSEPORT) != Some(1) || !sock::is_tcp(fd) {
        return;
    }
    let Some(addr) = sock::local_addr(fd) else {
        return;
    };
    if fd < 0 || fd as usize >= fdstate::MAX_FDS {
        stats::add(Counter::FdTooHigh);
        return;
    }
    let key = AddrKey::of(addr);
    let mut local = GROUPS_LOCAL.lock();
    let index = match local
        .iter()
        .position(|g| g.as_ref().is_some_and(|g| g.key == key))
    {
        Some(i) => i,
        None => match open_group(key) {
            Ok((i, steering)) => {
                local[i] = Some(Group { key, steering });
                i
            }
            Err(e) => {
                NO_GROUP.emit(format_args!(
                    "listeners on {addr} keep the kernel's reuseport hash: {e}"
                ));
                return;
            }
        },
    };
    let Some(g) = local[index].as_ref() else {
        return;
    };
    // SAFETY: `fd` is the listener the program just listened on, open for this call.
    let borrowed = unsafe { BorrowedFd::borrow_raw(fd) };
    if let Err(e) = g.steering.attach_group(borrowed) {
        NO_ATTACH.emit(format_args!(
            "listeners on {addr} keep the kernel's reuseport hash: {e}"
        ));
        return;
    }
    fdstate::set(
        fd,
        FdState::Listener {
            group: index as u8,
            claimed: false,
        },
    );
    stats::add(Counter::ListenersSteered);
    ATTACHED[index].emit(format_args!(
        "new connections to {addr} are steered to the listener of the CPU that processed \
         their SYN (ringx's eBPF reuseport program; the kernel's hash for a CPU with none)"
    ));
}

/// The registry's group for `key`: opened by id when another process made it, else made.
fn open_group(key: AddrKey) -> Result<(usize, CpuSteering), String> {
    let reg = registry::Locked::lock().ok_or("the shared registry could not be mapped")?;
    match reg.find(key) {
        None => Err(format!("more than {GROUPS} listening addresses")),
        Some(Found::Known {
            index,
            prog_id,
            map_id,
        }) => CpuSteering::ebpf_by_ids(prog_id, map_id)
            .map(|s| (index, s))
            .map_err(|e| e.to_string()),
        Some(Found::New { index }) => {
            let s = CpuSteering::ebpf_detached().map_err(|e| e.to_string())?;
            let (prog_id, map_id) = s.ids().ok_or("the steering program has no id")?;
            reg.record(index, key, prog_id, map_id);
            Ok((index, s))
        }
    }
}

/// The thread is about to wait on listener `fd` of group `group`: give it the thread's CPU.
pub fn claim(fd: libc::c_int, group: u8, pin: bool) {
    fdstate::set(
        fd,
        FdState::Listener {
            group,
            claimed: true,
        },
    );
    let local = GROUPS_LOCAL.lock();
    let Some(g) = local.get(usize::from(group)).and_then(Option::as_ref) else {
        return;
    };
    let Some(cookie) = sock::cookie(fd) else {
        return;
    };
    // SAFETY: `fd` is the program's listener, open for the duration of its call.
    let borrowed = unsafe { BorrowedFd::borrow_raw(fd) };
    let cpus = g.steering.cpus().min(CPUS_MAX);
    let allowed = sock::thread_cpus();
    let mut held = None;
    for cpu in 0..cpus {
        if g.steering.cookie_at(cpu).ok().flatten() == Some(cookie) {
            held = Some(cpu);
            break;
        }
    }
    let mut mine = (0..cpus).filter(|&c| sock::cpu_in(&allowed, c));
    let result = match (mine.next(), mine.next()) {
        (Some(cpu), None) => {
            if held == Some(cpu) {
                Ok(true)
            } else {
                if let Some(old) = held {
                    let _ = g.steering.clear(old);
                }
                g.steering.set_fd(cpu, borrowed).map(|()| true)
            }
        }
        (None, _) => Ok(false),
        (Some(_), Some(_)) if pin => pin_to_free(g, borrowed, held, &allowed, cpus),
        (Some(_), Some(_)) => {
            stats::add(Counter::ClaimsUnpinned);
            UNPINNED.emit(format_args!(
                "a thread that may run on several CPUs waits on a steered listener: it is left \
                 to the kernel's hash (pin the thread, or run with --pin)"
            ));
            return;
        }
    };
    match result {
        Ok(true) => stats::add(Counter::ListenerClaims),
        Ok(false) => {
            stats::add(Counter::ClaimsUnpinned);
            ALL_TAKEN.emit(format_args!(
                "every CPU this thread may use already has a listener: this one is left to \
                 the kernel's hash"
            ));
        }
        Err(e) => {
            stats::add(Counter::ClaimErrors);
            CLAIM_FAILED.emit(format_args!("a listener keeps the kernel's hash: {e}"));
        }
    }
}

/// Pins the thread to the CPU whose slot the listener holds, else to the first free one
/// (the kernel arbitrates between processes choosing at once); Ok(false): none is free.
fn pin_to_free(
    g: &Group,
    fd: BorrowedFd<'_>,
    held: Option<usize>,
    allowed: &libc::cpu_set_t,
    cpus: usize,
) -> std::io::Result<bool> {
    let chosen = match held.filter(|&c| sock::cpu_in(allowed, c)) {
        Some(c) => Some(c),
        None => {
            // A listener holds one slot at most: leave the old one (on a CPU this thread
            // may not use) first.
            if let Some(old) = held {
                let _ = g.steering.clear(old);
            }
            let mut found = None;
            for cpu in (0..cpus).filter(|&c| sock::cpu_in(allowed, c)) {
                if g.steering.set_fd_if_empty(cpu, fd)? {
                    found = Some(cpu);
                    break;
                }
            }
            found
        }
    };
    let Some(cpu) = chosen else {
        return Ok(false);
    };
    if sock::pin_thread(cpu) {
        stats::add(Counter::ThreadsPinned);
    }
    Ok(true)
}
