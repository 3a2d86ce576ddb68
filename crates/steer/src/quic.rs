//! QUIC packets to the zone that owns their connection, wherever they come from.
//!
//! A QUIC connection outlives its 4-tuple: a client behind a NAT that rebinds, or one that
//! moves from Wi-Fi to a mobile network, keeps its connection under a new address or port.
//! The kernel's reuseport hash would then hand its packets to another zone's socket, one that
//! has no state for the connection (it answers with a stateless reset, and the connection is
//! lost). The connection IDs ringx issues name the zone that owns the connection
//! (`ringx_quic::cid`), so this `SK_REUSEPORT` program reads the zone from the packet's
//! destination connection ID and selects that zone's socket, as nginx's `quic_bpf` and
//! Cloudflare's udpgrm do:
//!
//! * a short-header packet (1-RTT: every packet once the handshake is done) carries the
//!   ID right after its first byte, without a length: one of ours when its first byte names
//!   our layout's config rotation;
//! * a long-header packet (Initial, Handshake, 0-RTT) carries the ID's length: one of ours
//!   when it has our length and rotation (every long-header packet after the server's first
//!   answer);
//! * anything else (a client's first Initial, with an ID the client made up; a packet too
//!   short to hold one) takes the kernel's 4-tuple hash, which keeps a client's first flight
//!   together on one zone, and that zone then issues the connection's IDs. A zone whose socket
//!   is gone (closed sockets leave the array) also leaves its packets to the hash.
//!
//! The map is keyed by zone. The program is hand-assembled, as the TCP one is
//! ([`crate::reuseport`] says why), and reads the packet with `bpf_skb_load_bytes`, which
//! copies from the UDP header on (an `SK_REUSEPORT` program sees the skb there) into the
//! stack, where the verifier needs no packet-bounds proofs.

use std::io;
use std::net::UdpSocket;
use std::os::fd::{AsFd, AsRawFd, OwnedFd, RawFd};

use ringx_xdp::sys::{self, map_type, prog_type, Insn, MapFd, BPF_ANY};

/// `SO_ATTACH_REUSEPORT_EBPF`.
const SO_ATTACH_REUSEPORT_EBPF: libc::c_int = 52;

/// Where a connection ID names its zone, as `ringx_quic::cid` lays IDs out (passed in, so this
/// crate needs no QUIC implementation).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CidLayout {
    /// The length of every ID issued.
    pub len: u8,
    /// The config rotation codepoint: bits 7..5 of the ID's first byte.
    pub rotation: u8,
    /// The byte of the ID that holds the zone (after the first).
    pub zone_byte: u8,
}

/// Steering of one UDP reuseport group (the QUIC sockets of one address, one per zone) by the
/// zone its packets' connection IDs name.
#[derive(Debug)]
pub struct QuicSteering {
    map: MapFd,
    /// Kept so the program can be attached to a group again.
    prog: OwnedFd,
    zones: u32,
}

impl QuicSteering {
    /// Loads the program for `layout`, fills the zone → socket array with `sockets`
    /// (`sockets[z]` is zone z's, every one bound to the same address with `SO_REUSEPORT`)
    /// and attaches it to their group.
    pub fn attach(sockets: &[&UdpSocket], layout: CidLayout) -> io::Result<QuicSteering> {
        let Some(first) = sockets.first() else {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, "no sockets"));
        };
        if usize::from(layout.zone_byte) >= usize::from(layout.len) || layout.rotation > 7 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("{layout:?}: the zone byte lies outside the ID"),
            ));
        }
        let zones = u32::try_from(sockets.len())
            .ok()
            .filter(|&n| n <= 256)
            .ok_or_else(|| {
                io::Error::new(
                    io::ErrorKind::InvalidInput,
                    "more zones than an ID byte holds",
                )
            })?;
        let map = sys::map_create(
            map_type::REUSEPORT_SOCKARRAY,
            4,
            8,
            zones,
            "ringx_quic_zone",
        )
        .map_err(|e| ctx("bpf(BPF_MAP_CREATE, REUSEPORT_SOCKARRAY)", e))?;
        let map = MapFd::new(map).map_err(|e| ctx("bpf(BPF_OBJ_GET_INFO_BY_FD)", e))?;
        let prog = sys::prog_load(
            prog_type::SK_REUSEPORT,
            &program(map.as_fd().as_raw_fd(), layout),
            c"Apache-2.0",
            "ringx_quic_cid",
        )
        .map_err(|e| ctx("bpf(BPF_PROG_LOAD, SK_REUSEPORT)", e))?;
        let s = QuicSteering { map, prog, zones };
        for (z, sock) in sockets.iter().enumerate() {
            s.set(z, sock.as_fd())?;
        }
        let fd: libc::c_int = s.prog.as_raw_fd();
        // SAFETY: setsockopt reads one live c_int from the pointer given with its size.
        let r = unsafe {
            libc::setsockopt(
                first.as_raw_fd(),
                libc::SOL_SOCKET,
                SO_ATTACH_REUSEPORT_EBPF,
                (&fd as *const libc::c_int).cast(),
                std::mem::size_of::<libc::c_int>() as libc::socklen_t,
            )
        };
        if r != 0 {
            return Err(ctx(
                "setsockopt(SO_ATTACH_REUSEPORT_EBPF)",
                io::Error::last_os_error(),
            ));
        }
        Ok(s)
    }

    /// Makes `socket` zone `zone`'s (a zone that re-created its socket).
    pub fn set(&self, zone: usize, socket: std::os::fd::BorrowedFd<'_>) -> io::Result<()> {
        let key = u32::try_from(zone)
            .ok()
            .filter(|&k| k < self.zones)
            .ok_or_else(|| {
                io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!("zone {zone} is beyond the steering map"),
                )
            })?;
        // A socket descriptor in (the kernel stores the socket, not the number).
        let fd = socket.as_raw_fd() as u64;
        self.map
            .update(&key.to_ne_bytes(), &fd.to_ne_bytes(), BPF_ANY)
            .map_err(|e| ctx(&format!("bpf(BPF_MAP_UPDATE_ELEM) for zone {zone}"), e))
    }
}

/// Steers the QUIC sockets of every address: `zones[z]` holds zone z's sockets, the same
/// addresses in the same order in every zone. Logs what it did per address; an address whose
/// steering failed keeps the kernel's hash (and a migrating client may lose its connection
/// there, which the log says). With one zone there is nothing to steer.
pub fn steer_zones(zones: &[Vec<&UdpSocket>], layout: CidLayout) -> Vec<QuicSteering> {
    let n = zones.first().map_or(0, Vec::len);
    if zones.len() < 2 {
        return Vec::new();
    }
    let mut out = Vec::new();
    for a in 0..n {
        let group: Vec<&UdpSocket> = zones.iter().filter_map(|z| z.get(a).copied()).collect();
        let addr = group
            .first()
            .and_then(|s| s.local_addr().ok())
            .map_or_else(|| format!("address #{a}"), |x| x.to_string());
        match QuicSteering::attach(&group, layout) {
            Ok(s) => {
                tracing::info!(
                    "QUIC packets on {addr} are steered to the zone their connection ID names \
                     (eBPF reuseport program)"
                );
                out.push(s);
            }
            Err(e) => tracing::warn!(
                "QUIC packets on {addr} take the kernel's reuseport hash: steering by \
                 connection ID failed: {e}; a client that changes address or port may reach \
                 a zone without its connection and lose it"
            ),
        }
    }
    out
}

fn ctx(what: &str, e: io::Error) -> io::Error {
    let hint = match e.raw_os_error() {
        Some(libc::EPERM) | Some(libc::EACCES) => {
            " (needs root, or CAP_BPF and CAP_NET_ADMIN, and no seccomp filter on bpf(2))"
        }
        _ => "",
    };
    io::Error::new(e.kind(), format!("{what}: {e}{hint}"))
}

const fn insn(code: u8, dst: u8, src: u8, off: i16, imm: i32) -> Insn {
    Insn::new(code, dst, src, off, imm)
}

const R0: u8 = 0;
const R1: u8 = 1;
const R2: u8 = 2;
const R3: u8 = 3;
const R4: u8 = 4;
const R6: u8 = 6;
const R10: u8 = 10;
/// BPF_ALU64 | BPF_MOV | BPF_X
const MOV64_REG: u8 = 0xbf;
/// BPF_ALU64 | BPF_MOV | BPF_K
const MOV64_IMM: u8 = 0xb7;
/// BPF_ALU64 | BPF_ADD | BPF_K
const ADD64_IMM: u8 = 0x07;
/// BPF_ALU64 | BPF_AND | BPF_K
const AND64_IMM: u8 = 0x57;
/// BPF_ALU64 | BPF_RSH | BPF_K
const RSH64_IMM: u8 = 0x77;
/// BPF_LDX | BPF_MEM | BPF_B
const LDX_B: u8 = 0x71;
/// BPF_STX | BPF_MEM | BPF_W
const STX_W: u8 = 0x63;
/// BPF_LD | BPF_DW | BPF_IMM (two slots)
const LD_IMM64: u8 = 0x18;
/// BPF_JMP | BPF_JA
const JA: u8 = 0x05;
/// BPF_JMP | BPF_JEQ | BPF_K
const JEQ_IMM: u8 = 0x15;
/// BPF_JMP | BPF_JNE | BPF_K
const JNE_IMM: u8 = 0x55;
/// BPF_JMP | BPF_CALL
const CALL: u8 = 0x85;
/// BPF_JMP | BPF_EXIT
const EXIT: u8 = 0x95;
/// `src_reg` of LD_IMM64 that makes `imm` a map descriptor.
const BPF_PSEUDO_MAP_FD: u8 = 1;
const FN_SKB_LOAD_BYTES: i32 = 26;
const FN_SK_SELECT_REUSEPORT: i32 = 82;
const SK_PASS: i32 = 1;
/// The UDP header, before the QUIC packet.
const UDP_HEADER: i32 = 8;
/// What is read of the packet: the first byte, and for a long header the version (4 bytes),
/// the ID's length and the ID's first bytes up to the zone's.
const fn read_len(layout: CidLayout) -> i32 {
    6 + layout.zone_byte as i32 + 1
}
/// The stack slot the packet's bytes are copied to (below the key's 4 bytes).
const BUF: i16 = -48;

/// The program, for the zone → socket array `map_fd` (instruction numbers on the left; a
/// jump's `off` counts the instructions after it):
///
/// ```text
///  0 r6 = r1                          ; ctx (struct sk_reuseport_md *)
///  1 r2 = 8                           ; from the UDP payload on
///  2 r3 = r10 - 48                    ; buf (two instructions)
///  4 r4 = 7 + zone_byte               ; first byte, version, ID length, ID to its zone byte
///  5 r0 = bpf_skb_load_bytes(ctx, 8, buf, r4)
///  6 if r0 != 0 goto pass             ; too short to be one of ours
///  7 r1 = buf[0] & 0x80               ; (two instructions)
///  9 if r1 == 0 goto short
/// 10 r1 = buf[5]                      ; long header: the ID's length
/// 11 if r1 != LEN goto pass
/// 12 r2 = buf[6]                      ; the ID's first byte
/// 13 r3 = buf[6 + zone_byte]
/// 14 goto check
/// short:
/// 15 r2 = buf[1]
/// 16 r3 = buf[1 + zone_byte]
/// check:
/// 17 r2 >>= 5
/// 18 if r2 != ROTATION goto pass      ; not an ID of this layout
/// 19 *(u32 *)(r10 - 4) = r3           ; key = the zone
/// 20 r1 = r6
/// 21 r2 = map                         ; (two slots)
/// 23 r3 = r10 - 4                     ; (two instructions)
/// 25 r4 = 0
/// 26 bpf_sk_select_reuseport(ctx, map, &key, 0)   ; fails if the zone has no socket
/// pass:
/// 27 return SK_PASS                   ; no selection made: the kernel's hash decides
/// ```
fn program(map_fd: RawFd, layout: CidLayout) -> Vec<Insn> {
    let b = |i: i16| BUF + i;
    let z = i16::from(layout.zone_byte);
    vec![
        /* 0 */ insn(MOV64_REG, R6, R1, 0, 0),
        /* 1 */ insn(MOV64_IMM, R2, 0, 0, UDP_HEADER),
        /* 2 */ insn(MOV64_REG, R3, R10, 0, 0),
        /* 3 */ insn(ADD64_IMM, R3, 0, 0, BUF as i32),
        /* 4 */ insn(MOV64_IMM, R4, 0, 0, read_len(layout)),
        /* 5 */ insn(CALL, 0, 0, 0, FN_SKB_LOAD_BYTES),
        /* 6 */ insn(JNE_IMM, R0, 0, 20, 0),
        /* 7 */ insn(LDX_B, R1, R10, b(0), 0),
        /* 8 */ insn(AND64_IMM, R1, 0, 0, 0x80),
        /* 9 */ insn(JEQ_IMM, R1, 0, 5, 0),
        /* 10 */ insn(LDX_B, R1, R10, b(5), 0),
        /* 11 */ insn(JNE_IMM, R1, 0, 15, i32::from(layout.len)),
        /* 12 */ insn(LDX_B, R2, R10, b(6), 0),
        /* 13 */ insn(LDX_B, R3, R10, b(6 + z), 0),
        /* 14 */ insn(JA, 0, 0, 2, 0),
        /* 15 */ insn(LDX_B, R2, R10, b(1), 0),
        /* 16 */ insn(LDX_B, R3, R10, b(1 + z), 0),
        /* 17 */ insn(RSH64_IMM, R2, 0, 0, 5),
        /* 18 */ insn(JNE_IMM, R2, 0, 8, i32::from(layout.rotation)),
        /* 19 */ insn(STX_W, R10, R3, -4, 0),
        /* 20 */ insn(MOV64_REG, R1, R6, 0, 0),
        /* 21 */ insn(LD_IMM64, R2, BPF_PSEUDO_MAP_FD, 0, map_fd),
        /* 22 */ insn(0, 0, 0, 0, 0),
        /* 23 */ insn(MOV64_REG, R3, R10, 0, 0),
        /* 24 */ insn(ADD64_IMM, R3, 0, 0, -4),
        /* 25 */ insn(MOV64_IMM, R4, 0, 0, 0),
        /* 26 */ insn(CALL, 0, 0, 0, FN_SK_SELECT_REUSEPORT),
        /* 27 */ insn(MOV64_IMM, R0, 0, 0, SK_PASS),
        /* 28 */ insn(EXIT, 0, 0, 0, 0),
    ]
}

#[cfg(test)]
#[path = "quic_tests.rs"]
mod tests;
