//! Which of a listener's servers a name picks: exact names first (any case, trailing dots
//! ignored), then the longest wildcard suffix, then the listener's default server (nginx's
//! order). One map per listener serves both the handshake's SNI and the request's `Host`
//! (the server crate's `Routes::server_index`), so an honest client whose two names agree
//! always gets one server, and a request whose names pick two servers can be told apart.

/// The servers of one listener, by name.
#[derive(Debug, Default, Clone)]
pub struct SniMap {
    /// (lowercase exact name, server).
    exact: Vec<(String, usize)>,
    /// (lowercase suffix with its leading dot, server), longest first.
    wildcard: Vec<(String, usize)>,
    default: usize,
}

impl SniMap {
    /// `names` of each server as configured (`example.com`, `*.example.com`); `default` is the
    /// index of the listener's default server.
    pub fn new<'a>(
        servers: impl IntoIterator<Item = (usize, &'a [String])>,
        default: usize,
    ) -> SniMap {
        let mut m = SniMap {
            default,
            ..SniMap::default()
        };
        for (i, names) in servers {
            for n in names {
                let n = n.to_ascii_lowercase();
                match n.strip_prefix('*') {
                    Some(suffix) => m.wildcard.push((suffix.to_string(), i)),
                    None => m.exact.push((n, i)),
                }
            }
        }
        m.wildcard.sort_by_key(|w| std::cmp::Reverse(w.0.len()));
        m
    }

    /// The server for an SNI name (or for none).
    pub fn pick(&self, sni: Option<&str>) -> usize {
        match sni {
            Some(name) => self.pick_name(name.as_bytes()),
            None => self.default,
        }
    }

    /// The server for a name as bytes (a `Host` without its port, an SNI name).
    pub fn pick_name(&self, name: &[u8]) -> usize {
        let mut name = name;
        while let Some(rest) = name.strip_suffix(b".") {
            name = rest;
        }
        if let Some((_, i)) = self
            .exact
            .iter()
            .find(|(n, _)| n.as_bytes().eq_ignore_ascii_case(name))
        {
            return *i;
        }
        self.wildcard
            .iter()
            .find(|(suffix, _)| {
                name.len() > suffix.len()
                    && name[name.len() - suffix.len()..].eq_ignore_ascii_case(suffix.as_bytes())
            })
            .map_or(self.default, |(_, i)| *i)
    }

    /// The listener's default server (no name, or one no server has).
    pub fn default_server(&self) -> usize {
        self.default
    }
}

#[cfg(test)]
mod tests {
    use super::SniMap;

    #[test]
    fn exact_then_longest_wildcard_then_default() {
        let a = ["example.com".to_string(), "*.example.com".to_string()];
        let b = ["*.api.example.com".to_string()];
        let c = ["Other.org".to_string()];
        let m = SniMap::new([(0, &a[..]), (1, &b[..]), (2, &c[..])], 2);
        assert_eq!(m.pick(Some("example.com")), 0);
        assert_eq!(m.pick(Some("WWW.example.com")), 0);
        assert_eq!(m.pick(Some("v1.api.example.com")), 1);
        assert_eq!(m.pick(Some("other.org.")), 2);
        assert_eq!(m.pick(Some("nobody.net")), 2);
        assert_eq!(m.pick(None), 2);
        // A wildcard needs a label before its suffix.
        assert_eq!(m.pick(Some(".example.com")), 2);
        assert_eq!(m.pick_name(b"V1.API.example.com.."), 1);
    }

    /// The longest wildcard wins whatever the order the servers were written in (nginx's
    /// rule), and of two equally long the first written.
    #[test]
    fn longest_wildcard_whatever_the_order() {
        let short = ["*.example.com".to_string()];
        let long = ["*.api.example.com".to_string()];
        let m = SniMap::new([(0, &short[..]), (1, &long[..])], 0);
        assert_eq!(m.pick_name(b"x.api.example.com"), 1);
        assert_eq!(m.pick_name(b"x.www.example.com"), 0);
        let m = SniMap::new([(0, &long[..]), (1, &short[..])], 0);
        assert_eq!(m.pick_name(b"x.api.example.com"), 0);
        assert_eq!(m.pick_name(b"x.www.example.com"), 1);
    }
}
