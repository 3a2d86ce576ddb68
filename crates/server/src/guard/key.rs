//! Evaluating key templates (`ringx_config::keytmpl`) for a request: the one function that
//! turns `"$remote_addr"` or `"$scheme$host$request_uri"` into the bytes a limit or a cache
//! entry is keyed by.

use std::net::IpAddr;

use ringx_config::keytmpl::{Part, Template, Var};
use ringx_http::Request;

/// What a key can be made of.
pub struct KeyInput<'a, 'r> {
    pub req: &'a Request<'a, 'r>,
    /// The client's address (after `real_ip_from`).
    pub client: Option<IpAddr>,
    pub tls: bool,
    /// The normalised path (`$uri`).
    pub uri: &'a str,
}

/// Appends the key of `t` for `k` to `out`.
pub fn eval(t: &Template, k: &KeyInput, out: &mut Vec<u8>) {
    for p in &t.parts {
        match p {
            Part::Lit(s) => out.extend_from_slice(s.as_bytes()),
            Part::Var(v) => var(v, k, out),
        }
    }
}

fn var(v: &Var, k: &KeyInput, out: &mut Vec<u8>) {
    use std::io::Write;
    let req = k.req;
    match v {
        Var::RemoteAddr => {
            if let Some(ip) = k.client {
                let _ = write!(out, "{ip}");
            }
        }
        Var::BinaryRemoteAddr => match k.client {
            Some(IpAddr::V4(a)) => out.extend_from_slice(&a.octets()),
            Some(IpAddr::V6(a)) => out.extend_from_slice(&a.octets()),
            None => {}
        },
        Var::Scheme => out.extend_from_slice(if k.tls { b"https" } else { b"http" }),
        Var::Host => {
            if let Some(h) = req.host_name() {
                out.extend(h.iter().map(u8::to_ascii_lowercase));
            }
        }
        Var::RequestUri => {
            // The origin-form as the upstream would see it, also for an absolute-form target.
            if req.target.starts_with('/') {
                out.extend_from_slice(req.target.as_bytes());
            } else {
                out.extend_from_slice(req.path.as_bytes());
                if let Some(q) = req.query {
                    out.push(b'?');
                    out.extend_from_slice(q.as_bytes());
                }
            }
        }
        Var::Uri => out.extend_from_slice(k.uri.as_bytes()),
        Var::Args => out.extend_from_slice(req.query.unwrap_or("").as_bytes()),
        Var::Method => out.extend_from_slice(req.method_str.as_bytes()),
        Var::Header(name) => {
            if let Some(v) = req.header(name) {
                out.extend_from_slice(v);
            }
        }
        Var::Arg(name) => {
            let q = req.query.unwrap_or("");
            if let Some(v) = q.split('&').find_map(|kv| {
                let (k, v) = kv.split_once('=').unwrap_or((kv, ""));
                k.eq_ignore_ascii_case(name).then_some(v)
            }) {
                out.extend_from_slice(v.as_bytes());
            }
        }
        Var::Cookie(name) => {
            let found = req
                .headers
                .iter()
                .filter(|h| h.name.eq_ignore_ascii_case("cookie"))
                .flat_map(|h| h.value.split(|&b| b == b';'))
                .find_map(|c| {
                    let c = c.trim_ascii();
                    let eq = c.iter().position(|&b| b == b'=')?;
                    c[..eq]
                        .eq_ignore_ascii_case(name.as_bytes())
                        .then(|| &c[eq + 1..])
                });
            if let Some(v) = found {
                out.extend_from_slice(v);
            }
        }
    }
}

/// A 64-bit hash of a key, for the limit tables (seeded per process, so clients cannot
/// aim keys at one bucket).
pub fn hash64(key: &[u8]) -> u64 {
    xxhash_rust::xxh3::xxh3_64_with_seed(key, seed())
}

/// A 128-bit hash of a key that is the same in every process: a cluster limit's Redis key
/// (`cluster_wire.rs`), which every host must name alike.
pub fn stable128(key: &[u8]) -> u128 {
    xxhash_rust::xxh3::xxh3_128(key)
}

/// A 128-bit hash of a key, for cache entries and remembered credentials.
pub fn hash128(key: &[u8]) -> u128 {
    xxhash_rust::xxh3::xxh3_128_with_seed(key, seed())
}

/// The process's hash seed: from the clock and the address space at first use.
fn seed() -> u64 {
    use std::sync::OnceLock;
    static SEED: OnceLock<u64> = OnceLock::new();
    *SEED.get_or_init(|| {
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64);
        let local = 0u8;
        t ^ (&local as *const u8 as u64).rotate_left(32) ^ u64::from(std::process::id())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(tmpl: &str, raw: &str) -> Vec<u8> {
        let mut hs = [httparse::EMPTY_HEADER; 16];
        let req = match ringx_http::parse_request(raw.as_bytes(), &mut hs, &Default::default()) {
            Ok(ringx_http::Parsed::Complete(r)) => r,
            _ => panic!("parses"),
        };
        let t = Template::parse(tmpl).unwrap();
        let mut out = Vec::new();
        let k = KeyInput {
            req: &req,
            client: Some("10.1.2.3".parse().unwrap()),
            tls: false,
            uri: "/a b",
        };
        eval(&t, &k, &mut out);
        out
    }

    #[test]
    fn variables_evaluate_from_the_request() {
        let raw = "GET /a%20b?x=1&Id=7 HTTP/1.1\r\nHost: Ex.COM:8080\r\nX-Api-Key: k1\r\n\
                   Cookie: a=1; sess=s2\r\n\r\n";
        assert_eq!(key("$remote_addr", raw), b"10.1.2.3");
        assert_eq!(key("$binary_remote_addr", raw), [10, 1, 2, 3]);
        assert_eq!(
            key("$scheme://$host$request_uri", raw),
            b"http://ex.com/a%20b?x=1&Id=7"
        );
        assert_eq!(key("$uri|$args", raw), b"/a b|x=1&Id=7");
        assert_eq!(
            key("$http_x_api_key-$arg_id-$cookie_sess-$request_method", raw),
            b"k1-7-s2-GET"
        );
        assert_eq!(key("[$http_missing]", raw), b"[]");
    }
}
