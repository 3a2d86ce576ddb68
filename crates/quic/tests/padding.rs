//! The packet keys quinn-proto gets from a zone's configuration leave off a decrypted
//! packet's trailing PADDING (`padding.rs`): a client's Initial, padded to 1,200 bytes,
//! reaches quinn-proto as its frames and one byte of PADDING.

use std::sync::Arc;

use bytes::BytesMut;
use quinn_proto::crypto::rustls::QuicServerConfig;
use quinn_proto::crypto::ServerConfig as _;
use quinn_proto::ConnectionId;
use ringx_quic::handshake::ObservedConfig;

mod common;
use common::tls;

#[test]
fn a_client_initial_reaches_quinn_proto_without_its_padding() {
    let (server, _) = tls();
    let config = ObservedConfig::new(QuicServerConfig::try_from(Arc::new(server)).unwrap());
    let keys = config.initial_keys(1, &ConnectionId::new(&[7; 8])).unwrap();
    // A CRYPTO frame at offset 0 of 200 bytes, then PADDING to 1,100 bytes.
    let mut frames = vec![0x06, 0x00, 0x40, 200];
    frames.extend([9; 200]);
    let len = frames.len();
    frames.resize(1100, 0);
    // The client seals with the key the server decrypts with (the server's `remote`).
    let header = [0xc3u8; 20];
    let mut packet = header.to_vec();
    packet.extend(&frames);
    packet.resize(packet.len() + keys.packet.remote.tag_len(), 0);
    keys.packet.remote.encrypt(5, &mut packet, header.len());
    let mut payload = BytesMut::from(&packet[header.len()..]);
    keys.packet
        .remote
        .decrypt(5, &header, &mut payload)
        .unwrap();
    assert_eq!(&payload[..], &frames[..len + 1]);
}
