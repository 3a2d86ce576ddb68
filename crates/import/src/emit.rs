//! TOML text, written by hand so that each table can carry a `# FILE:LINE` comment; every
//! string goes through [`quote`] (TOML basic strings) and every key through [`key`].

/// A value.
#[derive(Debug, Clone, PartialEq)]
pub enum V {
    S(String),
    I(i64),
    B(bool),
    A(Vec<V>),
    /// An inline table.
    T(Vec<(String, V)>),
}

pub fn s(v: impl Into<String>) -> V {
    V::S(v.into())
}

/// A `[name]` or `[[name]]` table with its comment, keys and sub-tables.
#[derive(Debug, Clone, Default)]
pub struct Table {
    pub header: String,
    pub comment: String,
    pub kv: Vec<(String, V)>,
    pub subs: Vec<Table>,
}

impl Table {
    pub fn new(header: &str, comment: impl Into<String>) -> Table {
        Table {
            header: header.to_string(),
            comment: comment.into(),
            ..Table::default()
        }
    }

    pub fn set(&mut self, k: &str, v: V) {
        match self.kv.iter_mut().find(|(n, _)| n == k) {
            Some(e) => e.1 = v,
            None => self.kv.push((k.to_string(), v)),
        }
    }

    pub fn get(&self, k: &str) -> Option<&V> {
        self.kv.iter().find(|(n, _)| n == k).map(|(_, v)| v)
    }

    pub fn render(&self, out: &mut String, indent: &str) {
        if !self.comment.is_empty() {
            out.push_str(&format!("{indent}# {}\n", self.comment));
        }
        out.push_str(&format!("{indent}{}\n", self.header));
        for (k, v) in &self.kv {
            out.push_str(&format!("{indent}{} = {}\n", key(k), value(v)));
        }
        for t in &self.subs {
            t.render(out, &format!("{indent}  "));
        }
    }
}

/// A key: bare when TOML allows it, quoted otherwise.
pub fn key(k: &str) -> String {
    if !k.is_empty()
        && k.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
    {
        k.to_string()
    } else {
        quote(k)
    }
}

/// A TOML basic string.
pub fn quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            '\r' => out.push_str("\\r"),
            c if (c as u32) < 0x20 || c as u32 == 0x7f => {
                out.push_str(&format!("\\u{:04x}", c as u32))
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

pub fn value(v: &V) -> String {
    match v {
        V::S(s) => quote(s),
        V::I(i) => i.to_string(),
        V::B(b) => b.to_string(),
        V::A(a) => format!("[{}]", a.iter().map(value).collect::<Vec<_>>().join(", ")),
        V::T(t) => format!(
            "{{ {} }}",
            t.iter()
                .map(|(k, v)| format!("{} = {}", key(k), value(v)))
                .collect::<Vec<_>>()
                .join(", ")
        ),
    }
}
