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
//!   short to hold one) goes to the current process's zone on the CPU that received it, as
//!   TCP connections are steered ([`crate::reuseport`]): with RSS every packet of a 4-tuple
//!   arrives on one CPU, so a client's first flight stays together, and the zone it reaches
//!   issues the connection's IDs, so that every later packet is processed on the CPU that
//!   received it. Where that CPU has no zone, a zone of the current process picked by the
//!   kernel's 4-tuple hash. So do packets for a zone whose socket is gone (closed sockets
//!   leave the array); with no current process configured the kernel's own choice stands.
//!
//! **Binary upgrade.** The new process binds its own sockets beside the old one's (the
//! group, and the program attached to it, stay), opens the old process's maps by id
//! ([`QuicSteering::take_over`]), puts its sockets under the other generation and makes
//! that generation current. The IDs carry the generation (`ringx_quic::cid`), so packets
//! of connections the old process still drains keep reaching it, and new connections go
//! to the new one.
//!
//! The socket array is keyed by generation × 256 + zone; an array holds at key 0 the
//! current generation's key base and its zone count, and at key 1 + c one more than the
//! zone on CPU c (0: none). The program is hand-assembled, as the TCP one is
//! ([`crate::reuseport`] says why), and reads the packet with `bpf_skb_load_bytes`, which
//! copies from the UDP header on (an `SK_REUSEPORT` program sees the skb there) into the
//! stack, where the verifier needs no packet-bounds proofs.

use std::io;
use std::net::UdpSocket;
use std::os::fd::{AsFd, AsRawFd, RawFd};

use ringx_xdp::sys::{self, map_type, prog_type, Insn, MapFd, BPF_ANY};

use crate::reuseport_prog::*;

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
    /// The bit of the ID's first byte that holds the process generation.
    pub epoch_bit: u8,
}

/// CPUs the current-generation array has a zone entry for (`CPU_SETSIZE`).
const MAX_CPUS: u32 = 1024;

/// What a process hands the one that replaces it: its maps, by id, and its generation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ids {
    pub sockets: u32,
    pub current: u32,
    pub epoch: u8,
}

impl std::fmt::Display for Ids {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}:{}", self.sockets, self.current, self.epoch)
    }
}

impl std::str::FromStr for Ids {
    type Err = ();
    fn from_str(s: &str) -> Result<Ids, ()> {
        let mut it = s.split(':').map(str::parse::<u32>);
        match (it.next(), it.next(), it.next(), it.next()) {
            (Some(Ok(sockets)), Some(Ok(current)), Some(Ok(e @ 0..=1)), None) => Ok(Ids {
                sockets,
                current,
                epoch: e as u8,
            }),
            _ => Err(()),
        }
    }
}

/// Steering of one UDP reuseport group (the QUIC sockets of one address, one per zone) by the
/// zone its packets' connection IDs name.
#[derive(Debug)]
pub struct QuicSteering {
    /// (generation × 256 + zone) → socket.
    sockets: MapFd,
    /// Key 0: the current generation's key base << 16 | its zone count; key 1 + c: 1 + the
    /// zone on CPU c (0: none).
    current: MapFd,
    /// This process's generation.
    epoch: u8,
}

impl QuicSteering {
    /// Loads the program for `layout`, fills the socket array with `sockets` (`sockets[z]`
    /// is zone z's, every one bound to the same address with `SO_REUSEPORT`, and pinned to
    /// CPU `cpus[z]` where given) under generation `epoch`, and attaches the program to their
    /// group.
    pub fn attach(
        sockets: &[&UdpSocket],
        cpus: &[usize],
        layout: CidLayout,
        epoch: u8,
    ) -> io::Result<Self> {
        let Some(first) = sockets.first() else {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, "no sockets"));
        };
        if usize::from(layout.zone_byte) >= usize::from(layout.len)
            || layout.rotation > 7
            || layout.epoch_bit.count_ones() != 1
            || layout.epoch_bit >= 0x20
        {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("{layout:?}: the zone byte lies outside the ID, or the bits overlap"),
            ));
        }
        let map = sys::map_create(map_type::REUSEPORT_SOCKARRAY, 4, 8, 512, "ringx_quic_zone")
            .map_err(|e| ctx("bpf(BPF_MAP_CREATE, REUSEPORT_SOCKARRAY)", e))?;
        let map = MapFd::new(map).map_err(|e| ctx("bpf(BPF_OBJ_GET_INFO_BY_FD)", e))?;
        let cur = sys::map_create(map_type::ARRAY, 4, 4, 1 + MAX_CPUS, "ringx_quic_cur")
            .map_err(|e| ctx("bpf(BPF_MAP_CREATE, ARRAY)", e))?;
        let cur = MapFd::new(cur).map_err(|e| ctx("bpf(BPF_OBJ_GET_INFO_BY_FD)", e))?;
        let prog = sys::prog_load(
            prog_type::SK_REUSEPORT,
            &program(map.as_fd().as_raw_fd(), cur.as_fd().as_raw_fd(), layout),
            c"Apache-2.0",
            "ringx_quic_cid",
        )
        .map_err(|e| ctx("bpf(BPF_PROG_LOAD, SK_REUSEPORT)", e))?;
        let s = QuicSteering {
            sockets: map,
            current: cur,
            epoch: epoch & 1,
        };
        s.fill(sockets, cpus)?;
        attach_group(first.as_fd(), prog.as_fd())?;
        Ok(s)
    }

    /// A binary upgrade's new process: opens the old process's maps (`ids`; needs
    /// `CAP_SYS_ADMIN`), puts `sockets` (on `cpus`, as for [`QuicSteering::attach`]) under
    /// the other generation and makes it current. The old process's program stays attached
    /// to the group, which the new sockets joined.
    pub fn take_over(ids: Ids, sockets: &[&UdpSocket], cpus: &[usize]) -> io::Result<Self> {
        let open = |id: u32| {
            let fd = sys::map_fd_by_id(id).map_err(|e| ctx("bpf(BPF_MAP_GET_FD_BY_ID)", e))?;
            MapFd::new(fd).map_err(|e| ctx("bpf(BPF_OBJ_GET_INFO_BY_FD)", e))
        };
        let s = QuicSteering {
            sockets: open(ids.sockets)?,
            current: open(ids.current)?,
            epoch: (ids.epoch & 1) ^ 1,
        };
        s.fill(sockets, cpus)?;
        Ok(s)
    }

    /// The generation this process's IDs carry.
    pub fn epoch(&self) -> u8 {
        self.epoch
    }

    /// The maps' ids and the generation, for the process that replaces this one.
    pub fn ids(&self) -> Ids {
        Ids {
            sockets: self.sockets.info().id,
            current: self.current.info().id,
            epoch: self.epoch,
        }
    }

    /// Puts the zones' sockets in, makes this generation current, then names each CPU's
    /// zone (`cpus[z]`: zone z's CPU). Until the last step a new client may reach a zone by
    /// the old generation's CPU entries: one of this generation, or the hash where that
    /// zone has no socket.
    fn fill(&self, sockets: &[&UdpSocket], cpus: &[usize]) -> io::Result<()> {
        let zones = u32::try_from(sockets.len())
            .ok()
            .filter(|&n| (1..=256).contains(&n))
            .ok_or_else(|| {
                io::Error::new(io::ErrorKind::InvalidInput, "1 to 256 zones: one ID byte")
            })?;
        for (z, sock) in sockets.iter().enumerate() {
            self.set(z, sock.as_fd())?;
        }
        let v = (u32::from(self.epoch) << 8) << 16 | zones;
        self.current
            .update(&0u32.to_ne_bytes(), &v.to_ne_bytes(), BPF_ANY)
            .map_err(|e| ctx("bpf(BPF_MAP_UPDATE_ELEM) of the current generation", e))?;
        for c in 0..MAX_CPUS {
            let zone = cpus.iter().position(|&x| x == c as usize);
            let v = zone.map_or(0, |z| z as u32 + 1);
            // An array made by an older binary holds key 0 only: the hash then decides.
            if self
                .current
                .update(&(1 + c).to_ne_bytes(), &v.to_ne_bytes(), BPF_ANY)
                .is_err()
            {
                break;
            }
        }
        Ok(())
    }

    /// Makes `socket` zone `zone`'s (a zone that re-created its socket).
    pub fn set(&self, zone: usize, socket: std::os::fd::BorrowedFd<'_>) -> io::Result<()> {
        let zone8 = u8::try_from(zone).map_err(|_| {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("zone {zone} does not fit an ID byte"),
            )
        })?;
        let key = u32::from(self.epoch) << 8 | u32::from(zone8);
        // A socket descriptor in (the kernel stores the socket, not the number).
        let fd = socket.as_raw_fd() as u64;
        self.sockets
            .update(&key.to_ne_bytes(), &fd.to_ne_bytes(), BPF_ANY)
            .map_err(|e| ctx(&format!("bpf(BPF_MAP_UPDATE_ELEM) for zone {zone}"), e))
    }
}

/// Steers the QUIC sockets of every address: `zones[z]` holds zone z's sockets, the same
/// addresses in the same order in every zone; `before(a)` gives what the process this one
/// replaces left for address `a`'s group, taken over when there is one. Logs what it did per
/// address; an address whose steering failed keeps the kernel's hash (and a migrating client
/// may lose its connection there, which the log says). With one zone and nothing to take
/// over there is nothing to steer. Returns each address's index with its steering.
pub fn steer_zones(
    zones: &[Vec<&UdpSocket>],
    cpus: &[usize],
    layout: CidLayout,
    epoch: u8,
    before: impl Fn(usize) -> Option<Ids>,
) -> Vec<(usize, QuicSteering)> {
    let n = zones.first().map_or(0, Vec::len);
    let mut out = Vec::new();
    for a in 0..n {
        let group: Vec<&UdpSocket> = zones.iter().filter_map(|z| z.get(a).copied()).collect();
        let addr = group
            .first()
            .and_then(|s| s.local_addr().ok())
            .map_or_else(|| format!("address #{a}"), |x| x.to_string());
        let r = match before(a) {
            Some(ids) => QuicSteering::take_over(ids, &group, cpus)
                .inspect(|s| {
                    tracing::info!(
                        "binary upgrade: took over the QUIC steering of {addr} (generation {})",
                        s.epoch()
                    );
                })
                .or_else(|e| {
                    tracing::warn!(
                        "binary upgrade: cannot take over the QUIC steering of {addr} ({e}); \
                         the old process's connections there may be lost"
                    );
                    QuicSteering::attach(&group, cpus, layout, epoch)
                }),
            None if zones.len() < 2 => continue,
            None => QuicSteering::attach(&group, cpus, layout, epoch),
        };
        match r {
            Ok(s) => {
                tracing::info!(
                    "QUIC packets on {addr} are steered to the zone their connection ID names \
                     (eBPF reuseport program)"
                );
                out.push((a, s));
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

/// `struct sk_reuseport_md`'s `hash`, the kernel's hash of the 4-tuple (after two 8-byte
/// pointers and four u32: len, eth_protocol, ip_protocol, bind_inany).
const MD_HASH: i16 = 32;
/// The UDP header, before the QUIC packet.
const UDP_HEADER: i32 = 8;
/// What is read of the packet: the first byte, and for a long header the version (4 bytes),
/// the ID's length and the ID's first bytes up to the zone's.
const fn read_len(layout: CidLayout) -> i32 {
    6 + layout.zone_byte as i32 + 1
}
/// The stack slot the packet's bytes are copied to (below the two keys' 8 bytes).
const BUF: i16 = -48;

/// The program, for the socket array `socks` and the current-generation array `cur`:
///
/// ```text
///     r6 = ctx
///     r0 = bpf_skb_load_bytes(ctx, 8, buf, 7 + zone_byte)  ; first byte .. the ID's zone byte
///     if r0 != 0 goto other                                ; too short to hold one of ours
///     if buf[0] & 0x80 == 0 goto short
///     if buf[5] != LEN goto other                          ; long header: the ID's length
///     r2 = buf[6]; r3 = buf[6 + zone_byte]; goto ours
/// short:
///     r2 = buf[1]; r3 = buf[1 + zone_byte]
/// ours:
///     if r2 >> 5 != ROTATION goto other                    ; not an ID of this layout
///     key = (r2 & EPOCH_BIT ? 256 : 0) | r3                ; its generation and zone
///     if bpf_sk_select_reuseport(ctx, socks, &key, 0) == 0 goto pass
/// other:                                                   ; a new client, a zone gone
///     c = bpf_map_lookup_elem(cur, &0); if !c goto pass
///     r7 = *c; zones = r7 & 0xffff; if zones == 0 goto pass
///     z = bpf_map_lookup_elem(cur, &(1 + bpf_get_smp_processor_id()))
///     if !z || *z == 0 goto hash                           ; no zone on this CPU
///     key = (r7 >> 16) | (*z - 1)                          ; the zone on the receiving CPU
///     if bpf_sk_select_reuseport(ctx, socks, &key, 0) == 0 goto pass
/// hash:
///     key = (r7 >> 16) | ctx->hash % zones                 ; a zone of the current process
///     bpf_sk_select_reuseport(ctx, socks, &key, 0)
/// pass:
///     return SK_PASS                                       ; the kernel's hash where none chosen
/// ```
fn program(socks: RawFd, cur: RawFd, layout: CidLayout) -> Vec<Insn> {
    use Op::{I, J, L};
    let b = |i: i16| BUF + i;
    let z = i16::from(layout.zone_byte);
    // log2 of the generation bit: shifted up to 256 (bit 8 of the key).
    let up = 8 - layout.epoch_bit.trailing_zeros() as i32;
    let map = |reg: u8, fd: RawFd| ld_map(reg, fd).map(I);
    // key |= the current generation's key base (r7 >> 16).
    let base = |into: &mut Vec<Op>| {
        into.extend([
            I(insn(MOV64_REG, R1, R7, 0, 0)),
            I(insn(RSH64_IMM, R1, 0, 0, 16)),
            I(insn(OR64_REG, R3, R1, 0, 0)),
        ])
    };
    let select = |into: &mut Vec<Op>| {
        into.push(I(insn(STX_W, R10, R3, -4, 0)));
        into.push(I(insn(MOV64_REG, R1, R6, 0, 0)));
        into.extend(map(R2, socks));
        into.push(I(insn(MOV64_REG, R3, R10, 0, 0)));
        into.push(I(insn(ADD64_IMM, R3, 0, 0, -4)));
        into.push(I(insn(MOV64_IMM, R4, 0, 0, 0)));
        into.push(I(insn(CALL, 0, 0, 0, FN_SK_SELECT_REUSEPORT)));
    };
    let mut p = vec![
        I(insn(MOV64_REG, R6, R1, 0, 0)),
        I(insn(MOV64_IMM, R2, 0, 0, UDP_HEADER)),
        I(insn(MOV64_REG, R3, R10, 0, 0)),
        I(insn(ADD64_IMM, R3, 0, 0, BUF as i32)),
        I(insn(MOV64_IMM, R4, 0, 0, read_len(layout))),
        I(insn(CALL, 0, 0, 0, FN_SKB_LOAD_BYTES)),
        J(JNE_IMM, R0, 0, "other"),
        I(insn(LDX_B, R1, R10, b(0), 0)),
        I(insn(AND64_IMM, R1, 0, 0, 0x80)),
        J(JEQ_IMM, R1, 0, "short"),
        I(insn(LDX_B, R1, R10, b(5), 0)),
        J(JNE_IMM, R1, i32::from(layout.len), "other"),
        I(insn(LDX_B, R2, R10, b(6), 0)),
        I(insn(LDX_B, R3, R10, b(6 + z), 0)),
        J(JA, 0, 0, "ours"),
        L("short"),
        I(insn(LDX_B, R2, R10, b(1), 0)),
        I(insn(LDX_B, R3, R10, b(1 + z), 0)),
        L("ours"),
        I(insn(MOV64_REG, R1, R2, 0, 0)),
        I(insn(RSH64_IMM, R2, 0, 0, 5)),
        J(JNE_IMM, R2, i32::from(layout.rotation), "other"),
        I(insn(AND64_IMM, R1, 0, 0, i32::from(layout.epoch_bit))),
        I(insn(LSH64_IMM, R1, 0, 0, up)),
        I(insn(OR64_REG, R3, R1, 0, 0)),
    ];
    select(&mut p);
    // r0 = bpf_map_lookup_elem(cur, r10 - 8)
    let lookup = |into: &mut Vec<Op>| {
        into.push(I(insn(MOV64_REG, R2, R10, 0, 0)));
        into.push(I(insn(ADD64_IMM, R2, 0, 0, -8)));
        into.extend(map(R1, cur));
        into.push(I(insn(CALL, 0, 0, 0, FN_MAP_LOOKUP_ELEM)));
    };
    p.extend([
        J(JEQ_IMM, R0, 0, "pass"),
        L("other"),
        I(insn(ST_W, R10, 0, -8, 0)),
    ]);
    lookup(&mut p);
    p.extend([
        J(JEQ_IMM, R0, 0, "pass"),
        I(insn(LDX_W, R7, R0, 0, 0)),
        I(insn(MOV64_REG, R2, R7, 0, 0)),
        I(insn(AND64_IMM, R2, 0, 0, 0xffff)),
        J(JEQ_IMM, R2, 0, "pass"),
        I(insn(CALL, 0, 0, 0, FN_GET_SMP_PROCESSOR_ID)),
        I(insn(ADD64_IMM, R0, 0, 0, 1)),
        I(insn(STX_W, R10, R0, -8, 0)),
    ]);
    lookup(&mut p);
    p.extend([
        J(JEQ_IMM, R0, 0, "hash"),
        I(insn(LDX_W, R3, R0, 0, 0)),
        J(JEQ_IMM, R3, 0, "hash"),
        I(insn(ADD64_IMM, R3, 0, 0, -1)),
    ]);
    base(&mut p);
    select(&mut p);
    p.extend([
        J(JEQ_IMM, R0, 0, "pass"),
        L("hash"),
        I(insn(MOV64_REG, R2, R7, 0, 0)),
        I(insn(AND64_IMM, R2, 0, 0, 0xffff)),
        I(insn(LDX_W, R3, R6, MD_HASH, 0)),
        I(insn(MOD64_REG, R3, R2, 0, 0)),
    ]);
    base(&mut p);
    select(&mut p);
    p.extend([
        L("pass"),
        I(insn(MOV64_IMM, R0, 0, 0, SK_PASS)),
        I(insn(EXIT, 0, 0, 0, 0)),
    ]);
    assemble(&p)
}

#[cfg(test)]
#[path = "quic_tests.rs"]
mod tests;
