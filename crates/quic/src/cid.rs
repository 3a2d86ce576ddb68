//! Connection IDs that name their owner: the zone (core) that holds the connection and,
//! behind `ringx lb`, the host. A packet's destination connection ID is all a receiver has
//! once the client moved to another address or port, so the reuseport program (and `ringx
//! lb`, as katran does) reads the owner from it and the packet reaches the zone that has the
//! connection's state, wherever it came from.
//!
//! The layout follows the QUIC-LB draft (draft-ietf-quic-load-balancers) in its plaintext
//! form:
//!
//! | byte | holds |
//! |---|---|
//! | 0 | config rotation (bits 7..5: [`ROTATION`]), the process generation (bit 4: [`EPOCH_BIT`]), then 4 random bits |
//! | 1 | the host (`ringx lb`'s backend id; 0 for a host alone) |
//! | 2 | the zone |
//! | 3..[`CID_LEN`] | a random nonce (9 bytes) |
//!
//! The generation bit tells the process that issued an ID from the one that replaced it by
//! a binary upgrade (each flips it): while the old process drains, packets of its
//! connections still reach it, those of the new one's reach the new one.
//!
//! Plaintext, not one of the draft's encrypted forms: a reuseport or XDP program cannot run
//! AES on every packet, and what an observer learns is only that two connection IDs belong to
//! the same zone of the same host, which every connection of that zone shares. The nonce
//! keeps each ID unpredictable and unlinkable otherwise (RFC 9000 §5.1).

use std::time::Duration;

use quinn_proto::{ConnectionId, ConnectionIdGenerator, InvalidCid};

/// The length of every connection ID ringx issues.
pub const CID_LEN: usize = 12;
/// The config rotation codepoint of IDs issued with this layout (the draft's bits 7..5 of the
/// first byte). 0b111 is reserved by the draft for IDs a load balancer cannot route.
pub const ROTATION: u8 = 0b000;
/// Where the host and the zone lie in an ID (what the steering programs read).
pub const HOST_BYTE: usize = 1;
pub const ZONE_BYTE: usize = 2;
/// The bit of an ID's first byte that holds the process generation (`Owner::epoch`).
pub const EPOCH_BIT: u8 = 0x10;

/// Who owns a connection: the host behind the balancer, the zone on that host, and the
/// generation of the process (0 or 1, flipped by each binary upgrade).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Owner {
    pub host: u8,
    pub zone: u8,
    pub epoch: u8,
}

impl Owner {
    /// The owner an ID names; None where it is not one of ours (another length, another
    /// config rotation: a client's own ID, or one a previous layout issued).
    pub fn of(cid: &[u8]) -> Option<Owner> {
        if cid.len() != CID_LEN || cid[0] >> 5 != ROTATION {
            return None;
        }
        Some(Owner {
            host: cid[HOST_BYTE],
            zone: cid[ZONE_BYTE],
            epoch: u8::from(cid[0] & EPOCH_BIT != 0),
        })
    }
}

/// Issues the IDs of one zone's connections (quinn-proto asks for one per new connection
/// and for each ID it hands the peer).
pub struct ZoneCids {
    owner: Owner,
    /// After this the IDs are retired and replaced (None: they live as long as the
    /// connection).
    lifetime: Option<Duration>,
}

impl ZoneCids {
    pub fn new(owner: Owner, lifetime: Option<Duration>) -> ZoneCids {
        ZoneCids { owner, lifetime }
    }
}

impl ConnectionIdGenerator for ZoneCids {
    fn generate_cid(&mut self) -> ConnectionId {
        let mut b = [0u8; CID_LEN];
        // An ID must be unpredictable (RFC 9000 §5.1): the nonce comes from the system's
        // cryptographic generator. It cannot fail on Linux short of a broken kernel; the
        // nonce is then left as it is, and the owner still routes the ID.
        let _ = aws_lc_rs::rand::fill(&mut b);
        let epoch = if self.owner.epoch & 1 == 1 {
            EPOCH_BIT
        } else {
            0
        };
        b[0] = (ROTATION << 5) | epoch | (b[0] & 0x0f);
        b[HOST_BYTE] = self.owner.host;
        b[ZONE_BYTE] = self.owner.zone;
        ConnectionId::new(&b)
    }

    fn validate(&self, cid: &ConnectionId) -> Result<(), InvalidCid> {
        match Owner::of(cid) {
            Some(o) if o == self.owner => Ok(()),
            _ => Err(InvalidCid),
        }
    }

    fn cid_len(&self) -> usize {
        CID_LEN
    }

    fn cid_lifetime(&self) -> Option<Duration> {
        self.lifetime
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_issued_id_names_its_owner_and_is_fresh_each_time() {
        let owner = Owner {
            host: 7,
            zone: 3,
            epoch: 1,
        };
        let mut g = ZoneCids::new(owner, None);
        let a = g.generate_cid();
        let b = g.generate_cid();
        assert_eq!(a.len(), CID_LEN);
        assert_eq!(Owner::of(&a), Some(owner));
        assert_eq!(Owner::of(&b), Some(owner));
        assert_ne!(a[3..], b[3..], "the nonces differ");
        assert!(g.validate(&a).is_ok());
        let other = ZoneCids::new(
            Owner {
                host: 7,
                zone: 4,
                epoch: 1,
            },
            None,
        );
        assert!(
            other.validate(&a).is_err(),
            "another zone's ID is not this zone's"
        );
        let before = ZoneCids::new(Owner { epoch: 0, ..owner }, None);
        assert!(
            before.validate(&a).is_err(),
            "the previous process's ID is not this one's"
        );
        assert_eq!(a[0] & EPOCH_BIT, EPOCH_BIT);
    }

    #[test]
    fn ids_of_another_layout_name_no_owner() {
        assert_eq!(Owner::of(&[0u8; 8]), None, "a client's 8-byte ID");
        let mut id = [0u8; CID_LEN];
        id[0] = 0b111 << 5;
        assert_eq!(Owner::of(&id), None, "another config rotation");
        id[0] = 0x0f; // rotation 0, generation 0, random bits set
        id[ZONE_BYTE] = 9;
        assert_eq!(
            Owner::of(&id),
            Some(Owner {
                host: 0,
                zone: 9,
                epoch: 0
            })
        );
        id[0] |= EPOCH_BIT;
        assert_eq!(
            Owner::of(&id),
            Some(Owner {
                host: 0,
                zone: 9,
                epoch: 1
            })
        );
    }
}
