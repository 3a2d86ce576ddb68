//! What a request must pass before its location serves it, in nginx's phase order: the real
//! client address (`realip`), then `limit_req` and `limit_conn` (pre-access), then `access`
//! rules, `auth_basic` and `auth_request` (access: all must allow).
//!
//! A location with none of them has no [`Guard`] and costs nothing. [`Guard::check`] is
//! sans-I/O: it returns a [`Verdict`], which the pipeline's access stage turns into a step
//! (`pipeline/access.rs`) that the HTTP/1 and HTTP/2 roles carry out: answer a refusal, hold
//! the request for a delay or for the auth pool's verification of its password (which the
//! check has handed over, `verify.rs`), or send the `auth_request` subrequest.
//! What was already decided for a held request is kept in its [`Progress`], so the request
//! is not charged twice when it is looked at again.
//!
//! | file | holds |
//! |---|---|
//! | `access.rs` | allow/deny rules, the real client address |
//! | `basic.rs` | `auth_basic`: credentials checked, remembered, handed to the pool |
//! | `hash.rs` | the htpasswd hashes verified, and what each costs |
//! | `verify.rs` | the pool of threads that verifies slow hashes off the zones |
//! | `limit.rs` | the lock-free tables shared by the zones (and the error bound) |
//! | `cluster.rs` | limit zones with `scope = "cluster"`: their state and fallback |
//! | `cluster_wire.rs` | their sync with Redis, sans-I/O: scripts, command, reply |
//! | `cluster_sync.rs` | the thread that syncs them |
//! | `escalate.rs` | refusals counted per address, the XDP block list thread |
//! | `key.rs` | key templates evaluated for a request |

pub mod access;
pub mod basic;
pub mod cluster;
pub mod cluster_sync;
pub mod cluster_wire;
pub mod escalate;
pub mod hash;
pub mod key;
pub mod limit;
pub mod verify;

#[cfg(test)]
mod cluster_tests;

use std::net::IpAddr;
use std::time::{Duration, Instant};

use ringx_config::guard::{zone_keys, AccessRule};
use ringx_config::keytmpl::Template;
use ringx_config::{Config, Location};
use ringx_http::Request;

use crate::error::Error;
use crate::metrics::{bump, ZoneCounters};
use crate::upstream::Upstreams;
use cluster::{ClusterZone, Enforce};
use escalate::Escalation;
use limit::{ConnSlot, RateVerdict, Table};

/// A location's checks, compiled.
pub struct Guard {
    pub limit_req: Option<LimitReq>,
    pub limit_conn: Option<LimitConn>,
    pub access: Vec<AccessRule>,
    pub basic: Option<basic::BasicAuth>,
    pub auth_request: Option<AuthRequest>,
}

pub struct LimitReq {
    table: &'static Table,
    key: Template,
    /// Nanoseconds a request takes of the rate.
    interval: u64,
    burst: u32,
    nodelay: bool,
    status: u16,
    escalate: Option<Escalation>,
    /// `scope = "cluster"`.
    cluster: Option<&'static ClusterZone>,
}

pub struct LimitConn {
    table: &'static Table,
    key: Template,
    max: u32,
    status: u16,
    cluster: Option<&'static ClusterZone>,
}

/// `auth_request`: the upstream asked, and the path.
pub struct AuthRequest {
    pub upstream: usize,
    pub uri: String,
}

/// What a request gets from its location's guard.
#[derive(Debug, PartialEq, Eq)]
pub enum Verdict {
    Pass,
    /// Answer `status` now, with these header lines (CRLF-terminated).
    Refuse {
        status: u16,
        headers: String,
    },
    /// Over the rate within the burst: look at the request again after this long.
    Delay(Duration),
    /// The `auth_request` upstream must decide: send the subrequest, then look again.
    Ask,
    /// `auth_basic`'s password is being verified on the pool: hold the request (no timer)
    /// until the answer comes back (`Progress::verified`), then look again.
    Verify,
}

/// What the `auth_request` subrequest said.
#[derive(Debug, PartialEq, Eq)]
pub enum AuthAnswer {
    Allow,
    /// 401 or 403, with the upstream's `WWW-Authenticate` lines for a 401.
    Deny {
        status: u16,
        headers: String,
    },
    /// Anything else, or no answer: 500.
    Error,
}

/// What was decided for the request in progress (kept while it is held).
#[derive(Default)]
pub struct Progress {
    /// limit_req charged it (a delayed request is not charged again).
    pub limited: bool,
    /// limit_conn counts it until the response is complete.
    pub conn: Option<ConnSlot>,
    pub auth: Option<AuthAnswer>,
    /// `auth_basic`'s verification handed to the pool, and its answer once in.
    pub basic: basic::Asked,
    /// Waiting for another request's cache fill: since when, and how many looks so far.
    pub waiting: Option<(Instant, u32)>,
    /// A guard or a cache looked at the request (set before they do): the rest may be set.
    pub touched: bool,
}

impl Progress {
    /// Forgets what was decided for the last request. Only a location with a guard or a cache
    /// sets anything, so on every other request this is one test, not a drop and a rewrite.
    #[inline]
    pub fn clear(&mut self) {
        if self.touched {
            *self = Progress::default();
        }
    }

    /// The request is re-served at an `error_page` location: what the failed location's
    /// `auth_request` or cache decided is not the fallback's; what the limits charged stays
    /// (each applies once per request, as in nginx).
    pub fn redirected(&mut self) {
        self.auth = None;
        self.waiting = None;
    }

    /// The pool's answer `ok` for credentials `key`; true when the request was waiting for
    /// it (then it is looked at again), false for an answer it does not wait for.
    pub fn verified(&mut self, key: u128, ok: bool) -> bool {
        match &mut self.basic {
            Some((k, answer @ None)) if *k == key => {
                *answer = Some(ok);
                true
            }
            _ => false,
        }
    }
}

/// A zone's own state for the guards: remembered credentials and its end of the auth pool,
/// a key buffer.
#[derive(Default)]
pub struct ZoneGuard {
    pub auth: basic::ZoneAuth,
    keybuf: Vec<u8>,
}

/// What a check needs of the request.
pub struct Input<'a, 'r> {
    pub req: &'a Request<'a, 'r>,
    /// The client's address after `real_ip_from`.
    pub client: Option<IpAddr>,
    /// That address is the connection's own (not from a PROXY header or a forwarded one):
    /// it may be escalated to XDP.
    pub own_address: bool,
    pub tls: bool,
    pub uri: &'a str,
    pub now: Instant,
    /// Who waits if a verification is handed to the pool.
    pub tag: verify::Tag,
}

impl Guard {
    /// The guard of `l`, None when it has no checks.
    pub fn compile(
        l: &Location,
        cfg: &Config,
        ups: &mut Upstreams,
    ) -> Result<Option<Guard>, Error> {
        let limit_req = match &l.limit_req {
            None => None,
            Some(lr) => {
                let lr = lr.get_ref();
                let z = cfg
                    .limit_req_zone
                    .iter()
                    .map(|z| z.get_ref())
                    .find(|z| z.name.get_ref() == lr.zone.get_ref())
                    .ok_or_else(|| {
                        Error::config(format!("no limit_req_zone {:?}", lr.zone.get_ref()))
                    })?;
                let table = Table::get(
                    "limit_req_zone",
                    z.name.get_ref(),
                    zone_keys(z.size.as_ref()),
                );
                let interval = z.rate.get_ref().interval();
                Some(LimitReq {
                    table,
                    cluster: z
                        .cluster()
                        .map(|c| ClusterZone::get(cluster_wire::Kind::Req, table, interval, c)),
                    key: z.key.get_ref().clone(),
                    interval: interval.as_nanos() as u64,
                    burst: lr.burst,
                    nodelay: lr.nodelay,
                    status: lr.status.0,
                    escalate: lr.escalate.as_ref().map(|e| escalation(e.get_ref())),
                })
            }
        };
        let limit_conn = match &l.limit_conn {
            None => None,
            Some(lc) => {
                let lc = lc.get_ref();
                let z = cfg
                    .limit_conn_zone
                    .iter()
                    .map(|z| z.get_ref())
                    .find(|z| z.name.get_ref() == lc.zone.get_ref())
                    .ok_or_else(|| {
                        Error::config(format!("no limit_conn_zone {:?}", lc.zone.get_ref()))
                    })?;
                let table = Table::get(
                    "limit_conn_zone",
                    z.name.get_ref(),
                    zone_keys(z.size.as_ref()),
                );
                Some(LimitConn {
                    table,
                    cluster: z.cluster().map(|c| {
                        ClusterZone::get(cluster_wire::Kind::Conn, table, Duration::ZERO, c)
                    }),
                    key: z.key.get_ref().clone(),
                    max: *lc.max.get_ref(),
                    status: lc.status.0,
                })
            }
        };
        let basic = match &l.auth_basic {
            None => None,
            Some(a) => {
                let a = a.get_ref();
                Some(
                    basic::BasicAuth::load(a.realm.get_ref(), a.user_file.get_ref())
                        .map_err(Error::config)?,
                )
            }
        };
        let auth_request = match &l.auth_request {
            None => None,
            Some(a) => {
                let a = a.get_ref();
                Some(AuthRequest {
                    upstream: ups.resolve_target(a.proxy_pass.get_ref())?,
                    uri: a.uri.get_ref().clone(),
                })
            }
        };
        let g = Guard {
            limit_req,
            limit_conn,
            access: l.access.iter().map(|r| *r.get_ref()).collect(),
            basic,
            auth_request,
        };
        let empty = g.limit_req.is_none()
            && g.limit_conn.is_none()
            && g.access.is_empty()
            && g.basic.is_none()
            && g.auth_request.is_none();
        Ok((!empty).then_some(g))
    }

    /// Runs the checks not yet decided for this request (`p`), in nginx's order.
    pub fn check(
        &self,
        inp: &Input,
        p: &mut Progress,
        z: &mut ZoneGuard,
        n: &ZoneCounters,
    ) -> Verdict {
        if let (Some(lr), false) = (&self.limit_req, p.limited) {
            p.limited = true;
            let k = self.key_hash(&lr.key, inp, z);
            let enforce = lr.cluster.map_or(Enforce::Cluster, |c| c.enforce());
            let local = || {
                lr.table
                    .rate(k, limit::nanos(inp.now), lr.interval, lr.burst, lr.nodelay)
            };
            let verdict = match enforce {
                Enforce::Cluster => match lr.cluster {
                    Some(c) => c.admit(
                        (k, key::stable128(&z.keybuf)),
                        limit::nanos(inp.now),
                        lr.burst,
                        local,
                    ),
                    None => local(),
                },
                // Redis is gone: this host's share of the rate and of the burst, the key
                // kept to be charged when it is back.
                Enforce::Share(hosts) => {
                    let v = lr.table.rate(
                        k,
                        limit::nanos(inp.now),
                        lr.interval.saturating_mul(u64::from(hosts)),
                        lr.burst.div_ceil(hosts),
                        lr.nodelay,
                    );
                    if let (Some(c), RateVerdict::Pass | RateVerdict::Delay(_)) = (lr.cluster, v) {
                        c.share_admitted(k, key::stable128(&z.keybuf));
                    }
                    v
                }
                Enforce::Open => RateVerdict::Pass,
                Enforce::Closed => RateVerdict::Refuse(Duration::from_secs(1)),
            };
            match verdict {
                RateVerdict::Pass => bump(&n.limit_req_passed, 1),
                RateVerdict::Delay(d) => {
                    bump(&n.limit_req_delayed, 1);
                    return Verdict::Delay(d);
                }
                RateVerdict::Refuse(wait) => {
                    bump(&n.limit_req_refused, 1);
                    if let (Some(e), Some(ip), true, false) = (
                        &lr.escalate,
                        inp.client,
                        inp.own_address,
                        enforce == Enforce::Closed,
                    ) {
                        escalate::refused(ip, e, inp.now);
                    }
                    // Whole seconds, rounded up: when a request would pass again.
                    let secs = wait.as_nanos().div_ceil(1_000_000_000).max(1);
                    return Verdict::Refuse {
                        status: lr.status,
                        headers: format!("Retry-After: {secs}\r\n"),
                    };
                }
            }
        }
        if let (Some(lc), None) = (&self.limit_conn, &p.conn) {
            let k = self.key_hash(&lc.key, inp, z);
            let enforce = lc.cluster.map_or(Enforce::Cluster, |c| c.enforce());
            let entered = match enforce {
                Enforce::Cluster => lc.table.enter(k, lc.max, lc.cluster.is_some()).map(Some),
                // Redis is gone: this host's share of `max`, the others' counts left out.
                Enforce::Share(hosts) => lc.table.enter(k, lc.max.div_ceil(hosts), false).map(Some),
                Enforce::Open => Some(None),
                Enforce::Closed => None,
            };
            // Noted refused or not: a key this host refuses for the others' requests must
            // stay in its syncs, or it would forget their count.
            if let (Some(c), Enforce::Cluster | Enforce::Share(_)) = (lc.cluster, enforce) {
                c.seen(k, key::stable128(&z.keybuf));
            }
            match entered {
                Some(slot) => p.conn = slot,
                None => {
                    bump(&n.limit_conn_refused, 1);
                    return Verdict::Refuse {
                        status: lc.status,
                        headers: "Retry-After: 1\r\n".into(),
                    };
                }
            }
        }
        if !self.access.is_empty() && !access::allowed(&self.access, inp.client) {
            bump(&n.access_denied, 1);
            return Verdict::Refuse {
                status: 403,
                headers: String::new(),
            };
        }
        if let Some(b) = &self.basic {
            let v = inp.req.header("authorization");
            match b.check(v, &mut p.basic, &mut z.auth, (inp.tag, inp.now), n) {
                basic::Checked::Pass => {}
                basic::Checked::Refuse => {
                    bump(&n.auth_denied, 1);
                    return Verdict::Refuse {
                        status: 401,
                        headers: b.challenge.clone(),
                    };
                }
                basic::Checked::Wait => return Verdict::Verify,
                // Every queue of the pool is full (a flood of guesses): come back later.
                basic::Checked::Busy => {
                    return Verdict::Refuse {
                        status: 503,
                        headers: "Retry-After: 1\r\n".into(),
                    }
                }
            }
        }
        if self.auth_request.is_some() {
            match p.auth.take() {
                None => return Verdict::Ask,
                Some(AuthAnswer::Allow) => {}
                Some(AuthAnswer::Deny { status, headers }) => {
                    bump(&n.auth_denied, 1);
                    return Verdict::Refuse { status, headers };
                }
                Some(AuthAnswer::Error) => {
                    return Verdict::Refuse {
                        status: 500,
                        headers: String::new(),
                    }
                }
            }
        }
        Verdict::Pass
    }

    fn key_hash(&self, t: &Template, inp: &Input, z: &mut ZoneGuard) -> u64 {
        z.keybuf.clear();
        let k = key::KeyInput {
            req: inp.req,
            client: inp.client,
            tls: inp.tls,
            uri: inp.uri,
        };
        key::eval(t, &k, &mut z.keybuf);
        key::hash64(&z.keybuf)
    }
}

fn escalation(e: &ringx_config::guard::Escalate) -> Escalation {
    Escalation {
        after: *e.after.get_ref(),
        within: e.within.0,
        block_for: e.block_for.0,
    }
}

/// The real-address rule and malformed-request escalation of `[http]`.
pub struct HttpGuard {
    pub real_ip: Option<access::RealIp>,
    pub malformed: Option<Escalation>,
}

impl HttpGuard {
    pub fn compile(cfg: &Config) -> HttpGuard {
        let h = &cfg.http;
        HttpGuard {
            real_ip: (!h.real_ip_from.is_empty()).then(|| access::RealIp {
                from: h.real_ip_from.iter().map(|c| c.0).collect(),
                header: h
                    .real_ip_header
                    .as_ref()
                    .map_or("x-real-ip".to_string(), |s| {
                        s.get_ref().to_ascii_lowercase()
                    }),
                recursive: h.real_ip_recursive,
            }),
            malformed: h
                .escalate_malformed
                .as_ref()
                .map(|e| escalation(e.get_ref())),
        }
    }
}
