//! Kernel TLS: once the handshake is over, the kernel can seal a connection's records
//! (`TCP_ULP "tls"`, then `TLS_TX` with the session's send keys), so that plain sends,
//! io_uring's and `sendfile`/splice carry TLS records with no encryption in user space: a
//! static file goes from the page cache to the socket as it does over plain TCP.
//!
//! ringx gives the kernel the sending side only. Records from the client stay with
//! [`crate::record`] in user space: taking the receiving side over would need the receive to
//! stop exactly at the handshake's last record (io_uring's multishot receive reads ahead) and
//! every non-data record fetched with `recvmsg` and its control message, for requests that
//! are small. What the kernel cannot do alone is done around it: alerts and a KeyUpdate of
//! ours are sent as records of their type (`TLS_SET_RECORD_TYPE`), and new send keys after a
//! KeyUpdate are given with `TLS_TX` again (Linux 6.14 re-keys; an older kernel refuses, and
//! that connection closes). The kernel tells ringx nothing of the records it seals, so such a
//! connection is not re-keyed ahead of AES-GCM's confidentiality limit (2^24.5 records, some
//! 380 GB of full records) as one sealed by [`crate::record`] is.
//!
//! What is here: the start-up [`probe`] (the ULP, then each cipher on a loopback connection),
//! the translation of rustls's secrets into the kernel's `tls12_crypto_info_*`
//! ([`CryptoInfo`]). The control records a connection sends while the kernel seals are made
//! by [`crate::traffic`], and sent by the engine (`Io::send_tls_record`).

use rustls::{ConnectionTrafficSecrets, ProtocolVersion};
use zeroize::Zeroize;

/// `SOL_TLS`, `TLS_TX`, `TLS_RX`, `TCP_ULP`, the control message types of a record's type
/// (`include/uapi/linux/tls.h`, `tcp.h`).
pub const SOL_TLS: i32 = 282;
pub const TLS_TX: i32 = 1;
pub const TLS_RX: i32 = 2;
pub const TCP_ULP: i32 = 31;
pub const TLS_SET_RECORD_TYPE: i32 = 1;
pub const TLS_GET_RECORD_TYPE: i32 = 2;

const TLS_1_2_VERSION: u16 = 0x0303;
const TLS_1_3_VERSION: u16 = 0x0304;
const CIPHER_AES_GCM_128: u16 = 51;
const CIPHER_AES_GCM_256: u16 = 52;
const CIPHER_CHACHA20_POLY1305: u16 = 54;

/// The ciphers the kernel seals.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Support {
    pub aes_gcm_128: bool,
    pub aes_gcm_256: bool,
    pub chacha20_poly1305: bool,
}

impl Support {
    /// Whether the kernel can seal with these keys.
    pub fn allows(&self, s: &ConnectionTrafficSecrets) -> bool {
        match s {
            ConnectionTrafficSecrets::Aes128Gcm { .. } => self.aes_gcm_128,
            ConnectionTrafficSecrets::Aes256Gcm { .. } => self.aes_gcm_256,
            ConnectionTrafficSecrets::Chacha20Poly1305 { .. } => self.chacha20_poly1305,
            _ => false,
        }
    }

    fn any(&self) -> bool {
        self.aes_gcm_128 || self.aes_gcm_256 || self.chacha20_poly1305
    }

    fn names(&self) -> String {
        let mut v = Vec::new();
        if self.aes_gcm_128 {
            v.push("AES-GCM-128");
        }
        if self.aes_gcm_256 {
            v.push("AES-GCM-256");
        }
        if self.chacha20_poly1305 {
            v.push("ChaCha20-Poly1305");
        }
        v.join(", ")
    }
}

/// What the kernel offers, and the line that says so.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Probe {
    /// `None`: records are sealed in user space.
    pub support: Option<Support>,
    pub detail: String,
}

/// Tries the kernel once: attaches the `tls` ULP to a loopback connection (which loads the
/// module where it is built as one and this process may load it), then sets `TLS_TX` with
/// each cipher on a connection of its own.
pub fn probe() -> Probe {
    let ulps = std::fs::read_to_string("/proc/sys/net/ipv4/tcp_available_ulp")
        .map(|s| s.split_whitespace().collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|e| format!("unreadable: {e}"));
    let mut support = Support::default();
    for (cipher, flag) in [
        (CIPHER_AES_GCM_128, &mut support.aes_gcm_128),
        (CIPHER_AES_GCM_256, &mut support.aes_gcm_256),
        (CIPHER_CHACHA20_POLY1305, &mut support.chacha20_poly1305),
    ] {
        match try_cipher(cipher) {
            Ok(()) => *flag = true,
            Err(Stage::Ulp(e)) => {
                return verdict(
                    None,
                    &ulps,
                    &format!("the tls ULP cannot be attached ({e})"),
                )
            }
            Err(Stage::Loopback(e)) => {
                return verdict(
                    None,
                    &ulps,
                    &format!("no loopback connection to probe with ({e})"),
                )
            }
            Err(Stage::Tx) => {}
        }
    }
    let why = if support.any() {
        String::new()
    } else {
        "the kernel takes none of the ciphers".into()
    };
    verdict(support.any().then_some(support), &ulps, &why)
}

fn verdict(support: Option<Support>, ulps: &str, why: &str) -> Probe {
    let detail = match support {
        Some(s) => format!(
            "kernel TLS seals records for {} (the sending side; received records are opened \
             in user space)",
            s.names()
        ),
        None => format!(
            "no kernel TLS: {why} (ULPs: [{ulps}]; `modprobe tls` adds it where the kernel \
             has CONFIG_TLS); records are sealed in user space"
        ),
    };
    Probe { support, detail }
}

enum Stage {
    Loopback(std::io::Error),
    Ulp(std::io::Error),
    /// The kernel refused the cipher (not built in).
    Tx,
}

/// A connected loopback socket with the ULP and a dummy send key of `cipher`.
fn try_cipher(cipher: u16) -> Result<(), Stage> {
    let l = std::net::TcpListener::bind("127.0.0.1:0").map_err(Stage::Loopback)?;
    let addr = l.local_addr().map_err(Stage::Loopback)?;
    let s = std::net::TcpStream::connect(addr).map_err(Stage::Loopback)?;
    let fd = std::os::fd::AsRawFd::as_raw_fd(&s);
    setsockopt(fd, libc::SOL_TCP, TCP_ULP, b"tls").map_err(Stage::Ulp)?;
    let (key, iv) = match cipher {
        CIPHER_AES_GCM_128 => (16, 8),
        CIPHER_AES_GCM_256 => (32, 8),
        _ => (32, 12),
    };
    let salt = if cipher == CIPHER_CHACHA20_POLY1305 {
        0
    } else {
        4
    };
    let mut b = Vec::new();
    b.extend_from_slice(&TLS_1_3_VERSION.to_ne_bytes());
    b.extend_from_slice(&cipher.to_ne_bytes());
    b.resize(4 + iv + key + salt + 8, 7);
    setsockopt(fd, SOL_TLS, TLS_TX, &b).map_err(|_| Stage::Tx)
}

/// One direction's `struct tls12_crypto_info_*`, as the bytes `setsockopt` takes (the
/// structures are a `u16` version and a `u16` cipher followed by byte arrays: no padding).
/// They hold the key, IV and salt: wiped when dropped, not cloned, and not printed by `Debug`.
#[derive(PartialEq, Eq)]
pub struct CryptoInfo(Vec<u8>);

impl Drop for CryptoInfo {
    fn drop(&mut self) {
        self.0.zeroize();
    }
}

impl zeroize::ZeroizeOnDrop for CryptoInfo {}

impl std::fmt::Debug for CryptoInfo {
    /// The version and the cipher only.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let word = |at: usize| match self.0.get(at..at + 2) {
            Some(&[a, b]) => u16::from_ne_bytes([a, b]),
            _ => 0,
        };
        f.debug_struct("CryptoInfo")
            .field("version", &format_args!("{:#06x}", word(0)))
            .field("cipher", &word(2))
            .finish_non_exhaustive()
    }
}

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
        // The largest structure (AES-256-GCM's): never reallocated, so no copy is left behind.
        let mut b = Vec::with_capacity(56);
        let seq_n = seq;
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
                if version == TLS_1_2_VERSION {
                    b.extend_from_slice(&tls12_explicit(iv, seq_n));
                } else {
                    b.extend_from_slice(&iv[4..12]); // iv: the nonce's last 8 bytes
                }
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

    /// The bytes for `setsockopt(SOL_TLS, TLS_TX)`, handed over: from here on they are the
    /// caller's to wipe.
    pub fn into_bytes(mut self) -> Vec<u8> {
        std::mem::take(&mut self.0)
    }
}

fn setsockopt(fd: std::os::fd::RawFd, level: i32, name: i32, val: &[u8]) -> std::io::Result<()> {
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

/// The first explicit nonce the kernel is to send in a TLS 1.2 AES-GCM connection whose
/// records up to `seq` rustls (or [`crate::record`]) sealed.
///
/// Both put a nonce's last 8 bytes on the wire, but from different counters: rustls sends
/// the key block's explicit part XOR the sequence number, the kernel that part as given,
/// plus one per record. Handed the key block's part as it is, the kernel's first record
/// would reuse the nonce of record 0 (the server's Finished) under the same key, which
/// breaks AES-GCM. The nonces rustls used differ from the key block's part only in the bits
/// below `seq.next_power_of_two()`, so the kernel starts at that part plus that power of
/// two: past all of them, and counting away from them.
fn tls12_explicit(iv: &[u8], seq: u64) -> [u8; 8] {
    let base = u64::from_be_bytes(iv[4..12].try_into().expect("a 12-byte IV"));
    base.wrapping_add(seq.max(1).next_power_of_two())
        .to_be_bytes()
}

#[cfg(test)]
pub(crate) mod tests;
