//! Steering of the HTTP/3 sockets at start and on a reload that adds one: each QUIC packet
//! to the zone its connection ID names (`ringx_steer::quic`).

/// [`ringx_steer::quic::steer_zones`] over the UDP sockets that serve HTTP/3 (`quic = true`):
/// `per_zone[z]` holds zone z's listeners, each with its address.
pub fn steer<'a>(
    routes: &ringx_server::route::Routes,
    per_zone: impl Iterator<
        Item = impl Iterator<Item = (std::net::SocketAddr, &'a ringx_engine::Listener)>,
    >,
) -> Vec<ringx_steer::quic::QuicSteering> {
    let groups: Vec<Vec<&std::net::UdpSocket>> = per_zone
        .map(|ls| {
            ls.filter_map(|(addr, l)| match l {
                ringx_engine::Listener::Udp(u) if routes.serves_quic(addr) => Some(u),
                _ => None,
            })
            .collect()
        })
        .collect();
    ringx_steer::quic::steer_zones(&groups, ringx_server::role::h3::CID_LAYOUT)
}
