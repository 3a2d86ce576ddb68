//! The pipeline's stages decided with no zone and no socket: a zone context built from a
//! configuration text, the engine's test I/O for its clock, and a connection's [`Base`] as
//! a client's would be. Every [`Step`] each stage makes is reached here.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use ringx_engine::testio::TestDriver;
use ringx_engine::ConnId;
use ringx_http::{parse_request, Limits, Parsed};

use super::serve::{self, Asked};
use super::{access, cache, RefusalLines, Step};
use crate::answer::ReqCtx;
use crate::ctx::base::Base;
use crate::ctx::reqlog::RequestLog;
use crate::ctx::{Cx, ZoneCtx};
use crate::guard::Progress;
use crate::metrics::ZoneCounters;
use crate::pipeline::routing;
use crate::role::exchange::capture::Capture;
use crate::role::upstream::UpTable;
use crate::testkit::TempDir;
use crate::upstream::connector::Connector;
use crate::upstream::pools::ZonePools;
use crate::Compiled;

/// One zone's context for the stages, and a client connection's base.
struct Stage {
    t: TestDriver,
    ctx: ZoneCtx,
    ups: UpTable,
    b: Base,
}

impl Stage {
    fn new(toml: &str) -> Stage {
        let cfg = ringx_config::parse("pipeline.toml", toml).unwrap_or_else(|e| panic!("{e}"));
        let c = Compiled::from(&cfg).unwrap_or_else(|e| panic!("{e}"));
        let counters = Arc::new(ZoneCounters::default());
        let pools = c.upstreams.map(|u| ZonePools::new(u, 0));
        let ctx = ZoneCtx::new(
            0,
            c.routes,
            c.settings,
            pools,
            Connector::new(None, None, Some(counters.clone())),
            RequestLog::new(counters, None, None),
        );
        let mut t = TestDriver::with_limits(16, 16);
        let mut b = Base::new(t.io().now());
        let peer: SocketAddr = "192.0.2.10:40000".parse().unwrap();
        b.open(0, Some(peer), None, Default::default(), t.io().now());
        Stage {
            t,
            ctx,
            ups: UpTable::default(),
            b,
        }
    }

    /// Runs `f` with the request `head` as HTTP/1 parses it, routed, and a [`Cx`].
    fn with<R>(
        &mut self,
        head: &str,
        f: impl FnOnce(&mut Cx, &mut Base, &ringx_http::Request, &routing::Route<'_>, &ReqCtx) -> R,
    ) -> R {
        let mut headers = [httparse::EMPTY_HEADER; 32];
        let Ok(Parsed::Complete(req)) =
            parse_request(head.as_bytes(), &mut headers, &Limits::default())
        else {
            panic!("not a request head: {head:?}");
        };
        let rq = ReqCtx::new(routing::conn_info(&self.b));
        let conn = || rq.conn;
        let route = routing::route(&self.ctx.routes, 0, &req, (conn, &rq.request_id));
        let mut cx = Cx {
            io: self.t.io(),
            ctx: &mut self.ctx,
            ups: &mut self.ups,
        };
        f(&mut cx, &mut self.b, &req, &route, &rq)
    }

    /// The access stage for `head`.
    fn access(&mut self, head: &str, progress: &mut Progress) -> Step {
        self.with(head, |cx, b, req, route, _| {
            let uri = route.path.as_deref().unwrap_or("");
            let at = route.at.expect("routed to a location");
            access::check(cx, b, (ConnId(1), 0), req, uri, at, progress)
        })
    }

    /// All the stages for `head`, as a role asking `asked`.
    fn serve(&mut self, head: &str, progress: &mut Progress, asked: Asked) -> Step {
        self.with(head, |cx, b, req, route, rq| {
            serve::serve(cx, b, (ConnId(1), 0), req, (route, rq), progress, asked)
        })
    }

    /// The cache stage for `head`.
    fn cache(&mut self, head: &str, progress: &mut Progress) -> Step {
        self.with(head, |cx, b, req, route, rq| {
            cache::step(cx, b, req, (route, rq), progress, true, None)
        })
    }
}

fn get(path: &str, extra: &str) -> String {
    format!("GET {path} HTTP/1.1\r\nHost: h.test\r\n{extra}\r\n")
}

const GUARDS: &str = r#"
[[limit_req_zone]]
name = "pipeline_delay"
key = "$remote_addr"
rate = "1r/s"
[[server]]
listen = ["127.0.0.1:8080"]
  [[server.location]]
  path = "/open/"
  access = ["allow 192.0.2.0/24", "deny all"]
  return = { status = 200 }
  [[server.location]]
  path = "/closed/"
  access = ["deny all"]
  return = { status = 200 }
  [[server.location]]
  path = "/slow/"
  limit_req = { zone = "pipeline_delay", burst = 5 }
  return = { status = 200 }
  [[server.location]]
  path = "/asked/"
  auth_request = { proxy_pass = "auth", uri = "/check" }
  return = { status = 200 }
[[upstream]]
name = "auth"
servers = ["127.0.0.1:9001"]
"#;

#[test]
fn the_access_stage_lets_a_request_go_refuses_delays_and_asks() {
    let mut s = Stage::new(GUARDS);
    let mut p = Progress::default();
    assert!(matches!(
        s.access(&get("/open/", ""), &mut p),
        Step::Go(None)
    ));
    match s.access(&get("/closed/", ""), &mut Progress::default()) {
        Step::Refuse { status, headers } => assert_eq!((status, headers.plain()), (403, "")),
        _ => panic!("deny all refuses"),
    }
    // Within the burst, over the rate: the second waits a second's share.
    let now = s.t.io().now();
    assert!(matches!(
        s.access(&get("/slow/", ""), &mut Progress::default()),
        Step::Go(None)
    ));
    match s.access(&get("/slow/", ""), &mut Progress::default()) {
        Step::WaitUntil(at) => {
            let d = at - now;
            assert!(d > Duration::ZERO && d <= Duration::from_secs(1), "{d:?}");
        }
        _ => panic!("over the rate within the burst: a delay"),
    }
    match s.access(
        &get("/asked/x?y=1", "Cookie: s=1\r\n"),
        &mut Progress::default(),
    ) {
        Step::Ask { upstream, head } => {
            let head = String::from_utf8(head).unwrap();
            assert_eq!(upstream, 0);
            assert!(head.starts_with("GET /check HTTP/1.1\r\n"), "{head}");
            assert!(head.contains("X-Original-URI: /asked/x?y=1\r\n"), "{head}");
            assert!(head.contains("Cookie: s=1\r\n"), "{head}");
        }
        _ => panic!("auth_request asks its upstream"),
    }
}

#[test]
fn the_access_stage_waits_for_the_auth_pool_with_a_slow_hash() {
    // bcrypt, cost 4: alice:secret.
    let users = "alice:$2y$04$PSP8EQ/tSO3IOd.ESMCCZOSVl7MNmbPFnP892W9X4fHnLGQe1p.RK\n";
    let dir = TempDir::new(&[("users", users.as_bytes())]);
    let mut s = Stage::new(&format!(
        r#"
[[server]]
listen = ["127.0.0.1:8080"]
  [[server.location]]
  path = "/g/"
  return = {{ status = 200 }}
  auth_basic = {{ realm = "r", user_file = "{}/users" }}
"#,
        dir.path()
    ));
    let w = ringx_engine::Waker::new().expect("eventfd");
    let (_workers, mut ends) = crate::guard::verify::unstarted(1, &[w]);
    s.ctx.guard.auth.pool = ends.pop();
    let mut p = Progress::default();
    match s.access(&get("/g/", ""), &mut p) {
        Step::Refuse { status, headers } => {
            assert_eq!(status, 401);
            let headers = headers.plain();
            assert!(
                headers.starts_with("WWW-Authenticate: Basic realm=\"r\""),
                "{headers}"
            );
        }
        _ => panic!("no credentials: 401 with the challenge"),
    }
    let alice = "Authorization: Basic YWxpY2U6c2VjcmV0\r\n";
    assert!(matches!(
        s.access(&get("/g/", alice), &mut p),
        Step::WaitVerify
    ));
}

/// A fill's response (200, `hi`, fresh for a minute) arrives whole and is stored.
fn fill_whole(s: &mut Stage, cap: &mut Capture) {
    cap.status = 200;
    cap.head =
        b"HTTP/1.1 200 OK\r\nCache-Control: max-age=60\r\nContent-Length: 2\r\n\r\n".to_vec();
    cap.body = b"hi".to_vec();
    cap.complete = true;
    let now = s.t.io().now();
    cache::finish(cap, s.ctx.wall_ms(now));
}

fn cached(dir: &TempDir) -> String {
    format!(
        r#"
[[proxy_cache_path]]
name = "pipeline_c"
path = "{}/cache"
[[server]]
listen = ["127.0.0.1:8080"]
  [[server.location]]
  path = "/"
  proxy_pass = "app"
  proxy_cache = {{ zone = "pipeline_c" }}
[[upstream]]
name = "app"
servers = ["127.0.0.1:9001"]
"#,
        dir.path()
    )
}

#[test]
fn the_cache_stage_fills_waits_hits_and_passes() {
    let dir = TempDir::new(&[]);
    let mut s = Stage::new(&cached(&dir));
    // A miss fills the entry: proxied with a capture that keeps the response.
    let Step::Go(Some(mut cap)) = s.cache(&get("/a", ""), &mut Progress::default()) else {
        panic!("a miss is proxied with its fill");
    };
    assert!(cap.fill.is_some() && cap.to_client);
    // Another request for it while it fills waits for the fill.
    let mut p = Progress::default();
    assert!(matches!(
        s.cache(&get("/a", ""), &mut p),
        Step::WaitUntil(_)
    ));
    assert_eq!(p.waiting.map(|w| w.1), Some(1), "the look is counted");
    // The fill's response arrives whole: the next request is a hit.
    fill_whole(&mut s, &mut cap);
    match s.cache(&get("/a", ""), &mut Progress::default()) {
        Step::Hit(hit) => {
            assert_eq!(hit.status, "HIT");
            assert!(hit.refresh.is_none(), "fresh: nothing to refresh");
            let mut out = Vec::new();
            let at = s.t.io().now();
            let (w, file) = cache::write_found(
                (&s.ctx, at),
                &mut out,
                hit.found,
                (hit.status, &hit.line),
                &hit.asked,
            );
            let text = String::from_utf8(out).unwrap();
            assert_eq!(w.status, 200);
            assert!(file.is_none() && text.ends_with("\r\n\r\nhi"), "{text}");
        }
        _ => panic!("stored: a hit"),
    }
    // A request the cache may not answer passes it by, marked.
    match s.cache(
        &get("/a", "Authorization: Basic eDp5\r\n"),
        &mut Progress::default(),
    ) {
        Step::Go(Some(cap)) => {
            assert!(cap.fill.is_none());
            assert_eq!(cap.client_status, "BYPASS");
        }
        _ => panic!("an authorized request bypasses the cache"),
    }
}

/// `/.well-known/acme-challenge/` where a server's certificate comes from ACME: answered
/// before any location (here one that proxies everything), the key authorization for a token
/// ringx issued, a plain 404 for any other.
#[test]
fn acme_challenges_are_answered_before_any_location() {
    let mut s = Stage::new(
        r#"
[acme]
directory = "https://127.0.0.1:1/dir"
[[server]]
listen = ["127.0.0.1:8080"]
server_name = ["a.test"]
error_page = { "404" = "/err" }
  [[server.location]]
  path = "/"
  proxy_pass = "http://127.0.0.1:9"
  [[server.location]]
  path = "/err"
  proxy_pass = "http://127.0.0.1:9"
[[server]]
listen = ["127.0.0.1:8443"]
server_name = ["a.test"]
tls = { acme = true }
  [[server.location]]
  path = "/"
  return = { status = 200 }
"#,
    );
    ringx_acme::global().set_http01("pipeline-token", Some("pipeline-token.thumb"));
    let answer = |s: &mut Stage, path: &str| {
        s.with(&get(path, ""), |cx, _, req, route, rq| {
            assert_eq!(route.at, None, "{path}: no location");
            assert!(!crate::role::proxy_start::is_proxied(&cx.ctx.routes, route));
            let mut out = Vec::new();
            let ch = crate::response::ConnHdr::new(true, true);
            let r = routing::respond(
                &cx.ctx.routes,
                cx.ctx.responder(),
                &mut out,
                req,
                route,
                ch,
                rq,
            );
            assert!(r.fallback.is_none(), "{path}: no error_page");
            String::from_utf8(out).unwrap()
        })
    };
    let ok = answer(&mut s, "/.well-known/acme-challenge/pipeline-token");
    assert!(ok.starts_with("HTTP/1.1 200"), "{ok}");
    assert!(ok.ends_with("\r\n\r\npipeline-token.thumb"), "{ok}");
    for hostile in [
        "/.well-known/acme-challenge/other",
        "/.well-known/acme-challenge/../err",
        "/.well-known/acme-challenge/",
    ] {
        let no = answer(&mut s, hostile);
        assert!(no.starts_with("HTTP/1.1 404"), "{hostile}: {no}");
    }
    ringx_acme::global().set_http01("pipeline-token", None);
    let gone = answer(&mut s, "/.well-known/acme-challenge/pipeline-token");
    assert!(gone.starts_with("HTTP/1.1 404"), "{gone}");
}

/// The stages in order: a guard that refuses, delays or asks stops the request there; one
/// that lets it go sends it on to the cache of a location that proxies, and then to the proxy,
/// a gRPC call (for a role that carries them) or the local answer.
#[test]
fn the_stages_in_order_say_where_each_request_goes() {
    let dir = TempDir::new(&[]);
    let mut s = Stage::new(&format!(
        r#"
[[limit_req_zone]]
name = "pipeline_serve"
key = "$remote_addr"
rate = "1r/s"
[[proxy_cache_path]]
name = "pipeline_s"
path = "{}/cache"
[[server]]
listen = ["127.0.0.1:8080"]
  [[server.location]]
  path = "/closed/"
  access = ["deny all"]
  proxy_pass = "app"
  proxy_cache = {{ zone = "pipeline_s" }}
  [[server.location]]
  path = "/slow/"
  limit_req = {{ zone = "pipeline_serve", burst = 5 }}
  proxy_pass = "app"
  [[server.location]]
  path = "/asked/"
  auth_request = {{ proxy_pass = "app", uri = "/check" }}
  proxy_pass = "app"
  [[server.location]]
  path = "/cached/"
  access = ["allow all"]
  proxy_pass = "app"
  proxy_cache = {{ zone = "pipeline_s" }}
  [[server.location]]
  path = "/grpc/"
  proxy_pass = "grpc://app"
  [[server.location]]
  path = "/plain/"
  proxy_pass = "app"
  [[server.location]]
  path = "/here/"
  access = ["allow all"]
  return = {{ status = 200 }}
[[upstream]]
name = "app"
servers = ["127.0.0.1:9001"]
"#,
        dir.path()
    ));
    let h1 = Asked {
        keep: true,
        status_as: None,
        grpc: false,
    };
    let h2 = Asked { grpc: true, ..h1 };
    let serve = |s: &mut Stage, path: &str, asked: Asked| {
        s.serve(&get(path, ""), &mut Progress::default(), asked)
    };
    // The guard first: refused before the cache is looked at.
    assert!(matches!(
        serve(&mut s, "/closed/a", h1),
        Step::Refuse { status: 403, .. }
    ));
    assert!(matches!(serve(&mut s, "/slow/a", h1), Step::Proxy(None)));
    assert!(matches!(serve(&mut s, "/slow/a", h1), Step::WaitUntil(_)));
    assert!(matches!(
        serve(&mut s, "/asked/a", h1),
        Step::Ask { upstream: 0, .. }
    ));
    // Through the guard to the cache: a miss is proxied with its fill, then waited for.
    let Step::Proxy(Some(mut cap)) = serve(&mut s, "/cached/a", h1) else {
        panic!("a guarded, cached location's miss is proxied with its fill");
    };
    assert!(cap.fill.is_some());
    assert!(matches!(serve(&mut s, "/cached/a", h1), Step::WaitUntil(_)));
    fill_whole(&mut s, &mut cap);
    match serve(&mut s, "/cached/a", h1) {
        Step::Hit(hit) => assert_eq!(hit.status, "HIT"),
        _ => panic!("stored: a hit"),
    }
    // gRPC over HTTP/2 is a call of its own; over HTTP/1 it is proxied as any location.
    assert!(matches!(serve(&mut s, "/grpc/x", h2), Step::Grpc));
    assert!(matches!(serve(&mut s, "/grpc/x", h1), Step::Proxy(None)));
    assert!(matches!(serve(&mut s, "/plain/x", h2), Step::Proxy(None)));
    // Answered here: a location that returns (its guard passed), or no location at all.
    assert!(matches!(serve(&mut s, "/here/x", h1), Step::Local));
    assert!(matches!(serve(&mut s, "/nowhere", h1), Step::Local));
}

/// A refusal takes its location's error pages, and a fallback's own refusal does only where
/// the page that sent it there is recursive (`recursive_error_pages`), with the redirects
/// counted so far.
#[test]
fn a_refusal_at_a_fallback_takes_error_pages_only_where_its_sender_is_recursive() {
    use crate::answer::fallback::Fallback;
    let mut s = Stage::new(GUARDS);
    let fb = |open: bool| Fallback {
        at: crate::route::LocId { server: 0, loc: 1 },
        uri: None,
        status: None,
        error: 502,
        extra: String::new(),
        page: None,
        hops: 3,
        open,
        named_at_uri: false,
    };
    s.with(&get("/closed/x", ""), |_, _, _, route, _| {
        let mut lines = RefusalLines::own("X: y\r\n".into());
        lines.add("X-Added: a\r\n");
        let f = access::Refusal::of(route, None, (403, &lines)).expect("first refusal");
        // The page carries the refusal's own lines, not the refusing location's added ones.
        assert_eq!((f.status, f.headers, f.hops), (403, "X: y\r\n", 0));
        assert_eq!(f.at, route.at.unwrap());
        let shut = fb(false);
        let none = RefusalLines::default();
        assert!(access::Refusal::of(route, Some(&shut), (403, &none)).is_none());
        let open = fb(true);
        let f = access::Refusal::of(route, Some(&open), (403, &none)).expect("recursive");
        assert_eq!(f.hops, 3);
    });
}

/// A request re-served elsewhere by an error page carries its body again only where all of
/// it was kept; one without a body (or with an empty one) always may be.
#[test]
fn a_re_served_request_carries_its_body_again_only_where_it_was_kept() {
    use super::failure::body_again;
    let mut s = Stage::new(GUARDS);
    s.with(&get("/open/", ""), |_, _, req, _, _| {
        assert_eq!(body_again(req, None), Some(None));
        assert_eq!(body_again(req, Some(b"x".to_vec())), Some(None));
    });
    let empty = "POST /open/ HTTP/1.1\r\nHost: h.test\r\nContent-Length: 0\r\n\r\n";
    s.with(empty, |_, _, req, _, _| {
        assert_eq!(body_again(req, None), Some(None))
    });
    let post = "POST /open/ HTTP/1.1\r\nHost: h.test\r\nContent-Length: 5\r\n\r\n";
    s.with(post, |_, _, req, _, _| {
        assert_eq!(body_again(req, None), None);
        assert_eq!(
            body_again(req, Some(b"hello".to_vec())),
            Some(Some(b"hello".to_vec()))
        );
    });
}

const CLUSTER_GUARDS: &str = r#"
[cluster]
redis = ["127.0.0.1:1"]
[[limit_req_zone]]
name = "pipeline_cl_share"
key = "$remote_addr"
rate = "2r/s"
scope = "cluster"
[[limit_req_zone]]
name = "pipeline_cl_open"
key = "$remote_addr"
rate = "1r/s"
scope = "cluster"
cluster_fallback = "open"
[[limit_req_zone]]
name = "pipeline_cl_closed"
key = "$remote_addr"
rate = "100r/s"
scope = "cluster"
cluster_fallback = "closed"
[[limit_conn_zone]]
name = "pipeline_cl_conn"
key = "$remote_addr"
scope = "cluster"
[[server]]
listen = ["127.0.0.1:8080"]
  [[server.location]]
  path = "/share/"
  limit_req = { zone = "pipeline_cl_share", burst = 2, nodelay = true, status = 429 }
  return = { status = 200 }
  [[server.location]]
  path = "/open/"
  limit_req = { zone = "pipeline_cl_open", nodelay = true }
  return = { status = 200 }
  [[server.location]]
  path = "/closed/"
  limit_req = { zone = "pipeline_cl_closed", status = 429 }
  return = { status = 200 }
  [[server.location]]
  path = "/conn/"
  limit_conn = { zone = "pipeline_cl_conn", max = 2 }
  return = { status = 200 }
"#;

/// A cluster zone decides as a local one while synced (noting each admitted key for the
/// sync), and on its fallback as configured: this host's share, no limit, or refuse.
#[test]
fn cluster_zones_follow_their_fallback() {
    use crate::guard::cluster::{self, ClusterZone};
    let _hosts = cluster::TEST_HOSTS
        .lock()
        .unwrap_or_else(|e| e.into_inner());
    let mut s = Stage::new(CLUSTER_GUARDS);
    let zone = |name: &str| {
        *ClusterZone::all()
            .iter()
            .find(|z| z.name == name)
            .expect("compiled")
    };
    let passed = |s: &mut Stage, path: &str, n: usize| {
        (0..n)
            .filter(|_| {
                matches!(
                    s.access(&get(path, ""), &mut Progress::default()),
                    Step::Go(_)
                )
            })
            .count()
    };
    // Synced, one host known: 2 r/s with a burst of 2, the clock still: 3 pass, each noted
    // for the sync.
    cluster::set_hosts(1);
    let share = zone("pipeline_cl_share");
    assert_eq!(passed(&mut s, "/share/a", 5), 3);
    let mut seen = cluster::Seen::default();
    share.take_seen(&mut seen, 10);
    assert_eq!(seen.values().map(|(_, n)| n).sum::<u32>(), 3);
    // Falling back with two hosts alive: 1 r/s and a burst of 1 here, for a new client.
    cluster::set_hosts(2);
    share.set_falling_back(true);
    s.b.open(
        0,
        Some("192.0.2.11:1".parse().unwrap()),
        None,
        Default::default(),
        s.t.io().now(),
    );
    assert_eq!(passed(&mut s, "/share/a", 5), 2);
    share.take_seen(&mut seen, 10);
    assert_eq!(
        seen.values().map(|(_, n)| n).sum::<u32>(),
        3,
        "not noted while down"
    );
    // Synced again, three hosts known, a third client: this zone thread's budget until the
    // next view of the cluster (a sync's reply) is a period's rate (1) and its share of the
    // burst (1 of 3).
    share.set_falling_back(false);
    share.new_view(crate::guard::limit::nanos(s.t.io().now()));
    cluster::set_hosts(3);
    s.b.open(
        0,
        Some("192.0.2.12:1".parse().unwrap()),
        None,
        Default::default(),
        s.t.io().now(),
    );
    assert_eq!(passed(&mut s, "/share/a", 5), 2);
    share.new_view(crate::guard::limit::nanos(s.t.io().now()));
    assert_eq!(
        passed(&mut s, "/share/a", 5),
        1,
        "the budget starts again with each view"
    );
    // limit_conn: half of max = 2 on the fallback.
    let conn = zone("pipeline_cl_conn");
    conn.set_falling_back(true);
    let mut held = Progress::default();
    assert!(matches!(
        s.access(&get("/conn/", ""), &mut held),
        Step::Go(_)
    ));
    assert!(matches!(
        s.access(&get("/conn/", ""), &mut Progress::default()),
        Step::Refuse { status: 503, .. }
    ));
    conn.set_falling_back(false);
    assert!(matches!(
        s.access(&get("/conn/", ""), &mut Progress::default()),
        Step::Go(_)
    ));
    zone("pipeline_cl_open").set_falling_back(true);
    assert_eq!(passed(&mut s, "/open/", 5), 5, "open: no limit");
    zone("pipeline_cl_closed").set_falling_back(true);
    assert!(matches!(
        s.access(&get("/closed/", ""), &mut Progress::default()),
        Step::Refuse { status: 429, .. }
    ));
    for z in [
        "pipeline_cl_share",
        "pipeline_cl_conn",
        "pipeline_cl_open",
        "pipeline_cl_closed",
    ] {
        zone(z).set_falling_back(false);
    }
    assert!(matches!(
        s.access(&get("/closed/", ""), &mut Progress::default()),
        Step::Go(_)
    ));
    drop(held);
}

/// `add_header` on the answers the stages make: a refusal gets the refusing location's
/// `always` lines (expanded for the request; the plain ones are for 2xx/3xx), its error page
/// none of them; an answer from the cache gets them as the status it is sent with says (a
/// 304 to the client's validator is one of nginx's list, a status an error page tells may
/// not be).
#[test]
fn add_header_reaches_refusals_and_answers_from_the_cache() {
    let dir = TempDir::new(&[]);
    let mut s = Stage::new(&format!(
        r#"
[[proxy_cache_path]]
name = "pipeline_added"
path = "{}/cache"
[[server]]
listen = ["127.0.0.1:8080"]
  [[server.location]]
  path = "/closed/"
  access = ["deny all"]
  return = {{ status = 200 }}
  add_header = {{ "X-Plain" = "p", "X-Always" = {{ value = "$uri", always = true }} }}
  [[server.location]]
  path = "/"
  proxy_pass = "app"
  proxy_cache = {{ zone = "pipeline_added" }}
  add_header = {{ "X-Plain" = "p", "X-Always" = {{ value = "a", always = true }} }}
[[upstream]]
name = "app"
servers = ["127.0.0.1:9001"]
"#,
        dir.path()
    ));
    let asked = Asked {
        keep: true,
        status_as: None,
        grpc: false,
    };
    match s.serve(&get("/closed/x", ""), &mut Progress::default(), asked) {
        Step::Refuse { status, headers } => {
            assert_eq!(status, 403);
            assert_eq!(headers.plain(), "X-Always: /closed/x\r\n");
            assert_eq!(headers.for_page(), "");
        }
        _ => panic!("deny all refuses"),
    }
    let Step::Go(Some(mut cap)) = s.cache(&get("/a", ""), &mut Progress::default()) else {
        panic!("a miss is proxied with its fill");
    };
    cap.status = 200;
    cap.head = b"HTTP/1.1 200 OK\r\nCache-Control: max-age=60\r\nETag: \"v\"\r\n\
                 Content-Length: 2\r\n\r\n"
        .to_vec();
    cap.body = b"hi".to_vec();
    cap.complete = true;
    let now = s.t.io().now();
    cache::finish(&mut cap, s.ctx.wall_ms(now));
    let mut hit = |extra: &str, status_as: Option<u16>| {
        let Step::Hit(mut hit) = s.cache(&get("/a", extra), &mut Progress::default()) else {
            panic!("stored: a hit");
        };
        hit.asked.status_as = status_as;
        let mut out = Vec::new();
        let at = s.t.io().now();
        let found = (hit.status, &hit.line[..]);
        let (w, _) = cache::write_found((&s.ctx, at), &mut out, hit.found, found, &hit.asked);
        (w.status, String::from_utf8(out).unwrap())
    };
    let (status, text) = hit("", None);
    assert_eq!(status, 200);
    assert!(
        text.contains("X-Cache-Status: HIT\r\nX-Plain: p\r\nX-Always: a\r\n"),
        "{text}"
    );
    let (status, text) = hit("If-None-Match: \"v\"\r\n", None);
    assert_eq!(status, 304);
    assert!(text.contains("X-Plain: p\r\nX-Always: a\r\n"), "{text}");
    let (status, text) = hit("", Some(404));
    assert_eq!(status, 404);
    assert!(
        text.contains("X-Always: a\r\n") && !text.contains("X-Plain"),
        "{text}"
    );
}
