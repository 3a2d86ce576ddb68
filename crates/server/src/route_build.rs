//! The compile step of the routes: servers and locations from the configuration, `return`
//! responses serialised (and compressed) once, directories opened, rewriting compiled and its
//! references (error pages, `try_files` fallbacks) resolved against the compiled locations.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::os::fd::{FromRawFd, OwnedFd};
use std::path::Path;
use std::sync::Arc;

use ringx_config::rewrite::parse_error_pages;
use ringx_config::upstream::StreamProtocol;
use ringx_config::{Config, Location, Return, Server, Source};
use toml::Spanned;

use crate::alt_svc::AltSvc;
use crate::compress::{Coding, Policy};
use crate::error::Error;
use crate::rewrite::headers::{AddHeaders, ErrTarget, ErrorPages, ProxyEdit};
use crate::rewrite::{FallbackC, LocKind, LocRw, ReturnT, ServerRw, TryFilesC};
use crate::route::{
    Action, Canned, FileRoot, HostMode, ListenerKind, Loc, ProxyLoc, Routes, StreamDef, UdpDef,
    UdpServes, VServer, UDP_MAX_DATAGRAM, UDP_MAX_SESSIONS, UDP_RCVBUF,
};
use crate::upstream::Upstreams;

impl Routes {
    pub fn compile(cfg: &Config, ups: &mut Upstreams) -> Result<Routes, Error> {
        let version = env!("CARGO_PKG_VERSION");
        let token = if cfg.http.server_tokens {
            format!("ringx/{version}")
        } else {
            "ringx".to_string()
        };
        let server_header = format!("Server: {token}\r\n").into_bytes();
        let compress = Policy::compile(&cfg.http);
        let mut listen: Vec<SocketAddr> = Vec::new();
        let mut by_listener: Vec<Vec<usize>> = Vec::new();
        let mut servers = Vec::new();
        for (si, s) in cfg.server.iter().enumerate() {
            let s = s.get_ref();
            for a in &s.listen {
                let a = *a.get_ref();
                let li = match listen.iter().position(|x| *x == a) {
                    Some(i) => i,
                    None => {
                        listen.push(a);
                        by_listener.push(Vec::new());
                        listen.len() - 1
                    }
                };
                if *s.default.get_ref() {
                    by_listener[li].insert(0, si);
                } else {
                    by_listener[li].push(si);
                }
            }
            let mut locations = Vec::new();
            let mut order = Vec::new();
            for (i, l) in s.location.iter().enumerate() {
                locations.push(compile_location(
                    l.get_ref(),
                    cfg,
                    &server_header,
                    compress.as_deref(),
                    ups,
                )?);
                order.push(i);
            }
            // Stable: regexes keep the order they were written in.
            let mut paired: Vec<(Loc, usize)> = locations.into_iter().zip(order).collect();
            paired.sort_by(|(a, _), (b, _)| {
                a.kind
                    .class()
                    .cmp(&b.kind.class())
                    .then(match a.kind.class() {
                        1 => b.path.len().cmp(&a.path.len()),
                        _ => std::cmp::Ordering::Equal,
                    })
            });
            let (locations, order): (Vec<Loc>, Vec<usize>) = paired.into_iter().unzip();
            let rw = ServerRw::compile(s)?;
            let slashless = VServer::slashless_paths(&locations);
            let mut vs = VServer {
                slashless,
                locations,
                rw: (rw.full_route || !rw.rules.is_empty()).then(|| Box::new(rw)),
                name: s
                    .server_name
                    .first()
                    .map_or(String::new(), |n| n.get_ref().clone()),
                add_header: None,
                error_pages: None,
                recursive_pages: false,
                verifies_clients: s
                    .tls
                    .as_ref()
                    .is_some_and(|t| t.get_ref().client_ca().is_some()),
                http2: cfg.http2.enable && s.http2.unwrap_or(true),
                alt_svc: None,
            };
            finish_rewriting(cfg, &mut vs, s, &order)?;
            servers.push(vs);
        }
        let mut listener_kind: Vec<ListenerKind> = listen
            .iter()
            .map(|a| ListenerKind::Http {
                proxy_protocol: cfg.server.iter().any(|s| {
                    s.get_ref().proxy_protocol
                        && s.get_ref().listen.iter().any(|b| b.get_ref() == a)
                }),
            })
            .collect();
        let mut streams = Vec::new();
        let (mut udp_listen, mut udp_serves) = (Vec::new(), Vec::new());
        // HTTP/3: UDP on the address of each TCP listener whose servers have `quic = true`
        // (the configuration checked that the servers of an address agree).
        for (i, a) in listen.iter().enumerate() {
            let quic = cfg.server.iter().any(|s| {
                let s = s.get_ref();
                *s.quic.get_ref() && s.listen.iter().any(|b| b.get_ref() == a)
            });
            if quic {
                udp_listen.push(*a);
                udp_serves.push(UdpServes::Quic { listen: i as u32 });
            }
        }
        for st in &cfg.stream {
            let st = st.get_ref();
            let upstream = ups.resolve_target(st.proxy_pass.get_ref())?;
            let udp = (st.protocol == StreamProtocol::Udp).then(|| UdpDef {
                responses: st.responses.as_ref().map(|r| *r.get_ref()),
                max_sessions: st
                    .max_sessions
                    .as_ref()
                    .map_or(UDP_MAX_SESSIONS, |m| *m.get_ref()),
                max_datagram: st
                    .max_datagram_size
                    .as_ref()
                    .map_or(UDP_MAX_DATAGRAM, |m| m.get_ref().0 as u32),
                rcvbuf: st.rcvbuf.as_ref().map_or(UDP_RCVBUF, |m| {
                    m.get_ref().0.min(i32::MAX as u64 / 2) as u32
                }),
            });
            if udp.is_some() {
                // Picked by a hash of the client's address whatever the upstream's policy:
                // one client keeps one server.
                ups.ensure_maglev(upstream);
            }
            for a in &st.listen {
                if udp.is_some() {
                    udp_listen.push(*a.get_ref());
                    udp_serves.push(UdpServes::Stream(streams.len()));
                    continue;
                }
                listen.push(*a.get_ref());
                by_listener.push(Vec::new());
                listener_kind.push(ListenerKind::Stream(streams.len()));
            }
            let mut by_name: Vec<(usize, Vec<String>)> = Vec::new();
            for (name, target) in &st.sni {
                by_name.push((
                    ups.resolve_target(target.get_ref())?,
                    vec![name.get_ref().clone()],
                ));
            }
            let sni = (!by_name.is_empty()).then(|| {
                ringx_tls::sni::SniMap::new(by_name.iter().map(|(i, n)| (*i, &n[..])), upstream)
            });
            streams.push(StreamDef {
                upstream,
                idle_timeout: st.idle(),
                proxy_protocol: st.proxy_protocol,
                sni,
                udp,
                bind_client: st.bind.is_some() || ups.list[upstream].bind_client,
            });
        }
        let has_proxy = servers.iter().any(|s: &VServer| {
            s.locations.iter().any(|l| {
                matches!(l.action, Action::Proxy(_))
                    || l.guard.as_ref().is_some_and(|g| g.auth_request.is_some())
            })
        });
        let server_names: Vec<Vec<String>> = cfg
            .server
            .iter()
            .map(|s| {
                s.get_ref()
                    .server_name
                    .iter()
                    .map(|n| n.get_ref().clone())
                    .collect()
            })
            .collect();
        let by_name = by_listener
            .iter()
            .map(|servers| {
                ringx_tls::sni::SniMap::new(
                    servers.iter().map(|&i| (i, &server_names[i][..])),
                    servers.first().copied().unwrap_or(0),
                )
            })
            .collect();
        Ok(Routes {
            listen,
            by_listener,
            by_name,
            servers,
            server_header,
            server_token: token.into_bytes(),
            listener_kind,
            streams,
            udp_listen,
            udp_serves,
            transparent: ringx_config::tproxy::transparent_listeners(&cfg.server, &cfg.stream)
                .into_iter()
                .map(|(a, p)| (a, p == StreamProtocol::Udp))
                .collect(),
            has_proxy,
            acme_http01: cfg.server.iter().any(|s| {
                s.get_ref()
                    .tls
                    .as_ref()
                    .is_some_and(|t| t.get_ref().is_acme())
            }),
            compress,
            http_guard: crate::guard::HttpGuard::compile(cfg),
        })
    }
}

/// What needs the whole server compiled first: error pages and try_files fallbacks resolved
/// to locations, and what locations inherit from the server (nginx's rule: a location with
/// none of its own takes the server's add_header and error_page).
fn finish_rewriting(
    cfg: &Config,
    vs: &mut VServer,
    s: &Server,
    order: &[usize],
) -> Result<(), Error> {
    let srv_add = AddHeaders::compile(&s.add_header)?;
    let srv_pages = error_pages(cfg, &s.error_page, vs)?;
    let alt_svc = AltSvc::of(s);
    vs.alt_svc = alt_svc.as_ref().map(|a| Arc::from(a.value()));
    vs.add_header = match &alt_svc {
        Some(a) => Some(a.server_lines(srv_add.clone())),
        None => srv_add.clone(),
    };
    vs.error_pages = srv_pages.clone();
    vs.recursive_pages = s.recursive_error_pages.unwrap_or(false);
    for (li, &ci) in order.iter().enumerate() {
        let l = s.location[ci].get_ref();
        let mut rw = LocRw {
            rules: crate::rewrite::compile_rules(&l.rewrite)?,
            add_header: AddHeaders::compile(&l.add_header)?.or_else(|| srv_add.clone()),
            error_pages: error_pages(cfg, &l.error_page, vs)?.or_else(|| srv_pages.clone()),
            recursive: l.recursive_error_pages.unwrap_or(vs.recursive_pages),
            try_files: None,
        };
        if let Some(tf) = &l.try_files {
            let src = Source {
                name: &cfg.origin.name,
                text: &cfg.origin.text,
            };
            let parsed = ringx_config::rewrite::parse_try_files(tf, &src)?;
            let fallback = match parsed.fallback {
                ringx_config::rewrite::Fallback::Uri(t) => FallbackC::Uri(t),
                ringx_config::rewrite::Fallback::Status(c) => FallbackC::Status(c),
                ringx_config::rewrite::Fallback::Named(n) => {
                    FallbackC::Named(crate::rewrite::flow::named(vs, &n).ok_or_else(|| {
                        let at = tf.get_ref().last().map_or(tf.span(), |v| v.span());
                        cfg.error_at(at, format!("try_files: the server has no location {n:?}"))
                    })?)
                }
            };
            rw.try_files = Some(TryFilesC {
                candidates: parsed.candidates,
                fallback,
            });
        }
        if let Some(a) = &alt_svc {
            a.apply(&mut vs.locations[li], &mut rw, l, vs.rw.is_some());
        }
        vs.locations[li].rw = (!rw.is_empty()).then(|| Box::new(rw));
    }
    error_page_loops(cfg, vs, s, order)
}

/// Refuses `error_page` entries of locations that lead, through locations that proxy, back
/// to where they began (`location @a { error_page 502 = @b; }` and `@b` sending 502 back to
/// `@a`, or a proxied location naming itself): without `recursive_error_pages` such a chain
/// is followed once and written in the locations themselves it is a mistake. With it on in
/// one of them, the loop is followed up to 10 times (`answer/fallback.rs`): nginx's way to
/// retry a failing upstream (`location @retry { error_page 502 = @retry; ... }`), accepted.
/// What a location inherits from the server is not followed: a server's `error_page 502 =
/// @fallback` reaches `@fallback` too, as in nginx, and a request is redirected once at most
/// there without the key (`answer/fallback.rs`). A file or `return` page in the location that failed (`error_page
/// 404 /404.html` where `/` serves it) is no loop either: it is served, never followed.
fn error_page_loops(cfg: &Config, vs: &VServer, s: &Server, order: &[usize]) -> Result<(), Error> {
    let pages_of = |li: usize| {
        let own = order
            .get(li)
            .is_some_and(|&ci| !s.location[ci].get_ref().error_page.is_empty());
        vs.locations[li]
            .rw
            .as_ref()
            .and_then(|rw| rw.error_pages.as_deref())
            .filter(|_| own)
    };
    let proxies = |li: usize| matches!(vs.locations[li].action, Action::Proxy(_));
    for (li, &ci) in order.iter().enumerate() {
        let Some(pages) = pages_of(li).filter(|p| p.proxies()) else {
            continue;
        };
        for code in 300..600u16 {
            let Some(ErrTarget::Local { loc, .. }) = pages.get(code) else {
                continue;
            };
            if !proxies(*loc) {
                continue;
            }
            // Follow the same status through the proxying locations it leads to.
            let mut chain = vec![li];
            let mut cur = *loc;
            let looped = loop {
                if chain.contains(&cur) {
                    break true;
                }
                chain.push(cur);
                match pages_of(cur).and_then(|p| p.get(code)) {
                    Some(ErrTarget::Local { loc, .. }) if proxies(*loc) => cur = *loc,
                    _ => break false,
                }
            };
            let recursive =
                |l: usize| crate::rewrite::recursive_pages(vs.locations[l].rw.as_deref());
            if !looped || chain.iter().any(|&l| recursive(l)) {
                continue;
            }
            let names: Vec<&str> = chain
                .iter()
                .chain(std::iter::once(&cur))
                .map(|&l| vs.locations[l].path.as_str())
                .collect();
            let span = s.location[ci]
                .get_ref()
                .error_page
                .iter()
                .find(|(k, _)| {
                    k.get_ref()
                        .split_whitespace()
                        .any(|c| c.parse::<u16>() == Ok(code))
                })
                .map_or(0..0, |(_, v)| v.span());
            return Err(cfg
                .error_at(
                    span,
                    format!(
                        "error_page {code}: the failed request would be re-served in a loop \
                         ({}); point the last error_page elsewhere, or set \
                         `recursive_error_pages = true` to retry up to 10 times",
                        names.join(" -> ")
                    ),
                )
                .into());
        }
    }
    Ok(())
}

fn compile_location(
    l: &Location,
    cfg: &Config,
    server_header: &[u8],
    compress: Option<&Policy>,
    ups: &mut Upstreams,
) -> Result<Loc, Error> {
    let (kind, path) = crate::rewrite::compile_path(l)?;
    let action = if let Some(target) = &l.proxy_pass {
        let (server_part, uri) = ringx_config::upstream::split_uri(target.get_ref());
        let upstream = ups.resolve_target(server_part)?;
        let host = match l.proxy_host.as_deref() {
            None | Some("pass") => HostMode::Pass,
            Some("upstream") => HostMode::Upstream,
            Some(h) => HostMode::Fixed(h.to_string()),
        };
        Action::Proxy(ProxyLoc {
            upstream,
            host,
            forwarded_headers: l.forwarded_headers,
            uri: uri.map(str::to_string),
            grpc: ringx_config::upstream::is_grpc(target.get_ref()),
            edit: ProxyEdit::compile(
                &l.proxy_set_header,
                &l.proxy_hide_header,
                l.proxy_intercept_errors,
            )?,
        })
    } else if let Some(r) = &l.ret {
        match ReturnT::compile(r)? {
            Some(t) => Action::ReturnT(Box::new(t)),
            None => Action::Return(canned(r, server_header, compress.filter(|_| l.compress))),
        }
    } else if l.root.is_none() && l.alias.is_none() {
        Action::None
    } else {
        let (dir, strip) = match (&l.root, &l.alias) {
            (Some(root), _) => (root.get_ref().as_path(), None),
            (None, Some(alias)) => (alias.get_ref().as_path(), Some(path.clone())),
            (None, None) => unreachable!("validated: a location has an action"),
        };
        Action::Files(FileRoot {
            dir: open_dir(dir)?,
            strip_prefix: strip,
            index: l.index.clone(),
        })
    };
    Ok(Loc {
        exact: matches!(kind, LocKind::Exact),
        path,
        action,
        kind,
        rw: None,
        compress: l.compress,
        guard: crate::guard::Guard::compile(l, cfg, ups)?.map(Box::new),
        cache: match &l.proxy_cache {
            Some(pc) => Some(Box::new(crate::cache::loc::CacheLoc::compile(
                pc.get_ref(),
                cfg,
            )?)),
            None => None,
        },
    })
}

fn canned(r: &Return, server_header: &[u8], compress: Option<&Policy>) -> Canned {
    let status = *r.status.get_ref();
    let body = r.body.clone().into_bytes();
    let ctype = r
        .content_type
        .as_ref()
        .map_or("text/plain", |c| c.get_ref());
    // `Vary` on every variant, identity included, when the body could be compressed.
    let varies = compress.is_some_and(|p| p.varies(ctype))
        && crate::compress::status_compressible(status)
        && !body.is_empty();
    let head_for = |coding: Option<Coding>, len: usize| {
        let mut head = Vec::new();
        ringx_http::write_status_line(&mut head, status);
        head.extend_from_slice(server_header);
        if status != 204 && status != 304 {
            head.extend_from_slice(
                format!("Content-Type: {ctype}\r\nContent-Length: {len}\r\n").as_bytes(),
            );
        }
        if let Some(c) = coding {
            head.extend_from_slice(format!("Content-Encoding: {}\r\n", c.token()).as_bytes());
        }
        if varies {
            head.extend_from_slice(b"Vary: Accept-Encoding\r\n");
        }
        if let Some(loc) = &r.location {
            head.extend_from_slice(format!("Location: {}\r\n", loc.get_ref()).as_bytes());
        }
        for (k, v) in &r.headers {
            head.extend_from_slice(format!("{}: {v}\r\n", k.get_ref()).as_bytes());
        }
        head
    };
    let mut c = Canned::new(status, head_for(None, body.len()), body.clone());
    c.ctype = ctype.to_string();
    if varies {
        for codec in compress.map_or(&[][..], |p| &p.codecs[..]) {
            if !codec.takes(ctype) || (body.len() as u64) < codec.min_length {
                continue;
            }
            if let Ok(z) = crate::compress::encoder::compress(codec.coding, codec.level, &body) {
                let mut v = Canned::new(status, head_for(Some(codec.coding), z.len()), z);
                v.ctype = ctype.to_string();
                c.variants.push((codec.coding, v));
            }
        }
    }
    c
}

fn open_dir(p: &Path) -> Result<OwnedFd, Error> {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(p.as_os_str().as_bytes())
        .map_err(|_| Error::config(format!("{}: NUL in path", p.display())))?;
    // SAFETY: open with a valid NUL-terminated path; a non-negative result is a new
    // descriptor we own.
    let fd = unsafe {
        libc::open(
            c.as_ptr(),
            libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC,
        )
    };
    if fd < 0 {
        let e = std::io::Error::last_os_error();
        return Err(Error::io(format!("open {}", p.display()), e));
    }
    // SAFETY: `fd` is new and owned by nothing else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Resolves `error_page` entries against the server's compiled locations; a target that
/// leads nowhere usable is placed at its `FILE:LINE:COL`.
fn error_pages(
    cfg: &Config,
    pages: &BTreeMap<Spanned<String>, Spanned<String>>,
    server: &VServer,
) -> Result<Option<Arc<ErrorPages>>, Error> {
    if pages.is_empty() {
        return Ok(None);
    }
    let src = Source {
        name: &cfg.origin.name,
        text: &cfg.origin.text,
    };
    let parsed = parse_error_pages(pages, &src)?;
    // The span of the entry that lists `code` (every listed status parsed, so one does).
    let span_of = |code: u16| {
        pages
            .iter()
            .find(|(k, _)| {
                k.get_ref()
                    .split_whitespace()
                    .any(|c| c.parse::<u16>() == Ok(code))
            })
            .map_or(0..0, |(_, v)| v.span())
    };
    let mut out = Vec::new();
    let mut proxies = false;
    for (code, t) in parsed {
        let target = if ringx_config::rewrite::is_redirect_target(&t.uri) {
            ErrTarget::Redirect(t.uri)
        } else {
            let loc = if t.uri.starts_with('@') {
                server.locations.iter().position(|l| l.path == t.uri)
            } else {
                let path = t.uri.split_once('?').map_or(&t.uri[..], |(p, _)| p);
                crate::rewrite::locate::locate(server, path).map(|(i, _)| i)
            };
            let Some(loc) = loc else {
                return Err(cfg
                    .error_at(
                        span_of(code),
                        format!(
                            "error_page {code} {:?}: no location of the server matches it; \
                             add a location for it",
                            t.uri
                        ),
                    )
                    .into());
            };
            match &server.locations[loc].action {
                Action::Proxy(p) if p.grpc => {
                    return Err(cfg
                        .error_at(
                            span_of(code),
                            format!(
                                "error_page {code} {:?}: it leads to a grpc:// location; a \
                                 failed request can be re-served by a file, a return or an \
                                 http:// proxy_pass location",
                                t.uri
                            ),
                        )
                        .into());
                }
                Action::Proxy(_) => proxies = true,
                // Its access phase runs on the request (`answer/fallback.rs`).
                Action::Files(_) if server.locations[loc].guard.is_some() => proxies = true,
                _ => {}
            }
            ErrTarget::Local {
                status: t.status,
                uri: t.uri,
                loc,
            }
        };
        out.push((code, target));
    }
    Ok(Some(Arc::new(ErrorPages::new(out, proxies))))
}
