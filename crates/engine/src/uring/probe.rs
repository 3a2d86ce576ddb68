//! Can this process use io_uring the way the driver needs? Answered once at start-up, so a
//! refusal (seccomp, `kernel.io_uring_disabled`, memlock, an old kernel) becomes one clear log
//! line and the epoll driver, not a failure deep inside a zone.

use io_uring::{opcode, IoUring, Probe};

/// Why io_uring cannot be used, in words for the operator; `Ok` if it can.
pub fn check() -> Result<(), String> {
    let ring = match IoUring::new(8) {
        Ok(r) => r,
        Err(e) => {
            let why = match e.raw_os_error() {
                Some(libc::EPERM) | Some(libc::EACCES) => {
                    let sysctl = std::fs::read_to_string("/proc/sys/kernel/io_uring_disabled")
                        .map(|s| s.trim().to_string())
                        .unwrap_or_default();
                    if sysctl == "2" || sysctl == "1" {
                        format!("io_uring_setup refused ({e}); kernel.io_uring_disabled = {sysctl}")
                    } else {
                        format!("io_uring_setup refused ({e}); a seccomp filter or LSM policy forbids io_uring")
                    }
                }
                Some(libc::ENOSYS) => format!("io_uring_setup: {e}; the kernel has no io_uring"),
                Some(libc::ENOMEM) => {
                    format!("io_uring_setup: {e}; raise the locked-memory limit (ulimit -l)")
                }
                _ => format!("io_uring_setup: {e}"),
            };
            return Err(why);
        }
    };
    let mut probe = Probe::new();
    if let Err(e) = ring.submitter().register_probe(&mut probe) {
        return Err(format!("io_uring probe: {e}; the kernel is older than 5.6"));
    }
    let needed = [
        (opcode::AcceptMulti::CODE, "ACCEPT"),
        (opcode::RecvMulti::CODE, "RECV"),
        (opcode::Send::CODE, "SEND"),
        (opcode::Splice::CODE, "SPLICE"),
        (opcode::AsyncCancel2::CODE, "ASYNC_CANCEL"),
        (opcode::Close::CODE, "CLOSE"),
        (opcode::Shutdown::CODE, "SHUTDOWN"),
        (opcode::Read::CODE, "READ"),
    ];
    for (code, name) in needed {
        if !probe.is_supported(code) {
            return Err(format!("the kernel's io_uring lacks IORING_OP_{name}"));
        }
    }
    if let Err(e) = ring.submitter().register_files_sparse(4) {
        return Err(format!(
            "sparse registered files: {e}; the kernel is older than 5.19"
        ));
    }
    match super::bufring::BufRing::new(&ring, 0, 4, 64, true) {
        Ok(_b) => {
            let _ = ring.submitter().unregister_buf_ring(0);
        }
        Err(e) => {
            return Err(format!(
                "provided-buffer ring: {e}; the kernel is older than 5.19"
            ))
        }
    }
    Ok(())
}
