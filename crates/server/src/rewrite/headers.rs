//! Headers: `add_header` on responses, `proxy_set_header` and `proxy_hide_header` across the
//! proxy, and `error_page` targets resolved to locations when the configuration is compiled.

use std::collections::BTreeMap;
use std::sync::Arc;

use ringx_config::rewrite::{is_connection_field, HeaderValue};
use ringx_config::template::Template;
use toml::Spanned;

use super::vars::{field_safe, Vars};
use crate::error::Error;

/// Whether a response with `status` gets the headers `add_header` adds without `always`
/// (nginx's list).
pub fn add_header_applies(status: u16) -> bool {
    matches!(
        status,
        200 | 201 | 204 | 206 | 301 | 302 | 303 | 304 | 307 | 308
    )
}

#[derive(Clone)]
struct Item {
    name: String,
    value: Template,
    always: bool,
}

/// `add_header`, compiled.
#[derive(Clone)]
pub struct AddHeaders {
    items: Vec<Item>,
    has_vars: bool,
    /// The last item is the server's `Alt-Svc`, added for `quic = true` (`crate::alt_svc`).
    alt_svc: bool,
}

impl AddHeaders {
    pub fn compile(
        map: &BTreeMap<Spanned<String>, HeaderValue>,
    ) -> Result<Option<Arc<AddHeaders>>, Error> {
        if map.is_empty() {
            return Ok(None);
        }
        let mut items = Vec::new();
        for (k, v) in map {
            items.push(Item {
                name: k.get_ref().clone(),
                value: Template::parse(v.value()).map_err(Error::config)?,
                always: v.always(),
            });
        }
        let has_vars = items.iter().any(|i| i.value.literal().is_none());
        Ok(Some(Arc::new(AddHeaders {
            items,
            has_vars,
            alt_svc: false,
        })))
    }

    /// `lines` (none: no `add_header`) and `Alt-Svc: value` on every response, as `always`,
    /// last; or `lines` as they are where they set `Alt-Svc` themselves: the operator's wins.
    pub fn with_alt_svc(lines: Option<Arc<AddHeaders>>, value: &str) -> Arc<AddHeaders> {
        let mut a = match lines {
            Some(a) if a.sets("alt-svc") => return a,
            Some(a) => AddHeaders::clone(&a),
            None => AddHeaders {
                items: Vec::new(),
                has_vars: false,
                alt_svc: false,
            },
        };
        a.items.push(Item {
            name: "Alt-Svc".into(),
            value: Template::parse(value).expect("an Alt-Svc value names no variable"),
            always: true,
        });
        a.alt_svc = true;
        Arc::new(a)
    }

    /// Whether a line sets the field `name` (any case).
    pub fn sets(&self, name: &str) -> bool {
        self.items.iter().any(|i| i.name.eq_ignore_ascii_case(name))
    }

    /// Whether the last line is the server's `Alt-Svc` (`crate::alt_svc`). The hook for
    /// HTTP/3: a response over QUIC leaves that line out (its client is there already);
    /// every response over TCP writes all the lines, and pays nothing for the question.
    pub fn ends_with_alt_svc(&self) -> bool {
        self.alt_svc
    }

    /// Whether a value names a variable (the response needs the request to be written).
    pub fn has_vars(&self) -> bool {
        self.has_vars
    }

    /// Appends the header lines a response with `status` gets. A value that expands to
    /// nothing adds no header (nginx's rule).
    pub fn write(&self, status: u16, vars: Option<&Vars>, out: &mut String) {
        let plain = add_header_applies(status);
        for it in self.items.iter().filter(|i| i.always || plain) {
            self.line(it, vars, out);
        }
    }

    /// Every line expanded now, for a response not known yet: (lines for 2xx/3xx, lines for
    /// every status).
    pub fn expand_split(&self, vars: Option<&Vars>) -> (String, String) {
        let (mut normal, mut always) = (String::new(), String::new());
        for it in &self.items {
            self.line(it, vars, if it.always { &mut always } else { &mut normal });
        }
        (normal, always)
    }

    /// [`expand_split`](Self::expand_split) kept as [`Added`].
    pub fn added(&self, vars: Option<&Vars>) -> Added {
        let (ok, always) = self.expand_split(vars);
        Added { ok, always }
    }

    fn line(&self, it: &Item, vars: Option<&Vars>, out: &mut String) {
        let value = match (it.value.literal(), vars) {
            (Some(l), _) => std::borrow::Cow::Borrowed(l),
            (None, Some(v)) => std::borrow::Cow::Owned(v.expand(&it.value)),
            (None, None) => return,
        };
        if value.is_empty() {
            return;
        }
        out.push_str(&it.name);
        out.push_str(": ");
        out.push_str(&field_safe(&value));
        out.push_str("\r\n");
    }
}

/// `add_header` lines expanded for a request whose response is not written yet (an answer
/// from the cache kept for after a fill): those for 2xx/3xx responses, and those for every
/// response (`always`).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Added {
    ok: String,
    always: String,
}

impl Added {
    /// The lines a response with `status` gets.
    pub fn for_status(&self, status: u16) -> std::borrow::Cow<'_, str> {
        if !add_header_applies(status) || self.ok.is_empty() {
            return std::borrow::Cow::Borrowed(&self.always);
        }
        if self.always.is_empty() {
            return std::borrow::Cow::Borrowed(&self.ok);
        }
        std::borrow::Cow::Owned(format!("{}{}", self.ok, self.always))
    }
}

/// What an `error_page` leads to.
#[derive(Clone)]
pub enum ErrTarget {
    /// A location of the same server, with the URI to serve there and the status to answer
    /// with (None: the error's; Some(None): `=`, the target's own; Some(Some(c)): `=c`).
    Local {
        status: Option<Option<u16>>,
        uri: String,
        loc: usize,
    },
    /// A URL: 302 to it.
    Redirect(String),
}

/// A server's or a location's error pages.
pub struct ErrorPages {
    pages: Vec<(u16, ErrTarget)>,
    /// Some target needs the request itself: a location that proxies (`error_page 502 =
    /// @fallback`), or one serving files behind a guard (its access phase runs on the
    /// request). A proxied request keeps a copy of its head, for when its own upstream fails.
    proxies: bool,
}

impl ErrorPages {
    pub fn get(&self, status: u16) -> Option<&ErrTarget> {
        self.pages
            .iter()
            .find(|(s, _)| *s == status)
            .map(|(_, t)| t)
    }

    /// `proxies`: some target needs the request (a location that proxies, or guarded files).
    pub fn new(pages: Vec<(u16, ErrTarget)>, proxies: bool) -> ErrorPages {
        ErrorPages { pages, proxies }
    }

    pub fn proxies(&self) -> bool {
        self.proxies
    }
}

/// What a proxy location changes in the request it sends and the response it relays.
#[derive(Default)]
pub struct ProxyEdit {
    /// `proxy_set_header` fields other than Host: (name, value); an empty value only drops
    /// the client's.
    pub set: Vec<(String, Template)>,
    /// `proxy_set_header Host`.
    pub host: Option<Template>,
    /// Lowercase names of the client's fields not forwarded (every field set here).
    pub drop: Vec<String>,
    /// `proxy_hide_header`, lowercase.
    pub hide: Vec<String>,
    /// `proxy_intercept_errors`: upstream statuses with an `error_page` get the error page.
    pub intercept: bool,
}

impl ProxyEdit {
    pub fn compile(
        set: &BTreeMap<Spanned<String>, String>,
        hide: &[Spanned<String>],
        intercept: bool,
    ) -> Result<Option<Arc<ProxyEdit>>, Error> {
        if set.is_empty() && hide.is_empty() && !intercept {
            return Ok(None);
        }
        let mut e = ProxyEdit {
            intercept,
            hide: hide
                .iter()
                .map(|h| h.get_ref().to_ascii_lowercase())
                .collect(),
            ..ProxyEdit::default()
        };
        for (k, v) in set {
            let name = k.get_ref();
            // ringx manages the connection to the upstream (keep-alive, upgrades) itself.
            if is_connection_field(name) {
                continue;
            }
            let t = Template::parse(v).map_err(Error::config)?;
            if name.eq_ignore_ascii_case("host") {
                e.host = Some(t);
                continue;
            }
            e.drop.push(name.to_ascii_lowercase());
            if !v.is_empty() {
                e.set.push((name.clone(), t));
            }
        }
        Ok(Some(Arc::new(e)))
    }

    /// The `proxy_set_header` lines, expanded (empty values left out, as nginx does).
    pub fn set_lines(&self, vars: &Vars, out: &mut Vec<u8>) {
        for (name, t) in &self.set {
            let v = vars.expand(t);
            if v.is_empty() {
                continue;
            }
            out.extend_from_slice(name.as_bytes());
            out.extend_from_slice(b": ");
            out.extend_from_slice(field_safe(&v).as_bytes());
            out.extend_from_slice(b"\r\n");
        }
    }
}
