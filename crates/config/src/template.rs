//! Values with variables, in nginx's names (`$host`, `${request_uri}`, `$http_user_agent`,
//! `$1`), parsed once when the configuration is loaded into a [`Template`]: literal pieces and
//! variable references. A request only concatenates; nothing is parsed per request.
//!
//! | variable | value |
//! |---|---|
//! | `$host` | the request's Host without the port, lowercase (else the server's first name) |
//! | `$request_uri` | the request target as the client sent it (path and query) |
//! | `$uri`, `$document_uri` | the current path, decoded and normalised (after rewrites) |
//! | `$args`, `$query_string` | the query string (after rewrites) |
//! | `$is_args` | `?` when there is a query string, else empty |
//! | `$arg_NAME` | the query parameter NAME |
//! | `$scheme` | `http` or `https` |
//! | `$remote_addr`, `$remote_port` | the client's address and port |
//! | `$server_addr`, `$server_port` | the address and port the request came in on |
//! | `$server_name` | the server's first `server_name` |
//! | `$request_method` | GET, POST, ... |
//! | `$request_id` | 32 random hex digits, the same for every use within one request |
//! | `$http_NAME` | the request header NAME (`-` becomes `_`: `$http_user_agent`) |
//! | `$0` … `$9` | captures of the last regular expression matched (a regex location or a `rewrite`) |

/// A variable a template refers to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Var {
    Host,
    RequestUri,
    Uri,
    Args,
    IsArgs,
    Arg(String),
    Scheme,
    RemoteAddr,
    RemotePort,
    ServerAddr,
    ServerPort,
    ServerName,
    RequestMethod,
    RequestId,
    /// A request header, its name lowercase with `-` (`$http_x_real_ip` is `x-real-ip`).
    Http(String),
    Capture(u8),
}

/// One piece of a template.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Part {
    Lit(String),
    Var(Var),
}

/// A value with variables, parsed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Template {
    pub parts: Vec<Part>,
}

impl Template {
    /// Parses `$name` and `${name}` references; everything else is literal. An unknown
    /// variable, a `$` with no name after it, or an unclosed `${` is an error saying which.
    pub fn parse(s: &str) -> Result<Template, String> {
        let mut parts = Vec::new();
        let mut lit = String::new();
        let b = s.as_bytes();
        let mut i = 0;
        while i < b.len() {
            if b[i] != b'$' {
                let next = s[i..].find('$').map_or(s.len(), |n| i + n);
                lit.push_str(&s[i..next]);
                i = next;
                continue;
            }
            let (name, end) = if b.get(i + 1) == Some(&b'{') {
                let close = s[i + 2..]
                    .find('}')
                    .ok_or_else(|| format!("{s:?}: `${{` at byte {i} is not closed by `}}`"))?;
                (&s[i + 2..i + 2 + close], i + 3 + close)
            } else if b.get(i + 1).is_some_and(u8::is_ascii_digit) {
                // nginx: a capture is one digit; `$12` is capture 1 then "2".
                (&s[i + 1..i + 2], i + 2)
            } else {
                let len = b[i + 1..]
                    .iter()
                    .take_while(|c| c.is_ascii_alphanumeric() || **c == b'_')
                    .count();
                (&s[i + 1..i + 1 + len], i + 1 + len)
            };
            if name.is_empty() {
                return Err(format!(
                    "{s:?}: `$` at byte {i} is not followed by a variable name (nginx has no \
                     escape for `$`; use ${{name}} to end a name)"
                ));
            }
            let var = var(name).ok_or_else(|| {
                format!(
                    "{s:?}: unknown variable ${name} (known: $host, $request_uri, $uri, $args, \
                     $is_args, $arg_NAME, $scheme, $remote_addr, $remote_port, $server_addr, \
                     $server_port, $server_name, $request_method, $request_id, $http_NAME, \
                     $0-$9)"
                )
            })?;
            if !lit.is_empty() {
                parts.push(Part::Lit(std::mem::take(&mut lit)));
            }
            parts.push(Part::Var(var));
            i = end;
        }
        if !lit.is_empty() {
            parts.push(Part::Lit(lit));
        }
        Ok(Template { parts })
    }

    /// The value when it has no variables.
    pub fn literal(&self) -> Option<&str> {
        match self.parts.as_slice() {
            [] => Some(""),
            [Part::Lit(s)] => Some(s),
            _ => None,
        }
    }

    /// The highest capture referred to.
    pub fn max_capture(&self) -> Option<u8> {
        self.vars()
            .filter_map(|v| match v {
                Var::Capture(n) => Some(*n),
                _ => None,
            })
            .max()
    }

    pub fn vars(&self) -> impl Iterator<Item = &Var> {
        self.parts.iter().filter_map(|p| match p {
            Part::Var(v) => Some(v),
            Part::Lit(_) => None,
        })
    }
}

fn var(name: &str) -> Option<Var> {
    if let Ok(n) = name.parse::<u8>() {
        return (n <= 9).then_some(Var::Capture(n));
    }
    let lower = name.to_ascii_lowercase();
    if let Some(h) = lower.strip_prefix("http_").filter(|h| !h.is_empty()) {
        return Some(Var::Http(h.replace('_', "-")));
    }
    if let Some(a) = name.strip_prefix("arg_").filter(|a| !a.is_empty()) {
        return Some(Var::Arg(a.to_string()));
    }
    Some(match lower.as_str() {
        "host" => Var::Host,
        "request_uri" => Var::RequestUri,
        "uri" | "document_uri" => Var::Uri,
        "args" | "query_string" => Var::Args,
        "is_args" => Var::IsArgs,
        "scheme" => Var::Scheme,
        "remote_addr" => Var::RemoteAddr,
        "remote_port" => Var::RemotePort,
        "server_addr" => Var::ServerAddr,
        "server_port" => Var::ServerPort,
        "server_name" => Var::ServerName,
        "request_method" => Var::RequestMethod,
        "request_id" => Var::RequestId,
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_names_braces_and_captures() {
        let t = Template::parse("https://$host${request_uri}x/$1$12/$http_X_Real_Ip").unwrap();
        assert_eq!(
            t.parts,
            vec![
                Part::Lit("https://".into()),
                Part::Var(Var::Host),
                Part::Var(Var::RequestUri),
                Part::Lit("x/".into()),
                Part::Var(Var::Capture(1)),
                Part::Var(Var::Capture(1)),
                Part::Lit("2/".into()),
                Part::Var(Var::Http("x-real-ip".into())),
            ]
        );
        assert_eq!(t.max_capture(), Some(1));
        assert_eq!(Template::parse("plain").unwrap().literal(), Some("plain"));
        assert_eq!(Template::parse("").unwrap().literal(), Some(""));
        assert!(Template::parse("$uri").unwrap().literal().is_none());
    }

    #[test]
    fn bad_templates_say_why() {
        for (t, want) in [
            ("$nope", "unknown variable $nope"),
            ("a$", "not followed by a variable name"),
            ("a$-", "not followed by a variable name"),
            ("${host", "not closed"),
            ("$http_", "unknown variable $http_"),
        ] {
            let e = Template::parse(t).unwrap_err();
            assert!(e.contains(want), "{t}: {e}");
        }
    }
}
