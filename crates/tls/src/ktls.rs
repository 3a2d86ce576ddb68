//! Kernel TLS: after the handshake, the record layer can move into the kernel (`TCP_ULP
//! "tls"`, then `TLS_TX`/`TLS_RX` with the session's keys), so that plain `send`/`recv`,
//! io_uring and `sendfile` carry TLS records and no user-space copy encrypts them.
//!
//! What is here: the start-up probe ([`probe`]), the translation of rustls's extracted
//! secrets into the kernel's `tls12_crypto_info_*` structures ([`CryptoInfo`]), the
//! socket options that hand a connection over ([`enable`]), and the reading of the control
//! records the kernel passes up with `TLS_GET_RECORD_TYPE` ([`record_type`], [`classify`]).
//!
//! The zone does not use it yet: the kernel this project is built on offers no `tls` ULP
//! (`/proc/sys/net/ipv4/tcp_available_ulp` lists only mptcp), so there is no way to run a
//! handed-over connection here; the logic is unit-tested on its own (the secrets decrypt a
//! real record), and [`probe`] logs the decision at start.

use std::os::fd::RawFd;

use rustls::{ConnectionTrafficSecrets, ExtractedSecrets, ProtocolVersion};

/// `SOL_TLS`, `TLS_TX`, `TLS_RX`, `TCP_ULP` and the cmsg type of a received record
/// (`include/uapi/linux/tls.h`, `tcp.h`).
pub const SOL_TLS: i32 = 282;
pub const TLS_TX: i32 = 1;
pub const TLS_RX: i32 = 2;
pub const TCP_ULP: i32 = 31;
pub const TLS_GET_RECORD_TYPE: i32 = 2;

const TLS_1_2_VERSION: u16 = 0x0303;
const TLS_1_3_VERSION: u16 = 0x0304;
const CIPHER_AES_GCM_128: u16 = 51;
const CIPHER_AES_GCM_256: u16 = 52;
const CIPHER_CHACHA20_POLY1305: u16 = 54;

/// Whether the kernel can take TLS connections over, and what was seen.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Probe {
    pub available: bool,
    pub detail: String,
}

/// Reads `/proc/sys/net/ipv4/tcp_available_ulp` once (the `tls` module, when loaded, adds
/// itself there).
pub fn probe() -> Probe {
    probe_from(std::fs::read_to_string(
        "/proc/sys/net/ipv4/tcp_available_ulp",
    ))
}

fn probe_from(read: std::io::Result<String>) -> Probe {
    match read {
        Ok(s) if s.split_whitespace().any(|u| u == "tls") => Probe {
            available: true,
            detail: format!("kernel TLS available (ULPs: {})", s.trim()),
        },
        Ok(s) => Probe {
            available: false,
            detail: format!(
                "no kernel TLS: the kernel's ULPs are [{}] (load the tls module for it); TLS \
                 records are sealed in user space",
                s.trim()
            ),
        },
        Err(e) => Probe {
            available: false,
            detail: format!("no kernel TLS: cannot read tcp_available_ulp ({e})"),
        },
    }
}

/// One direction's `struct tls12_crypto_info_*`, as the bytes `setsockopt` takes (the
/// structures are a `u16` version and a `u16` cipher followed by byte arrays: no padding).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CryptoInfo(pub Vec<u8>);

impl CryptoInfo {
    /// From one direction of rustls's extracted secrets: `(sequence number, secrets)`.
    pub fn new(
        version: ProtocolVersion,
        seq: u64,
        secrets: &ConnectionTrafficSecrets,
    ) -> Option<CryptoInfo> {
        let version = match version {
            ProtocolVersion::TLSv1_2 => TLS_1_2_VERSION,
            ProtocolVersion::TLSv1_3 => TLS_1_3_VERSION,
            _ => return None,
        };
        let mut b = Vec::with_capacity(56);
        let seq = seq.to_be_bytes();
        match secrets {
            ConnectionTrafficSecrets::Aes128Gcm { key, iv }
            | ConnectionTrafficSecrets::Aes256Gcm { key, iv } => {
                let cipher = if key.as_ref().len() == 16 {
                    CIPHER_AES_GCM_128
                } else {
                    CIPHER_AES_GCM_256
                };
                let iv = iv.as_ref();
                b.extend_from_slice(&version.to_ne_bytes());
                b.extend_from_slice(&cipher.to_ne_bytes());
                b.extend_from_slice(&iv[4..12]); // iv: the nonce's last 8 bytes
                b.extend_from_slice(key.as_ref());
                b.extend_from_slice(&iv[..4]); // salt: its first 4
                b.extend_from_slice(&seq);
            }
            ConnectionTrafficSecrets::Chacha20Poly1305 { key, iv } => {
                b.extend_from_slice(&version.to_ne_bytes());
                b.extend_from_slice(&CIPHER_CHACHA20_POLY1305.to_ne_bytes());
                b.extend_from_slice(iv.as_ref()); // the whole 12-byte nonce, no salt
                b.extend_from_slice(key.as_ref());
                b.extend_from_slice(&seq);
            }
            _ => return None,
        }
        Some(CryptoInfo(b))
    }
}

/// Both directions of a finished handshake.
pub fn crypto_infos(
    version: ProtocolVersion,
    s: &ExtractedSecrets,
) -> Option<(CryptoInfo, CryptoInfo)> {
    Some((
        CryptoInfo::new(version, s.tx.0, &s.tx.1)?,
        CryptoInfo::new(version, s.rx.0, &s.rx.1)?,
    ))
}

/// Hands a connected TCP socket's record layer to the kernel: the ULP, then both directions.
pub fn enable(fd: RawFd, tx: &CryptoInfo, rx: &CryptoInfo) -> std::io::Result<()> {
    setsockopt(fd, libc::SOL_TCP, TCP_ULP, b"tls")?;
    setsockopt(fd, SOL_TLS, TLS_TX, &tx.0)?;
    setsockopt(fd, SOL_TLS, TLS_RX, &rx.0)
}

fn setsockopt(fd: RawFd, level: i32, name: i32, val: &[u8]) -> std::io::Result<()> {
    // SAFETY: `val` is a live byte slice for the duration of the call and its length is
    // passed with it; the kernel copies what it reads and keeps no pointer. An invalid `fd`
    // is reported as EBADF, not undefined behaviour.
    let r = unsafe {
        libc::setsockopt(
            fd,
            level,
            name,
            val.as_ptr().cast(),
            val.len() as libc::socklen_t,
        )
    };
    if r == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// The record type of a non-data record the kernel passed up: the `SOL_TLS`
/// `TLS_GET_RECORD_TYPE` control message in a `recvmsg` control buffer (parsed as bytes:
/// `cmsghdr` is a `size_t` length and two `int`s, data after it, each message aligned to
/// `size_t`).
pub fn record_type(control: &[u8]) -> Option<u8> {
    const HDR: usize = std::mem::size_of::<usize>() + 8;
    let align = std::mem::size_of::<usize>();
    let mut at = 0;
    while at + HDR <= control.len() {
        let len = usize::from_ne_bytes(control[at..at + align].try_into().ok()?);
        let level = i32::from_ne_bytes(control[at + align..at + align + 4].try_into().ok()?);
        let kind = i32::from_ne_bytes(control[at + align + 4..at + HDR].try_into().ok()?);
        if len < HDR || at + len > control.len() {
            return None;
        }
        if level == SOL_TLS && kind == TLS_GET_RECORD_TYPE && len > HDR {
            return Some(control[at + HDR]);
        }
        at += len.div_ceil(align) * align;
    }
    None
}

/// What a record the kernel did not decrypt into the data stream means for the connection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Control {
    /// Application data (never a control record; here for completeness).
    Data,
    /// An alert: close_notify (0) ends the client's data; anything else ends the connection.
    Alert { level: u8, description: u8 },
    /// TLS 1.3 KeyUpdate: the kernel would need the next traffic secret, which only the
    /// user-space session has; ringx closes the connection (the client reconnects).
    KeyUpdate { update_requested: bool },
    /// A NewSessionTicket (from a server: only on connections ringx originates) — ignored.
    NewSessionTicket,
    /// Any other handshake message after the handshake: a protocol error.
    Handshake(u8),
    /// A record type TLS does not define.
    Unknown(u8),
}

/// Reads a control record's payload.
pub fn classify(record_type: u8, payload: &[u8]) -> Control {
    match record_type {
        23 => Control::Data,
        21 if payload.len() >= 2 => Control::Alert {
            level: payload[0],
            description: payload[1],
        },
        22 => match payload.first() {
            Some(4) => Control::NewSessionTicket,
            Some(24) => Control::KeyUpdate {
                update_requested: payload.get(4) == Some(&1),
            },
            Some(&t) => Control::Handshake(t),
            None => Control::Unknown(record_type),
        },
        t => Control::Unknown(t),
    }
}

#[cfg(test)]
mod tests;
