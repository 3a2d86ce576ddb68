//! What the translation builds as it walks the nginx tree: the tables of the output, the
//! report, the maps; and the options it runs with.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use ringx_nginxconf::Directive;

use crate::emit::{s, Table};
use crate::report::Report;

/// How to read the nginx configuration.
#[derive(Debug, Clone)]
pub struct Options {
    /// nginx's prefix (`-p`): relative `root`s and log paths are taken from it. Debian's
    /// nginx has `/usr/share/nginx`.
    pub prefix: PathBuf,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            prefix: PathBuf::from("/usr/share/nginx"),
        }
    }
}

/// A translation: the ringx configuration and what happened to each directive.
#[derive(Debug)]
pub struct Outcome {
    pub toml: String,
    pub report: Report,
}

/// A `map` block: the variable it reads, its entries (key, value) and its default.
#[derive(Debug, Clone)]
pub struct MapDef {
    pub source: String,
    pub entries: Vec<(String, String)>,
    pub default: Option<String>,
    pub hostnames: bool,
    pub place: String,
}

/// Everything the walk builds.
pub struct Cx {
    pub opts: Options,
    /// nginx's conf prefix: the directory of nginx.conf (relative file names of
    /// `auth_basic_user_file` and `ssl_certificate` are taken from it).
    pub conf_dir: PathBuf,
    pub report: Report,
    pub runtime: Table,
    pub http: Table,
    pub http2: Table,
    pub tls: Table,
    pub servers: Vec<Table>,
    pub upstreams: Vec<Table>,
    pub streams: Vec<Table>,
    pub zones: Vec<Table>,
    /// `map`s by the variable they define (`$name` without `$`), per module.
    pub maps: HashMap<String, MapDef>,
    /// `proxy_set_header`s seen, noted where a location proxies with them.
    pub headers: Vec<Directive>,
    /// Upstreams left out (none of their servers could be translated).
    pub dropped: Vec<String>,
}

impl Cx {
    pub fn new(opts: Options, conf_dir: PathBuf) -> Cx {
        Cx {
            opts,
            conf_dir,
            report: Report::default(),
            runtime: Table::new("[runtime]", ""),
            http: Table::new("[http]", ""),
            http2: Table::new("[http2]", ""),
            tls: Table::new("[tls]", ""),
            servers: Vec::new(),
            upstreams: Vec::new(),
            streams: Vec::new(),
            zones: Vec::new(),
            maps: HashMap::new(),
            headers: Vec::new(),
            dropped: Vec::new(),
        }
    }

    /// A path of the configuration made absolute from the prefix (`-p`).
    pub fn under_prefix(&self, p: &str) -> String {
        absolute(&self.opts.prefix, p)
    }

    /// A path made absolute from the conf prefix (the directory of nginx.conf).
    pub fn under_conf(&self, p: &str) -> String {
        absolute(&self.conf_dir, p)
    }

    /// Whether an `[[upstream]]` of this name was written.
    pub fn has_upstream(&self, name: &str) -> bool {
        self.upstreams
            .iter()
            .any(|u| u.get("name") == Some(&s(name)))
    }
}

fn absolute(base: &Path, p: &str) -> String {
    if Path::new(p).is_absolute() {
        p.to_string()
    } else {
        base.join(p).display().to_string()
    }
}
