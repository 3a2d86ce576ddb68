//! The record layer once the handshake is over: TLS records sealed and opened in place, with
//! the traffic keys rustls hands over when its handshake is done
//! (`dangerous_into_kernel_connection`), the same keys kernel TLS takes.
//!
//! Why not rustls's own record layer: rustls 0.23 encrypts each record into a new allocation
//! and copies it out again (`write_tls`, and the unbuffered `encrypt` as well), so a file
//! crossed memory four times on its way to the socket (read, into rustls, out of rustls, into
//! the kernel). Here a file piece is read straight into the output buffer at its record's
//! place and sealed there ([`Records::seal_file`]): the read and the kernel's copy are the
//! only copies. Received records are opened in the receive buffer. The same split is what
//! kernel TLS needs: when the kernel takes the sending side, this layer keeps the receiving
//! side. What stays with rustls: the handshake, the key schedule for KeyUpdate (its
//! `KernelConnection`) and session tickets.
//!
//! The record formats (RFC 8446 §5.2, RFC 5288 §3, RFC 7905 §2):
//! - TLS 1.3: `23 03 03 len | seal(plaintext, type, no padding) | tag`, the nonce the IV
//!   XOR the sequence number, the header as additional data.
//! - TLS 1.2 AES-GCM: `type 03 03 len | explicit nonce (8) | seal(plaintext) | tag`, the
//!   nonce the 4-byte salt then the explicit part, additional data `seq type 03 03 len`.
//! - TLS 1.2 ChaCha20-Poly1305: as TLS 1.3's nonce, TLS 1.2's additional data, no explicit
//!   part.

use std::fs::File;
use std::os::fd::AsRawFd;

use rustls::{ConnectionTrafficSecrets, ProtocolVersion};

use zeroize::Zeroize;

use crate::provider::Provider;
use crate::wipe::Wiped;

/// Record content types.
pub const CHANGE_CIPHER_SPEC: u8 = 20;
pub const ALERT: u8 = 21;
pub const HANDSHAKE: u8 = 22;
pub const APPLICATION_DATA: u8 = 23;

/// Alert descriptions this layer sends.
pub mod alert {
    pub const CLOSE_NOTIFY: u8 = 0;
    pub const UNEXPECTED_MESSAGE: u8 = 10;
    pub const BAD_RECORD_MAC: u8 = 20;
    pub const RECORD_OVERFLOW: u8 = 22;
    pub const DECODE_ERROR: u8 = 50;
    pub const USER_CANCELED: u8 = 90;
    pub const NO_RENEGOTIATION: u8 = 100;
}

/// The most plaintext one record carries.
pub const MAX_PLAIN: usize = 1 << 14;
const HDR: usize = 5;
const TAG: usize = 16;
const NONCE: usize = 12;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Alg {
    Aes128Gcm,
    Aes256Gcm,
    Chacha20Poly1305,
}

/// An AEAD key, wiped when dropped: aws-lc's in its own allocation, which `OPENSSL_free`
/// cleanses; ring's, a plain value, by [`Wiped`].
enum Key {
    AwsLc(aws_lc_rs::aead::LessSafeKey),
    // Boxed: ring's key schedule is inline (544 bytes), AWS-LC's behind a pointer already.
    Ring(Box<Wiped<ring::aead::LessSafeKey>>),
}

impl Key {
    fn new(provider: Provider, alg: Alg, key: &[u8]) -> Option<Key> {
        Some(match provider {
            Provider::AwsLc => {
                use aws_lc_rs::aead as a;
                let alg = match alg {
                    Alg::Aes128Gcm => &a::AES_128_GCM,
                    Alg::Aes256Gcm => &a::AES_256_GCM,
                    Alg::Chacha20Poly1305 => &a::CHACHA20_POLY1305,
                };
                Key::AwsLc(a::LessSafeKey::new(a::UnboundKey::new(alg, key).ok()?))
            }
            Provider::Ring => {
                use ring::aead as r;
                let alg = match alg {
                    Alg::Aes128Gcm => &r::AES_128_GCM,
                    Alg::Aes256Gcm => &r::AES_256_GCM,
                    Alg::Chacha20Poly1305 => &r::CHACHA20_POLY1305,
                };
                Key::Ring(Box::new(Wiped::new(r::LessSafeKey::new(
                    r::UnboundKey::new(alg, key).ok()?,
                ))))
            }
        })
    }

    /// Encrypts `in_out` in place; the tag is returned.
    fn seal(&self, nonce: [u8; NONCE], aad: &[u8], in_out: &mut [u8]) -> Option<[u8; TAG]> {
        let mut tag = [0u8; TAG];
        match self {
            Key::AwsLc(k) => {
                use aws_lc_rs::aead as a;
                let t = k
                    .seal_in_place_separate_tag(
                        a::Nonce::assume_unique_for_key(nonce),
                        a::Aad::from(aad),
                        in_out,
                    )
                    .ok()?;
                tag.copy_from_slice(t.as_ref());
            }
            Key::Ring(k) => {
                use ring::aead as r;
                let t = k
                    .seal_in_place_separate_tag(
                        r::Nonce::assume_unique_for_key(nonce),
                        r::Aad::from(aad),
                        in_out,
                    )
                    .ok()?;
                tag.copy_from_slice(t.as_ref());
            }
        }
        Some(tag)
    }

    /// Decrypts `in_out` (ciphertext then tag) in place; the plaintext's length.
    fn open(&self, nonce: [u8; NONCE], aad: &[u8], in_out: &mut [u8]) -> Option<usize> {
        match self {
            Key::AwsLc(k) => {
                use aws_lc_rs::aead as a;
                k.open_in_place(
                    a::Nonce::assume_unique_for_key(nonce),
                    a::Aad::from(aad),
                    in_out,
                )
                .ok()
                .map(|p| p.len())
            }
            Key::Ring(k) => {
                use ring::aead as r;
                k.open_in_place(
                    r::Nonce::assume_unique_for_key(nonce),
                    r::Aad::from(aad),
                    in_out,
                )
                .ok()
                .map(|p| p.len())
            }
        }
    }
}

/// One direction's key, IV and next sequence number; the key and IV are wiped when dropped
/// (no `Debug`, no `Clone`).
pub struct Keys {
    key: Key,
    iv: [u8; NONCE],
    pub seq: u64,
}

impl Drop for Keys {
    fn drop(&mut self) {
        self.iv.zeroize();
    }
}

impl zeroize::ZeroizeOnDrop for Keys {}

impl Keys {
    /// From rustls's secrets for one direction (`None`: an AEAD this layer does not know).
    pub fn new(provider: Provider, seq: u64, s: &ConnectionTrafficSecrets) -> Option<Keys> {
        let (alg, key, iv) = match s {
            ConnectionTrafficSecrets::Aes128Gcm { key, iv } => (Alg::Aes128Gcm, key, iv),
            ConnectionTrafficSecrets::Aes256Gcm { key, iv } => (Alg::Aes256Gcm, key, iv),
            ConnectionTrafficSecrets::Chacha20Poly1305 { key, iv } => {
                (Alg::Chacha20Poly1305, key, iv)
            }
            _ => return None,
        };
        Some(Keys {
            key: Key::new(provider, alg, key.as_ref())?,
            iv: iv.as_ref().try_into().ok()?,
            seq,
        })
    }

    /// The IV XOR the sequence number (TLS 1.3, TLS 1.2 ChaCha20, and TLS 1.2 AES-GCM's
    /// explicit part as rustls makes it).
    fn nonce(&self) -> [u8; NONCE] {
        let mut n = self.iv;
        for (b, s) in n[4..].iter_mut().zip(self.seq.to_be_bytes()) {
            *b ^= s;
        }
        n
    }
}

/// A record that failed to open: the alert to answer with, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fault {
    pub alert: u8,
    pub why: &'static str,
}

fn fault(alert: u8, why: &'static str) -> Fault {
    Fault { alert, why }
}

/// A record opened in place: its content type and where its plaintext lies in the buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Opened {
    pub typ: u8,
    pub start: usize,
    pub len: usize,
    /// Bytes of the buffer the record took.
    pub consumed: usize,
}

/// Both directions of an established connection.
pub struct Records {
    tls13: bool,
    /// TLS 1.2 AES-GCM: each record carries 8 bytes of its nonce.
    explicit: bool,
    /// `None` once the kernel seals (kTLS).
    pub tx: Option<Keys>,
    pub rx: Keys,
    provider: Provider,
}

impl Records {
    /// From the secrets of a finished handshake (`None`: a version or AEAD this layer does
    /// not know, which rustls never negotiates with the suites ringx offers).
    pub fn new(
        provider: Provider,
        version: ProtocolVersion,
        tx: (u64, &ConnectionTrafficSecrets),
        rx: (u64, &ConnectionTrafficSecrets),
    ) -> Option<Records> {
        let tls13 = match version {
            ProtocolVersion::TLSv1_3 => true,
            ProtocolVersion::TLSv1_2 => false,
            _ => return None,
        };
        let explicit = !tls13 && !matches!(rx.1, ConnectionTrafficSecrets::Chacha20Poly1305 { .. });
        Some(Records {
            tls13,
            explicit,
            tx: Some(Keys::new(provider, tx.0, tx.1)?),
            rx: Keys::new(provider, rx.0, rx.1)?,
            provider,
        })
    }

    pub fn tls13(&self) -> bool {
        self.tls13
    }

    /// New keys for one direction after a KeyUpdate (sequence numbers start at 0).
    pub fn rekey(&self, s: &ConnectionTrafficSecrets) -> Option<Keys> {
        Keys::new(self.provider, 0, s)
    }

    /// Bytes before a record's plaintext.
    fn pre(&self) -> usize {
        HDR + if self.explicit { 8 } else { 0 }
    }

    /// Bytes a record adds around its plaintext, at most.
    pub fn overhead(&self) -> usize {
        self.pre() + TAG + usize::from(self.tls13)
    }

    /// Appends records of type `typ` carrying `data` to `out` (nothing while the kernel
    /// seals: see [`Records::tx`]).
    pub fn seal(&mut self, typ: u8, data: &[u8], out: &mut Vec<u8>) {
        for chunk in data.chunks(MAX_PLAIN) {
            let start = out.len();
            out.reserve(chunk.len() + self.overhead());
            out.resize(start + self.pre(), 0);
            out.extend_from_slice(chunk);
            self.finish(typ, start, out);
        }
    }

    /// Appends one record of application data read from `file` at `off` (at most `len`
    /// bytes, at most [`MAX_PLAIN`]): the bytes are read into `out` where the record's
    /// plaintext goes and sealed there. Returns the bytes read (0: end of file).
    pub fn seal_file(
        &mut self,
        file: &File,
        off: u64,
        len: usize,
        out: &mut Vec<u8>,
    ) -> std::io::Result<usize> {
        let len = len.min(MAX_PLAIN);
        let start = out.len();
        let pre = self.pre();
        out.reserve(pre + len + TAG + 1);
        out.resize(start + pre, 0);
        let spare = out.spare_capacity_mut();
        // SAFETY: `spare` is the vector's own unused capacity, at least `len` bytes (reserved
        // above); pread writes at most `len` bytes there and keeps no pointer. Only the bytes
        // it reports written become part of the vector (set_len below), so no uninitialised
        // byte is ever read.
        let n = unsafe {
            libc::pread(
                file.as_raw_fd(),
                spare.as_mut_ptr().cast(),
                len,
                off as libc::off_t,
            )
        };
        if n < 0 {
            out.truncate(start);
            return Err(std::io::Error::last_os_error());
        }
        if n == 0 {
            out.truncate(start);
            return Ok(0);
        }
        // SAFETY: pread initialised the first `n` (<= len, within the capacity) spare bytes.
        unsafe { out.set_len(start + pre + n as usize) };
        self.finish(APPLICATION_DATA, start, out);
        Ok(n as usize)
    }

    /// One record of `data` whatever its length (an empty one too), for tests that play a
    /// peer breaking the rules.
    #[cfg(test)]
    pub(crate) fn seal_one(&mut self, typ: u8, data: &[u8], out: &mut Vec<u8>) {
        let start = out.len();
        out.resize(start + self.pre(), 0);
        out.extend_from_slice(data);
        self.finish(typ, start, out);
    }

    /// Seals the record whose header space starts at `start` and whose plaintext is the rest
    /// of `out`.
    fn finish(&mut self, typ: u8, start: usize, out: &mut Vec<u8>) {
        let Some(tx) = self.tx.as_mut() else {
            debug_assert!(false, "sealing while the kernel seals");
            out.truncate(start);
            return;
        };
        let pre = HDR + if self.explicit { 8 } else { 0 };
        let plain = out.len() - start - pre;
        if self.tls13 {
            out.push(typ);
        }
        let body = out.len() - start - HDR + TAG;
        let outer = if self.tls13 { APPLICATION_DATA } else { typ };
        let hdr = [outer, 3, 3, (body >> 8) as u8, body as u8];
        out[start..start + HDR].copy_from_slice(&hdr);
        if tx.seq == u64::MAX {
            // RFC 8446 §5.3: a sequence number never wraps (nonce reuse). Not reached: the
            // connection re-keys or ends at its record limit, far below (Traffic::before_seal).
            out.truncate(start);
            return;
        }
        let nonce = tx.nonce();
        let mut aad = [0u8; 13];
        let aad_len = if self.tls13 {
            aad[..HDR].copy_from_slice(&hdr);
            HDR
        } else {
            aad[..8].copy_from_slice(&tx.seq.to_be_bytes());
            aad[8..].copy_from_slice(&[typ, 3, 3, (plain >> 8) as u8, plain as u8]);
            13
        };
        if self.explicit {
            out[start + HDR..start + pre].copy_from_slice(&nonce[4..]);
        }
        let Some(tag) = tx.key.seal(nonce, &aad[..aad_len], &mut out[start + pre..]) else {
            // Only a plaintext longer than the AEAD allows fails, and records are 16 KiB.
            debug_assert!(false, "AEAD seal failed");
            out.truncate(start);
            return;
        };
        out.extend_from_slice(&tag);
        tx.seq += 1;
    }

    /// Opens the record at the front of `buf` in place. `None`: the record is not complete
    /// yet; `Some(Err)`: the connection must end with that alert.
    pub fn open(&mut self, buf: &mut [u8]) -> Option<Result<Opened, Fault>> {
        if buf.len() < HDR {
            return None;
        }
        let typ = buf[0];
        let len = usize::from(u16::from_be_bytes([buf[3], buf[4]]));
        if buf[1] != 3 || buf[2] != 3 {
            return Some(Err(fault(alert::DECODE_ERROR, "record version is not 3.3")));
        }
        // RFC 8446 §5.2: 2^14 + 256 at most; RFC 5246 §6.2.3: 2^14 + 2048.
        let max = MAX_PLAIN + if self.tls13 { 256 } else { 2048 };
        if len > max {
            return Some(Err(fault(alert::RECORD_OVERFLOW, "record too long")));
        }
        if buf.len() < HDR + len {
            return None;
        }
        Some(self.open_whole(typ, len, &mut buf[..HDR + len]))
    }

    fn open_whole(&mut self, typ: u8, len: usize, rec: &mut [u8]) -> Result<Opened, Fault> {
        let explicit = if self.explicit { 8 } else { 0 };
        let protected = if self.tls13 {
            typ == APPLICATION_DATA
        } else {
            matches!(typ, ALERT | HANDSHAKE | APPLICATION_DATA)
        };
        if !protected {
            // A ChangeCipherSpec or a plaintext alert after the handshake.
            return Err(fault(alert::UNEXPECTED_MESSAGE, "unexpected record type"));
        }
        if len < explicit + TAG + usize::from(self.tls13) {
            return Err(fault(alert::BAD_RECORD_MAC, "record shorter than its tag"));
        }
        let rx = &mut self.rx;
        if rx.seq == u64::MAX {
            // RFC 8446 §5.3: the peer had to re-key (or end) before its sequence numbers wrap.
            return Err(fault(
                alert::UNEXPECTED_MESSAGE,
                "the client's record sequence numbers are used up",
            ));
        }
        let (hdr, payload) = rec.split_at_mut(HDR);
        let (nonce, aad, body) = if self.tls13 {
            let mut aad = [0u8; 13];
            aad[..HDR].copy_from_slice(hdr);
            (rx.nonce(), (aad, HDR), payload)
        } else {
            let plain = len - explicit - TAG;
            let mut aad = [0u8; 13];
            aad[..8].copy_from_slice(&rx.seq.to_be_bytes());
            aad[8..].copy_from_slice(&[typ, 3, 3, (plain >> 8) as u8, plain as u8]);
            let mut nonce = rx.nonce();
            let (ex, body) = payload.split_at_mut(explicit);
            if explicit > 0 {
                nonce[4..].copy_from_slice(ex);
            }
            (nonce, (aad, 13), body)
        };
        let Some(n) = rx.key.open(nonce, &aad.0[..aad.1], body) else {
            return Err(fault(alert::BAD_RECORD_MAC, "record failed to decrypt"));
        };
        rx.seq += 1;
        let start = HDR + explicit;
        // RFC 8446 §5.4: the inner plaintext (content, type and padding) is at most 2^14 + 1
        // bytes; RFC 5246 §6.2.1: a TLS 1.2 plaintext at most 2^14.
        if n > MAX_PLAIN + usize::from(self.tls13) {
            return Err(fault(alert::RECORD_OVERFLOW, "plaintext too long"));
        }
        let (typ, n) = if self.tls13 {
            // The content type is the last non-zero byte; zeros after it are padding.
            let Some(at) = body[..n].iter().rposition(|&b| b != 0) else {
                return Err(fault(
                    alert::UNEXPECTED_MESSAGE,
                    "record without a content type",
                ));
            };
            (body[at], at)
        } else {
            (typ, n)
        };
        Ok(Opened {
            typ,
            start,
            len: n,
            consumed: HDR + len,
        })
    }
}

#[cfg(test)]
mod tests;
