//! Unit-test harness: a [`Zone`] built from a configuration text, driven through the engine's
//! [`TestDriver`] (no socket, no thread, a scripted clock), with helpers that play the client
//! and the upstream servers and parse what each of them received.
//!
//! **Do the tests catch what they guard?** `make mutants` (`scripts/mutation_check.py`) runs
//! each unit test of the roles and the zone against a mutation of the production code that
//! breaks the behaviour the test guards (a dropped statement, a loosened condition, an
//! off-by-one, the wrong timeout) and expects it to fail; the results are kept in
//! `scripts/mutation_check.json`. A new test gets an entry in the script's table;
//! `python3 scripts/mutation_check.py --only NAME` checks one.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{mpsc, Arc};
use std::time::Duration;

use ringx_engine::testio::TestDriver;
use ringx_engine::{ConnId, ListenerId};

use crate::ctx::reqlog::RequestLog;
use crate::metrics::ZoneCounters;
use crate::upstream::connector::Connector;
use crate::zone::{Zone, ZoneCtl, ZoneEvent, ZoneSetup};
use crate::Compiled;

/// The client address the harness's connections come from.
pub const PEER: &str = "192.0.2.10:40000";

/// A zone under test.
pub struct Harness {
    pub t: TestDriver,
    pub z: Zone,
    pub ctl: Arc<ZoneCtl>,
    pub events: mpsc::Receiver<ZoneEvent>,
    pub counters: Arc<ZoneCounters>,
    /// Upstream connections by the address they were opened to, in order.
    pub dialed: Vec<(ConnId, SocketAddr)>,
    /// TCP listeners (the UDP ones follow them).
    tcp_listeners: u32,
}

impl Harness {
    /// A zone serving `toml` (its listen addresses are not bound: connections are accepted
    /// on listener `i` for the `i`-th distinct address).
    pub fn new(toml: &str) -> Harness {
        Harness::with_max_conns(toml, 1024)
    }

    /// A zone holding at most `max_conns` client connections.
    pub fn with_max_conns(toml: &str, max_conns: u32) -> Harness {
        Harness::build(toml, max_conns, None)
    }

    /// A zone with an auth pool of one worker, which the test runs
    /// ([`Worker::run_one`](crate::guard::verify::Worker::run_one), then [`Harness::wake`]).
    pub fn with_auth_pool(toml: &str) -> (Harness, crate::guard::verify::Worker) {
        let w = ringx_engine::Waker::new().expect("eventfd");
        let (mut workers, mut ends) = crate::guard::verify::unstarted(1, &[w]);
        (Harness::build(toml, 1024, ends.pop()), workers.remove(0))
    }

    /// A zone serving `toml` with `quic = true` on every server, on its plain listeners: the
    /// routes (and the `Alt-Svc` they add) are compiled as for TLS ones, which `ringx check`
    /// asks QUIC servers to be, without certificates.
    pub fn with_quic(toml: &str) -> Harness {
        let mut cfg = ringx_config::parse("test.toml", toml).unwrap_or_else(|e| panic!("{e}"));
        for s in &mut cfg.server {
            *s.get_mut().quic.get_mut() = true;
        }
        Harness::from_config(&cfg, 1024, None)
    }

    fn build(
        toml: &str,
        max_conns: u32,
        verify: Option<crate::guard::verify::ZoneVerify>,
    ) -> Harness {
        let cfg = ringx_config::parse("test.toml", toml).unwrap_or_else(|e| panic!("{e}"));
        Harness::from_config(&cfg, max_conns, verify)
    }

    fn from_config(
        cfg: &ringx_config::Config,
        max_conns: u32,
        verify: Option<crate::guard::verify::ZoneVerify>,
    ) -> Harness {
        let c = Compiled::from(cfg).unwrap_or_else(|e| panic!("{e}"));
        let (tx, events) = mpsc::channel();
        let ctl = Arc::new(ZoneCtl::new());
        let counters = Arc::new(ZoneCounters::default());
        let listeners = c.routes.listen.len();
        let udp_listeners = c.routes.udp_listen.len();
        let mut z = Zone::new(ZoneSetup {
            id: 0,
            routes: c.routes,
            settings: c.settings,
            upstreams: c.upstreams,
            ctl: ctl.clone(),
            events: tx,
            connector: Connector::new(None, None, Some(counters.clone())),
            log: RequestLog::new(counters.clone(), None, None),
            listeners: Vec::new(),
            max_conns,
            tls: c.tls,
            verify,
        });
        let mut t = TestDriver::with_limits(max_conns, 1024);
        for _ in 0..listeners {
            t.start_listener();
        }
        for _ in 0..udp_listeners {
            t.start_udp_listener();
        }
        t.start(&mut z);
        Harness {
            t,
            z,
            ctl,
            events,
            counters,
            dialed: Vec::new(),
            tcp_listeners: listeners as u32,
        }
    }

    /// The engine's id of the UDP listener for the `i`-th UDP listen address.
    pub fn udp_listener(&self, i: u32) -> ListenerId {
        ListenerId(self.tcp_listeners + i)
    }

    /// A datagram from `peer` to the `i`-th UDP listen address.
    pub fn datagram(&mut self, i: u32, peer: &str, data: &[u8]) {
        self.datagram_batch(i, peer, &[data]);
    }

    /// Datagrams from `peer` to the `i`-th UDP listen address, in one batch.
    pub fn datagram_batch(&mut self, i: u32, peer: &str, data: &[&[u8]]) {
        let peer = peer.parse().expect("a socket address");
        let dgs: Vec<_> = data
            .iter()
            .map(|d| ringx_engine::Datagram {
                peer,
                local: None,
                data: d,
                truncated: false,
                segment: 0,
                ecn: 0,
            })
            .collect();
        let l = self.udp_listener(i);
        self.t.datagram_batch(&mut self.z, l, &dgs);
    }

    /// Datagrams the zone sent since the last call.
    pub fn datagrams(&mut self) -> Vec<(ringx_engine::testio::SentTo, Vec<u8>)> {
        self.t.take_datagrams()
    }

    /// A client connection on the first listener.
    pub fn client(&mut self) -> ConnId {
        self.client_on(0)
    }

    /// A client connection on the first listener from `peer` (`"203.0.113.5:1234"`).
    pub fn client_from(&mut self, peer: &str) -> ConnId {
        let peer: SocketAddr = peer.parse().expect("a socket address");
        self.t.accept(&mut self.z, ListenerId(0), Some(peer))
    }

    pub fn client_on(&mut self, listener: u32) -> ConnId {
        let peer: SocketAddr = PEER.parse().expect("valid");
        self.t.accept(&mut self.z, ListenerId(listener), Some(peer))
    }

    pub fn send(&mut self, c: ConnId, bytes: &[u8]) {
        self.t.recv(&mut self.z, c, bytes);
    }

    /// The zone is woken (as the control thread or the auth pool wakes it).
    pub fn wake(&mut self) {
        self.t.wake(&mut self.z);
    }

    pub fn eof(&mut self, c: ConnId) {
        self.t.eof(&mut self.z, c);
    }

    pub fn reset(&mut self, c: ConnId) {
        self.t.reset(
            &mut self.z,
            c,
            std::io::Error::from_raw_os_error(libc::ECONNRESET),
        );
    }

    pub fn advance(&mut self, by: Duration) {
        self.t.advance(&mut self.z, by);
    }

    pub fn flush(&mut self) {
        self.t.flush(&mut self.z);
    }

    /// Bytes the peer of `c` received since the last call.
    pub fn output(&mut self, c: ConnId) -> Vec<u8> {
        self.t.take_output(c)
    }

    /// The complete responses `c` received since the last call.
    pub fn responses(&mut self, c: ConnId) -> Vec<Resp> {
        parse_responses(&self.t.take_output(c))
    }

    /// The one response `c` received since the last call.
    pub fn response(&mut self, c: ConnId) -> Resp {
        let mut r = self.responses(c);
        assert_eq!(r.len(), 1, "expected one response, got {r:?}");
        r.remove(0)
    }

    /// Upstream connects asked for since the last call (recorded in `dialed` too).
    pub fn connects(&mut self) -> Vec<(ConnId, SocketAddr)> {
        let new: Vec<_> = self
            .t
            .take_connects()
            .into_iter()
            .map(|(u, to)| (u, to.addr))
            .collect();
        self.dialed.extend(&new);
        new
    }

    /// The one new upstream connect, completed.
    pub fn accept_upstream(&mut self) -> (ConnId, SocketAddr) {
        let mut c = self.connects();
        assert_eq!(c.len(), 1, "expected one upstream connect, got {c:?}");
        let (u, a) = c.remove(0);
        self.t.connected(&mut self.z, u);
        (u, a)
    }

    pub fn upstream_refuses(&mut self, u: ConnId) {
        self.t.connect_failed(
            &mut self.z,
            u,
            std::io::Error::from_raw_os_error(libc::ECONNREFUSED),
        );
    }

    /// Sends the zone a reload to `toml` (generation `generation`); `upstreams`: whether the
    /// upstreams changed (the zone then rebuilds its upstream state); `deadline`: how long
    /// requests in flight may go on with the old upstreams.
    pub fn reload(&mut self, toml: &str, generation: u64, upstreams: bool, deadline: Duration) {
        let cfg = ringx_config::parse("t.toml", toml).unwrap_or_else(|e| panic!("{e}"));
        let c = Compiled::from(&cfg).unwrap_or_else(|e| panic!("{e}"));
        let msg = crate::zone::ReloadMsg {
            generation,
            routes: c.routes,
            settings: c.settings,
            upstreams: upstreams.then_some(c.upstreams),
            listeners: Vec::new(),
            log: None,
            deadline,
            tls: c.tls,
        };
        self.ctl
            .inbox
            .lock()
            .expect("inbox")
            .push(crate::zone::ZoneMsg::Reload(Box::new(msg)));
        self.t.wake(&mut self.z);
    }

    /// Tells the zone to drain, as the control thread does, and wakes it.
    pub fn drain(&mut self) {
        let drain = crate::zone::CMD_DRAIN;
        self.ctl
            .cmd
            .store(drain, std::sync::atomic::Ordering::Release);
        self.t.wake(&mut self.z);
    }

    /// Whether the zone reported a reload applied since the last look at its events.
    pub fn reloaded(&mut self) -> bool {
        self.events
            .try_iter()
            .any(|e| matches!(e, ZoneEvent::Reloaded { .. }))
    }

    /// Requests upstream connection `u` received since the last call.
    pub fn upstream_got(&mut self, u: ConnId) -> Vec<u8> {
        self.t.take_output(u)
    }
}

/// A self-signed ECDSA P-256 certificate for `name`: its PEM, its key's PEM and its DER.
pub fn self_signed(name: &str) -> (String, String, Vec<u8>) {
    let key = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).unwrap();
    let cert = rcgen::CertificateParams::new(vec![name.to_string()])
        .unwrap()
        .self_signed(&key)
        .unwrap();
    (cert.pem(), key.serialize_pem(), cert.der().to_vec())
}

/// A temporary directory removed when dropped.
pub struct TempDir(pub PathBuf);

impl TempDir {
    pub fn new(files: &[(&str, &[u8])]) -> TempDir {
        static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!("ringx-unit-{}-{n}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        for (name, body) in files {
            let p = dir.join(name);
            if let Some(parent) = p.parent() {
                std::fs::create_dir_all(parent).expect("dirs");
            }
            std::fs::write(p, body).expect("write");
        }
        TempDir(dir)
    }

    pub fn path(&self) -> &str {
        self.0.to_str().expect("utf-8 temp path")
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A response as a client parses it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resp {
    pub status: u16,
    /// Header names in lowercase, in order.
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Resp {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }

    /// Whether the response announces the close of its connection.
    pub fn closes(&self) -> bool {
        self.header("connection")
            .is_some_and(|v| v.eq_ignore_ascii_case("close"))
    }

    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
}

/// Every complete response in `buf` (bodies framed by Content-Length, chunked, or for 1xx,
/// 204, 304 none; a body without framing runs to the end of `buf`).
pub fn parse_responses(mut buf: &[u8]) -> Vec<Resp> {
    let mut out = Vec::new();
    while !buf.is_empty() {
        let mut headers = [httparse::EMPTY_HEADER; 64];
        let mut r = httparse::Response::new(&mut headers);
        let Ok(httparse::Status::Complete(n)) = r.parse(buf) else {
            break;
        };
        let status = r.code.expect("status");
        let hs: Vec<(String, String)> = r
            .headers
            .iter()
            .map(|h| {
                (
                    h.name.to_ascii_lowercase(),
                    String::from_utf8_lossy(h.value).into_owned(),
                )
            })
            .collect();
        let map: HashMap<_, _> = hs.iter().cloned().collect();
        buf = &buf[n..];
        let body = if (100..200).contains(&status) || status == 204 || status == 304 {
            Vec::new()
        } else if let Some(len) = map.get("content-length") {
            let len: usize = len.parse().expect("length");
            let b = buf[..len.min(buf.len())].to_vec();
            buf = &buf[len.min(buf.len())..];
            b
        } else if map
            .get("transfer-encoding")
            .is_some_and(|v| v.contains("chunked"))
        {
            let mut body = Vec::new();
            while let Some(eol) = buf.windows(2).position(|w| w == b"\r\n") {
                let size = usize::from_str_radix(
                    std::str::from_utf8(&buf[..eol])
                        .expect("size")
                        .split(';')
                        .next()
                        .expect("x"),
                    16,
                )
                .expect("hex size");
                buf = &buf[eol + 2..];
                if size == 0 {
                    let end = buf
                        .windows(2)
                        .position(|w| w == b"\r\n")
                        .expect("trailer end");
                    buf = &buf[end + 2..];
                    break;
                }
                body.extend_from_slice(&buf[..size]);
                buf = &buf[size + 2..];
            }
            body
        } else {
            let b = buf.to_vec();
            buf = &[];
            b
        };
        out.push(Resp {
            status,
            headers: hs,
            body,
        });
    }
    out
}

/// A GET request for `path` with `Host: h.test`.
pub fn get(path: &str) -> Vec<u8> {
    format!("GET {path} HTTP/1.1\r\nHost: h.test\r\n\r\n").into_bytes()
}

/// Per-zone pools of an upstream `app` with `servers` servers (127.0.0.1:9001...) keeping
/// `keepalive` idle connections each.
pub fn pools(servers: usize, keepalive: u32) -> crate::upstream::pools::ZonePools {
    let list: Vec<String> = (0..servers)
        .map(|i| format!("\"127.0.0.1:{}\"", 9001 + i))
        .collect();
    let toml = format!(
        "[[server]]\nlisten = [\"127.0.0.1:8080\"]\n[[server.location]]\npath = \"/\"\nproxy_pass = \"app\"\n\
         [[upstream]]\nname = \"app\"\nservers = [{}]\nkeepalive = {keepalive}\n",
        list.join(", ")
    );
    let cfg = ringx_config::parse("t.toml", &toml).unwrap_or_else(|e| panic!("{e}"));
    let c = Compiled::from(&cfg).unwrap_or_else(|e| panic!("{e}"));
    crate::upstream::pools::ZonePools::new(c.upstreams.expect("an upstream"), 0)
}
