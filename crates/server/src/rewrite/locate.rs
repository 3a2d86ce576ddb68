//! nginx's location search: an exact location wins at once; otherwise the longest matching
//! prefix is remembered, and unless it is `^~`, the regex locations are tried in the order
//! written and the first that matches wins (with its captures); otherwise the prefix.
//! Named locations are never matched by a path.

use super::vars::Caps;
use super::LocKind;
use crate::route::VServer;

/// The location for `uri` (an index into `server.locations`) and the captures of its regex.
pub fn locate(server: &VServer, uri: &str) -> Option<(usize, Option<Caps>)> {
    let mut prefix: Option<usize> = None;
    for (i, l) in server.locations.iter().enumerate() {
        match &l.kind {
            LocKind::Exact if l.path == uri => return Some((i, None)),
            LocKind::Exact => {}
            // Sorted longest first: the first prefix that matches is the longest.
            LocKind::Prefix | LocKind::PrefixStop => {
                if prefix.is_none() && uri.starts_with(l.path.as_str()) {
                    if matches!(l.kind, LocKind::PrefixStop) {
                        return Some((i, None));
                    }
                    prefix = Some(i);
                }
            }
            LocKind::Regex(re) => {
                if let Some(c) = re.captures(uri) {
                    return Some((i, Some(Caps::from_match(uri, &c))));
                }
            }
            LocKind::Named => break,
        }
    }
    prefix.map(|i| (i, None))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::route::Routes;
    use crate::upstream::Upstreams;

    fn server(locs: &[&str]) -> Routes {
        let mut toml = String::from("[[server]]\nlisten = [\"127.0.0.1:18931\"]\n");
        for (i, p) in locs.iter().enumerate() {
            toml += &format!(
                "[[server.location]]\npath = {p:?}\nreturn = {{ status = 200, body = \"{i}\" }}\n"
            );
        }
        let cfg = ringx_config::parse("t.toml", &toml).expect("parses");
        let mut ups = Upstreams::compile(&cfg).expect("no upstreams");
        Routes::compile(&cfg, &mut ups).expect("compiles")
    }

    /// Which configured location (by its body, the order written) answers `uri`.
    fn pick(r: &Routes, uri: &str) -> Option<(String, String)> {
        let s = &r.servers[0];
        locate(s, uri).map(|(i, caps)| {
            let crate::route::Action::Return(c) = &s.locations[i].action else {
                panic!("return locations only")
            };
            (
                String::from_utf8(c.body.clone()).unwrap(),
                caps.map_or(String::new(), |c| c.get(1).to_string()),
            )
        })
    }

    /// nginx's order, location by location: `=` first, then the longest prefix unless a regex
    /// matches (regexes in the order written), `^~` stopping the regexes, named locations
    /// never.
    #[test]
    fn nginx_order() {
        let r = server(&[
            "/",                    // 0
            "= /exact",             // 1
            "/images/",             // 2
            "^~ /static/",          // 3
            "~* \\.(png|JPG)$",     // 4
            "~ ^/api/v([0-9]+)/",   // 5
            "~ ^/api/",             // 6
            "/api/v1/long/prefix/", // 7
            "@named",               // 8
        ]);
        let want = |uri: &str, loc: &str, cap: &str| {
            assert_eq!(
                pick(&r, uri),
                Some((loc.to_string(), cap.to_string())),
                "{uri}"
            );
        };
        want("/exact", "1", "");
        want("/exact/more", "0", "");
        want("/images/a.gif", "2", "");
        want("/images/a.PNG", "4", "PNG");
        want("/static/a.png", "3", "");
        want("/api/v2/users", "5", "2");
        want("/api/vx/users", "6", "");
        // A regex beats even a longer prefix.
        want("/api/v1/long/prefix/x", "5", "1");
        want("/other", "0", "");
        want("/@named", "0", "");
    }
}
