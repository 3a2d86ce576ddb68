//! What the two reuseport programs share (the TCP listeners' steering by CPU in
//! [`crate::reuseport`], QUIC's by connection ID in [`crate::quic`]): the eBPF instruction
//! encoding they are hand-assembled in, with labels for jumps; the helpers they call;
//! attaching a program to a socket's reuseport group; and errors that say what to grant.

use std::collections::HashMap;
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, RawFd};

use ringx_xdp::sys::Insn;

/// `SO_ATTACH_REUSEPORT_EBPF`.
pub const SO_ATTACH_REUSEPORT_EBPF: libc::c_int = 52;
/// `SO_DETACH_REUSEPORT_BPF`.
pub const SO_DETACH_REUSEPORT_BPF: libc::c_int = 68;

pub const R0: u8 = 0;
pub const R1: u8 = 1;
pub const R2: u8 = 2;
pub const R3: u8 = 3;
pub const R4: u8 = 4;
pub const R6: u8 = 6;
pub const R7: u8 = 7;
pub const R10: u8 = 10;
/// BPF_ALU64 | BPF_MOV | BPF_X
pub const MOV64_REG: u8 = 0xbf;
/// BPF_ALU64 | BPF_MOV | BPF_K
pub const MOV64_IMM: u8 = 0xb7;
/// BPF_ALU64 | BPF_ADD | BPF_K
pub const ADD64_IMM: u8 = 0x07;
/// BPF_ALU64 | BPF_AND | BPF_K
pub const AND64_IMM: u8 = 0x57;
/// BPF_ALU64 | BPF_OR | BPF_X
pub const OR64_REG: u8 = 0x4f;
/// BPF_ALU64 | BPF_MOD | BPF_X
pub const MOD64_REG: u8 = 0x9f;
/// BPF_ALU64 | BPF_LSH | BPF_K
pub const LSH64_IMM: u8 = 0x67;
/// BPF_ALU64 | BPF_RSH | BPF_K
pub const RSH64_IMM: u8 = 0x77;
/// BPF_LDX | BPF_MEM | BPF_B
pub const LDX_B: u8 = 0x71;
/// BPF_LDX | BPF_MEM | BPF_W
pub const LDX_W: u8 = 0x61;
/// BPF_STX | BPF_MEM | BPF_W
pub const STX_W: u8 = 0x63;
/// BPF_ST | BPF_MEM | BPF_W
pub const ST_W: u8 = 0x62;
/// BPF_LD | BPF_DW | BPF_IMM (two slots)
pub const LD_IMM64: u8 = 0x18;
/// BPF_JMP | BPF_JA
pub const JA: u8 = 0x05;
/// BPF_JMP | BPF_JEQ | BPF_K
pub const JEQ_IMM: u8 = 0x15;
/// BPF_JMP | BPF_JNE | BPF_K
pub const JNE_IMM: u8 = 0x55;
/// BPF_JMP | BPF_CALL
pub const CALL: u8 = 0x85;
/// BPF_JMP | BPF_EXIT
pub const EXIT: u8 = 0x95;
/// `src_reg` of LD_IMM64 that makes `imm` a map descriptor.
pub const BPF_PSEUDO_MAP_FD: u8 = 1;
pub const FN_MAP_LOOKUP_ELEM: i32 = 1;
pub const FN_GET_SMP_PROCESSOR_ID: i32 = 8;
pub const FN_SKB_LOAD_BYTES: i32 = 26;
pub const FN_SK_SELECT_REUSEPORT: i32 = 82;
pub const SK_PASS: i32 = 1;

pub const fn insn(code: u8, dst: u8, src: u8, off: i16, imm: i32) -> Insn {
    Insn::new(code, dst, src, off, imm)
}

/// `reg = map`: LD_IMM64 of a map descriptor (two slots).
pub const fn ld_map(reg: u8, map_fd: RawFd) -> [Insn; 2] {
    [
        insn(LD_IMM64, reg, BPF_PSEUDO_MAP_FD, 0, map_fd),
        insn(0, 0, 0, 0, 0),
    ]
}

/// One step of a program: an instruction, a jump (code, dst, imm) to a label, or a label.
pub enum Op {
    I(Insn),
    J(u8, u8, i32, &'static str),
    L(&'static str),
}

/// Resolves the labels: a jump's `off` counts the instructions after it.
pub fn assemble(ops: &[Op]) -> Vec<Insn> {
    let mut at = HashMap::new();
    let mut n = 0i32;
    for op in ops {
        match op {
            Op::L(l) => {
                at.insert(*l, n);
            }
            _ => n += 1,
        }
    }
    let mut out = Vec::new();
    for op in ops {
        match op {
            Op::I(i) => out.push(*i),
            Op::J(code, dst, imm, l) => {
                let off = at[l] - (out.len() as i32 + 1);
                out.push(insn(*code, *dst, 0, off as i16, *imm));
            }
            Op::L(_) => {}
        }
    }
    out
}

/// Attaches the loaded program `prog` to the reuseport group of `sock` (any member).
pub fn attach_group(sock: BorrowedFd<'_>, prog: BorrowedFd<'_>) -> io::Result<()> {
    setsockopt_int(sock.as_raw_fd(), SO_ATTACH_REUSEPORT_EBPF, prog.as_raw_fd())
        .map_err(|e| ctx("setsockopt(SO_ATTACH_REUSEPORT_EBPF)", e))
}

/// `e`, from `what`, with what the operator may have to grant.
pub fn ctx(what: &str, e: io::Error) -> io::Error {
    let hint = match e.raw_os_error() {
        Some(libc::EPERM) | Some(libc::EACCES) => {
            " (needs root, or CAP_BPF and CAP_NET_ADMIN, and no seccomp filter on bpf(2))"
        }
        Some(libc::ENOSYS) => " (the kernel has no bpf(2), or a seccomp filter hides it)",
        _ => "",
    };
    io::Error::new(e.kind(), format!("{what}: {e}{hint}"))
}

/// A `SOL_SOCKET` option of type int.
pub fn setsockopt_int(fd: RawFd, opt: libc::c_int, v: libc::c_int) -> io::Result<()> {
    // SAFETY: setsockopt reads one live c_int from the pointer given with its size.
    let r = unsafe {
        libc::setsockopt(
            fd,
            libc::SOL_SOCKET,
            opt,
            (&v as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if r != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jumps_count_the_instructions_after_them() {
        let p = assemble(&[
            Op::J(JA, 0, 0, "end"),
            Op::I(insn(MOV64_IMM, R0, 0, 0, 1)),
            Op::L("back"),
            Op::I(insn(MOV64_IMM, R0, 0, 0, 2)),
            Op::J(JEQ_IMM, R0, 2, "back"),
            Op::L("end"),
            Op::I(insn(EXIT, 0, 0, 0, 0)),
        ]);
        assert_eq!(p.len(), 5);
        assert_eq!(p[0].off, 3, "over three instructions to the exit");
        assert_eq!(p[3].off, -2, "back to the second move");
        assert_eq!((p[3].code, p[3].imm), (JEQ_IMM, 2));
    }
}
