//! A new connection's Initial keys, derived once rather than twice.
//!
//! quinn-proto derives a connection's Initial keys from the client's first destination
//! connection ID (RFC 9001 §5.2) twice on the server: once to open the first packet
//! (`ServerConfig::initial_keys`, the keys the `Incoming` holds) and again when the
//! connection is made from it (`Session::initial_keys`). A derivation is HKDF and four AES
//! key schedules, about 4 µs here, some 1.3% of what a new HTTP/3 connection costs the zone
//! (`perf`, bench/README.md "HTTP/3"). The keys are a function of the version and the
//! connection ID alone and hold no state (a packet's nonce comes from its number), so the
//! connection can share the set its first packet was opened with: [`LastInitial`] keeps the
//! last set the configuration derived, and the session started for that connection takes
//! it. Any other request, or a set taken already, derives as before.

use std::sync::{Arc, Mutex};

use bytes::BytesMut;
use quinn_proto::crypto::{CryptoError, HeaderKey, KeyPair, Keys, PacketKey};
use quinn_proto::ConnectionId;

/// The Initial keys a configuration derived last, for the session of the same connection.
#[derive(Default)]
pub struct LastInitial(Mutex<Option<Last>>);

/// A set of Initial keys and what it was derived for.
struct Last {
    version: u32,
    cid: ConnectionId,
    keys: SharedKeys,
}

impl LastInitial {
    /// `keys`, just derived for `version` and `cid`, made shareable: what is returned goes
    /// to the caller, a second handle stays here for [`take`](Self::take).
    pub fn keep(&self, version: u32, cid: &ConnectionId, keys: Keys) -> Keys {
        let keys = SharedKeys::new(keys);
        let out = keys.handles();
        let last = Last {
            version,
            cid: *cid,
            keys,
        };
        *self.0.lock().unwrap_or_else(|e| e.into_inner()) = Some(last);
        out
    }

    /// The keys last kept, if they were derived for `version` and `cid`; once.
    pub fn take(&self, version: u32, cid: &ConnectionId) -> Option<Keys> {
        let mut last = self.0.lock().unwrap_or_else(|e| e.into_inner());
        match last.as_ref() {
            Some(l) if l.version == version && l.cid == *cid => {
                last.take().map(|l| l.keys.handles())
            }
            _ => None,
        }
    }
}

/// A set of keys, each behind an `Arc` so that two connections' worth of handles use it.
struct SharedKeys {
    header: KeyPair<Arc<dyn HeaderKey>>,
    packet: KeyPair<Arc<dyn PacketKey>>,
}

impl SharedKeys {
    fn new(k: Keys) -> SharedKeys {
        SharedKeys {
            header: KeyPair {
                local: Arc::from(k.header.local),
                remote: Arc::from(k.header.remote),
            },
            packet: KeyPair {
                local: Arc::from(k.packet.local),
                remote: Arc::from(k.packet.remote),
            },
        }
    }

    /// A set of quinn-proto keys using these.
    fn handles(&self) -> Keys {
        Keys {
            header: KeyPair {
                local: Box::new(SharedHeader(self.header.local.clone())),
                remote: Box::new(SharedHeader(self.header.remote.clone())),
            },
            packet: KeyPair {
                local: Box::new(SharedPacket(self.packet.local.clone())),
                remote: Box::new(SharedPacket(self.packet.remote.clone())),
            },
        }
    }
}

/// A header protection key another handle may use too.
struct SharedHeader(Arc<dyn HeaderKey>);

impl HeaderKey for SharedHeader {
    fn decrypt(&self, pn_offset: usize, packet: &mut [u8]) {
        self.0.decrypt(pn_offset, packet)
    }

    fn encrypt(&self, pn_offset: usize, packet: &mut [u8]) {
        self.0.encrypt(pn_offset, packet)
    }

    fn sample_size(&self) -> usize {
        self.0.sample_size()
    }
}

/// A packet protection key another handle may use too.
struct SharedPacket(Arc<dyn PacketKey>);

impl PacketKey for SharedPacket {
    fn encrypt(&self, packet: u64, buf: &mut [u8], header_len: usize) {
        self.0.encrypt(packet, buf, header_len)
    }

    fn decrypt(
        &self,
        packet: u64,
        header: &[u8],
        payload: &mut BytesMut,
    ) -> Result<(), CryptoError> {
        self.0.decrypt(packet, header, payload)
    }

    fn tag_len(&self) -> usize {
        self.0.tag_len()
    }

    fn confidentiality_limit(&self) -> u64 {
        self.0.confidentiality_limit()
    }

    fn integrity_limit(&self) -> u64 {
        self.0.integrity_limit()
    }
}

#[cfg(test)]
impl LastInitial {
    /// Whether no set waits to be taken.
    pub(crate) fn is_empty(&self) -> bool {
        self.0.lock().unwrap().is_none()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rustls::quic::{Keys as TlsKeys, Version};
    use rustls::Side;

    const V1: u32 = 1;

    /// The Initial keys RFC 9001 §5.2 derives for `cid`, as quinn-proto's rustls glue hands
    /// them over.
    fn derive(cid: &[u8], side: Side) -> Keys {
        let suite = match rustls::crypto::aws_lc_rs::cipher_suite::TLS13_AES_128_GCM_SHA256 {
            rustls::SupportedCipherSuite::Tls13(s) => s,
            _ => unreachable!(),
        };
        let k = TlsKeys::initial(Version::V1, suite, suite.quic.unwrap(), cid, side);
        Keys {
            header: KeyPair {
                local: Box::new(k.local.header),
                remote: Box::new(k.remote.header),
            },
            packet: KeyPair {
                local: Box::new(k.local.packet),
                remote: Box::new(k.remote.packet),
            },
        }
    }

    #[test]
    fn a_kept_set_is_taken_once_and_only_for_its_connection() {
        let (a, b) = (ConnectionId::new(&[1; 8]), ConnectionId::new(&[2; 8]));
        let last = LastInitial::default();
        let _first = last.keep(V1, &a, derive(&a, Side::Server));
        assert!(last.take(V1, &b).is_none(), "another connection's keys");
        assert!(
            last.take(0xff00_001d, &a).is_none(),
            "another version's keys"
        );
        assert!(last.take(V1, &a).is_some());
        assert!(last.take(V1, &a).is_none(), "taken twice");
        assert!(last.is_empty());
        // A newer derivation replaces the one not taken.
        let _ = last.keep(V1, &a, derive(&a, Side::Server));
        let _ = last.keep(V1, &b, derive(&b, Side::Server));
        assert!(last.take(V1, &a).is_none());
        assert!(last.take(V1, &b).is_some());
    }

    #[test]
    fn both_handles_protect_as_the_keys_they_share() {
        let cid = ConnectionId::new(&[7; 8]);
        let last = LastInitial::default();
        let first = last.keep(V1, &cid, derive(&cid, Side::Server));
        let second = last.take(V1, &cid).unwrap();
        let client = derive(&cid, Side::Client);
        let header = [
            0xc3u8, 0, 0, 0, 1, 8, 7, 7, 7, 7, 7, 7, 7, 7, 0, 0, 0x40, 0x20, 0, 0,
        ];
        let payload = [0x06u8; 32];
        let seal = |k: &Keys| {
            let mut buf = header.to_vec();
            buf.extend_from_slice(&payload);
            buf.extend_from_slice(&[0; 16]);
            k.packet.local.encrypt(5, &mut buf, header.len());
            buf
        };
        // The server's two handles seal alike, and the client opens what they seal.
        let sealed = seal(&first);
        assert_eq!(sealed, seal(&second));
        let mut body = BytesMut::from(&sealed[header.len()..]);
        client.packet.remote.decrypt(5, &header, &mut body).unwrap();
        assert_eq!(&body[..], &payload[..]);
        // And the server's handles open what the client seals.
        let mut buf = header.to_vec();
        buf.extend_from_slice(&payload);
        buf.extend_from_slice(&[0; 16]);
        client.packet.local.encrypt(9, &mut buf, header.len());
        for k in [&first, &second] {
            let mut body = BytesMut::from(&buf[header.len()..]);
            k.packet.remote.decrypt(9, &header, &mut body).unwrap();
            assert_eq!(&body[..], &payload[..]);
        }
        // Header protection masks alike.
        let mut a = sealed.clone();
        let mut b = sealed.clone();
        first.header.local.encrypt(18, &mut a);
        second.header.local.encrypt(18, &mut b);
        assert_eq!(a, b);
        client.header.remote.decrypt(18, &mut a);
        assert_eq!(a, sealed);
    }
}
