//! What a configuration reload does to the zone's HTTP/3 connections.
//!
//! A reload applies in place (`zone/control.rs`): a connection whose address is still
//! served routes its next request by the new routes, under its TCP twin's index in them.
//! A connection whose address is no longer served over HTTP/3 (its server is gone, or has
//! `quic = true` no more) is sent GOAWAY: the requests it sent are answered, then it closes,
//! as an HTTP/2 connection on a removed address does. Its UDP socket, which the routes no
//! longer name, stays open for it (and the steering keeps bringing its packets to this
//! zone) until the last such connection has closed; a new connection there is refused. A
//! later reload that serves the address over HTTP/3 again before then binds new sockets
//! beside it, and the new listener takes over the old one's connections ([`Quic::take_over`]).

use std::net::SocketAddr;
use std::sync::Weak;

use quinn_proto::ConnectionHandle;
use ringx_engine::ListenerId;

use super::Quic;
use crate::ctx::Cx;
use crate::zone::NO_ROUTE;

impl Quic {
    /// The reload closes UDP listener `listener` (its address is no longer served): true when
    /// it is a QUIC listener with connections, which keeps it open while they drain
    /// ([`Quic::relisten`]), false when the caller closes it now.
    pub fn retire(&mut self, listener: ListenerId) -> bool {
        let i = listener.0;
        let live = self.by_handle.keys().any(|&(l, _)| l == i);
        match self.listeners.get_mut(i as usize).and_then(Option::as_mut) {
            Some(l) if live => {
                l.retiring = true;
                true
            }
            Some(_) => {
                self.listeners[i as usize] = None;
                false
            }
            None => false,
        }
    }

    /// The TCP twin's index a retiring listener's connections were accepted under, for its
    /// datagrams, which the new routes no longer route (None: not a retiring listener).
    pub fn retiring(&self, listener: ListenerId) -> Option<u32> {
        match self.listeners.get(listener.0 as usize) {
            Some(Some(l)) if l.retiring => Some(l.tcp),
            _ => None,
        }
    }

    /// After the zone installed the new routes (`cx.ctx.routes`): each connection takes its
    /// TCP twin's index in them (`old_listen` is the replaced routes' `listen`); one whose
    /// address is gone, or whose listener retires, is sent GOAWAY and drains.
    pub fn relisten(&mut self, cx: &mut Cx, old_listen: &[SocketAddr]) {
        let routes = cx.ctx.routes.clone();
        let index = |tcp: u32| -> Option<u32> {
            let addr = old_listen.get(tcp as usize)?;
            routes
                .listen
                .iter()
                .position(|a| a == addr)
                .map(|i| i as u32)
        };
        for l in self.listeners.iter_mut().flatten() {
            if !l.retiring {
                if let Some(i) = index(l.tcp) {
                    l.tcp = i;
                }
            }
        }
        let slots: Vec<u32> = self.by_handle.values().copied().collect();
        for slot in slots {
            let Some(c) = self.conns[slot as usize].as_mut() else {
                continue;
            };
            let retiring = self
                .listeners
                .get(c.listener.0 as usize)
                .and_then(Option::as_ref)
                .is_none_or(|l| l.retiring);
            let now = index(c.base.listener);
            c.base.listener = now.unwrap_or(NO_ROUTE);
            if retiring || now.is_none() {
                c.drain();
                self.drive(cx, slot);
            }
        }
    }

    /// HTTP/3 given back to the address of retiring listener `old` while its connections
    /// drain: the reload's new listener `new` there (serving `routes.listen[tcp]`) takes over
    /// its endpoint and connections, whose packets the new sockets' steering brings to it
    /// from now on (it replaced the old sockets' program in their reuseport group). Their
    /// GOAWAY has gone: they still end once their requests are answered. New connections
    /// are accepted there again, under the new configuration (made on the next datagram).
    /// The old socket is the caller's to close.
    pub fn take_over(&mut self, old: ListenerId, new: ListenerId, tcp: u32) {
        let Some(mut l) = self
            .listeners
            .get_mut(old.0 as usize)
            .and_then(Option::take)
        else {
            return;
        };
        l.retiring = false;
        l.tcp = tcp;
        l.routes = Weak::new();
        let i = new.0 as usize;
        if self.listeners.len() <= i {
            self.listeners.resize_with(i + 1, || None);
        }
        self.listeners[i] = Some(l);
        let moved: Vec<(ConnectionHandle, u32)> = self
            .by_handle
            .iter()
            .filter(|((l, _), _)| *l == old.0)
            .map(|(&(_, h), &slot)| (h, slot))
            .collect();
        for (h, slot) in moved {
            self.by_handle.remove(&(old.0, h));
            self.by_handle.insert((new.0, h), slot);
            if let Some(c) = self.conns[slot as usize].as_mut() {
                c.listener = new;
                c.base.listener = tcp;
            }
        }
    }

    /// A connection of listener `listener` has gone: a retiring listener whose last
    /// connection it was is closed.
    pub(super) fn gone_from(&mut self, cx: &mut Cx, listener: ListenerId) {
        let i = listener.0;
        let retiring = matches!(self.listeners.get(i as usize), Some(Some(l)) if l.retiring);
        if retiring && !self.by_handle.keys().any(|&(l, _)| l == i) {
            self.listeners[i as usize] = None;
            cx.io.close_listener(listener);
        }
    }
}
