//! The Prometheus text format's writer: families with their HELP and TYPE, samples with
//! escaped labels.

use std::fmt::Write as _;

pub(super) struct Out {
    pub(super) s: String,
}

impl Out {
    pub(super) fn family(&mut self, name: &str, kind: &str, help: &str) {
        let _ = writeln!(self.s, "# HELP {name} {help}");
        let _ = writeln!(self.s, "# TYPE {name} {kind}");
    }

    pub(super) fn sample(
        &mut self,
        name: &str,
        labels: &[(&str, &str)],
        v: impl std::fmt::Display,
    ) {
        self.s.push_str(name);
        if !labels.is_empty() {
            self.s.push('{');
            for (i, (k, val)) in labels.iter().enumerate() {
                if i > 0 {
                    self.s.push(',');
                }
                let _ = write!(self.s, "{k}=\"{}\"", escape_label(val));
            }
            self.s.push('}');
        }
        let _ = writeln!(self.s, " {v}");
    }

    /// One sample per zone.
    pub(super) fn per_zone(&mut self, name: &str, kind: &str, help: &str, vals: &[u64]) {
        self.family(name, kind, help);
        for (z, v) in vals.iter().enumerate() {
            self.sample(name, &[("zone", &z.to_string())], v);
        }
    }

    /// A family with a sample per zone and value of `label`: `cols` holds each value with
    /// its column (one entry per zone). Zone by zone, the values in the order given.
    pub(super) fn per_zone_by(
        &mut self,
        (name, kind, help): (&str, &str, &str),
        label: &str,
        cols: &[(&str, Vec<u64>)],
    ) {
        self.family(name, kind, help);
        let zones = cols.iter().map(|c| c.1.len()).max().unwrap_or(0);
        for z in 0..zones {
            let zone = z.to_string();
            for (value, col) in cols {
                if let Some(v) = col.get(z) {
                    self.sample(name, &[("zone", &zone), (label, value)], v);
                }
            }
        }
    }
}

fn escape_label(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}
