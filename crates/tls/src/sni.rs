//! Which server's TLS settings a handshake uses: the SNI name matched against the listener's
//! servers as request routing matches `Host` (exact names first, then the longest wildcard
//! suffix), and the listener's default server when SNI is absent or matches none.

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
        let Some(name) = sni else {
            return self.default;
        };
        let name = name.trim_end_matches('.');
        if let Some((_, i)) = self
            .exact
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
        {
            return *i;
        }
        self.wildcard
            .iter()
            .find(|(suffix, _)| {
                name.len() > suffix.len()
                    && name.as_bytes()[name.len() - suffix.len()..]
                        .eq_ignore_ascii_case(suffix.as_bytes())
            })
            .map_or(self.default, |(_, i)| *i)
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
    }
}
