//! Key templates: the strings that name what a rate limit, a connection limit or a cache entry
//! is keyed by (`"$remote_addr"`, `"$scheme$host$request_uri"`, `"$http_x_api_key"`), in
//! nginx's variable syntax. Parsed (and unknown variables refused) at load; evaluated per
//! request by the server (`ringx_server::guard::key`), behind one function so that it can be
//! unified with the rewrite templates later.

/// A variable a key template can use.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Var {
    /// `$remote_addr`: the client's address (after `real_ip_from`), as text.
    RemoteAddr,
    /// `$binary_remote_addr`: the same, as 4 or 16 bytes.
    BinaryRemoteAddr,
    /// `$scheme`: `http` or `https`.
    Scheme,
    /// `$host`: the request's host without port, lowercase.
    Host,
    /// `$request_uri`: the target as sent (path and query, still percent-encoded).
    RequestUri,
    /// `$uri`: the normalised, decoded path.
    Uri,
    /// `$args`: the query string.
    Args,
    /// `$request_method`.
    Method,
    /// `$http_NAME`: a request header (`_` for `-`).
    Header(String),
    /// `$arg_NAME`: a query parameter.
    Arg(String),
    /// `$cookie_NAME`: a cookie.
    Cookie(String),
}

/// One piece of a template.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Part {
    Lit(String),
    Var(Var),
}

/// A parsed template.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Template {
    pub parts: Vec<Part>,
    pub source: String,
}

impl Template {
    /// Parses `s`; the error names the variable that is not known.
    pub fn parse(s: &str) -> Result<Template, String> {
        let mut parts = Vec::new();
        let mut lit = String::new();
        let mut rest = s;
        while let Some(i) = rest.find('$') {
            lit.push_str(&rest[..i]);
            let after = &rest[i + 1..];
            let (name, tail) = if let Some(b) = after.strip_prefix('{') {
                let end = b
                    .find('}')
                    .ok_or_else(|| format!("unclosed \"${{\" in key template {s:?}"))?;
                (&b[..end], &b[end + 1..])
            } else {
                let end = after
                    .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                    .unwrap_or(after.len());
                (&after[..end], &after[end..])
            };
            if name.is_empty() {
                return Err(format!(
                    "a '$' without a variable name in key template {s:?}"
                ));
            }
            if !lit.is_empty() {
                parts.push(Part::Lit(std::mem::take(&mut lit)));
            }
            parts.push(Part::Var(var(name).ok_or_else(|| {
                format!(
                    "unknown variable ${name} in key template {s:?}: use $remote_addr, \
                     $binary_remote_addr, $scheme, $host, $request_uri, $uri, $args, \
                     $request_method, $http_NAME, $arg_NAME or $cookie_NAME"
                )
            })?));
            rest = tail;
        }
        lit.push_str(rest);
        if !lit.is_empty() {
            parts.push(Part::Lit(lit));
        }
        if parts.is_empty() {
            return Err("an empty key template: give at least one variable".into());
        }
        if !parts.iter().any(|p| matches!(p, Part::Var(_))) {
            return Err(format!(
                "key template {s:?} has no variable: every request would share one key"
            ));
        }
        Ok(Template {
            parts,
            source: s.to_string(),
        })
    }

    /// Whether the key is the client's address alone (what an XDP block can act on).
    pub fn is_client_address(&self) -> bool {
        matches!(
            self.parts[..],
            [Part::Var(Var::RemoteAddr)] | [Part::Var(Var::BinaryRemoteAddr)]
        )
    }
}

fn var(name: &str) -> Option<Var> {
    let field = |p: &str| {
        name.strip_prefix(p)
            .filter(|n| !n.is_empty())
            .map(str::to_ascii_lowercase)
    };
    Some(match name {
        "remote_addr" => Var::RemoteAddr,
        "binary_remote_addr" => Var::BinaryRemoteAddr,
        "scheme" => Var::Scheme,
        "host" => Var::Host,
        "request_uri" => Var::RequestUri,
        "uri" => Var::Uri,
        "args" | "query_string" => Var::Args,
        "request_method" => Var::Method,
        _ => {
            if let Some(h) = field("http_") {
                Var::Header(h.replace('_', "-"))
            } else if let Some(a) = field("arg_") {
                Var::Arg(a)
            } else if let Some(c) = field("cookie_") {
                Var::Cookie(c)
            } else {
                return None;
            }
        }
    })
}

impl<'de> serde::Deserialize<'de> for Template {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        Template::parse(&s).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn templates_parse_into_literals_and_variables() {
        let t = Template::parse("$scheme://${host}$request_uri|$http_x_api_key").unwrap();
        assert_eq!(
            t.parts,
            vec![
                Part::Var(Var::Scheme),
                Part::Lit("://".into()),
                Part::Var(Var::Host),
                Part::Var(Var::RequestUri),
                Part::Lit("|".into()),
                Part::Var(Var::Header("x-api-key".into())),
            ]
        );
        assert!(Template::parse("$remote_addr").unwrap().is_client_address());
        assert!(!Template::parse("$remote_addr$uri")
            .unwrap()
            .is_client_address());
        for bad in ["$nope", "a$", "${host", "", "static", "$http_"] {
            assert!(Template::parse(bad).is_err(), "{bad:?}");
        }
    }
}
