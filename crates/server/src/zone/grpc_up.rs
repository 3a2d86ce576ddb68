//! Events on the zone's multiplexed gRPC upstream connections: no one client owns such a
//! connection, so what happens on it (`role::grpc::pool::on_upstream`) becomes events for
//! the calls on it, delivered here to the HTTP/2 client streams that made them.

use ringx_engine::{ConnId, Io};

use super::ctx::{Cx, ZoneCtx};
use super::Client;
use crate::role::grpc::pool;
use crate::role::upstream::{UpEvent, UpTable};
use crate::role::ClientRole;

/// Whether `u` is a multiplexed gRPC connection.
pub(super) fn is_grpc(ups: &UpTable, u: ConnId) -> bool {
    ups.get(u).is_some_and(|x| x.mux.is_some())
}

/// An event on gRPC connection `u`, and its calls' events to their streams.
pub(super) fn event(
    io: &mut Io,
    ctx: &mut ZoneCtx,
    ups: &mut UpTable,
    clients: &mut [Client],
    u: ConnId,
    ev: UpEvent,
) {
    let mut cx = Cx { io, ctx, ups };
    let mut out = Vec::new();
    pool::on_upstream(&mut cx, u, ev, &mut out);
    for (owner, ev) in out {
        let Some(Client { base, role }) = clients
            .get_mut(owner.c.index())
            .filter(|x| x.base.gen == owner.gen)
        else {
            // The client went away: its stream was let go when it did.
            continue;
        };
        if let ClientRole::H2(h) = role {
            h.grpc_event(&mut cx, base, owner.c, owner.sid, ev);
            base.tr.seal(cx.io, owner.c);
        }
    }
}
