//! Events on the zone's multiplexed gRPC upstream connections: no one client owns such a
//! connection, so what happens on it (`role::grpc::pool::on_upstream`) becomes events for
//! the calls on it, which the zone delivers to the HTTP/2 and HTTP/3 client streams that
//! made them.

use ringx_engine::ConnId;

use crate::ctx::Cx;
use crate::role::grpc::mux::{CallEvent, Owner};
use crate::role::grpc::pool;
use crate::role::upstream::{UpEvent, UpTable};

/// Whether `u` is a multiplexed gRPC connection.
pub(super) fn is_grpc(ups: &UpTable, u: ConnId) -> bool {
    ups.get(u).is_some_and(|x| x.mux.is_some())
}

/// An event on gRPC connection `u`: what it means for the calls on it, for the zone to
/// deliver to their streams (`ClientRole::H2`'s `grpc_event`, or `Quic`'s for HTTP/3).
pub(super) fn event(cx: &mut Cx, u: ConnId, ev: UpEvent) -> Vec<(Owner, CallEvent)> {
    let mut out = Vec::new();
    pool::on_upstream(cx, u, ev, &mut out);
    out
}
