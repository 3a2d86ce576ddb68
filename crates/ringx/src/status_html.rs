//! `GET /` on the admin listener: the status page as server-rendered HTML that refreshes
//! itself (`<meta http-equiv="refresh">`, `?refresh=N` seconds, 0 for never) and needs no
//! JavaScript; its actions are plain forms posted to `/action` (`admin_action.rs`).

use std::fmt::Write as _;

use crate::status::Snapshot;

/// HTML text escaping (also for attribute values).
pub fn esc(s: &str) -> String {
    let mut o = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => o.push_str("&amp;"),
            '<' => o.push_str("&lt;"),
            '>' => o.push_str("&gt;"),
            '"' => o.push_str("&quot;"),
            '\'' => o.push_str("&#39;"),
            c => o.push(c),
        }
    }
    o
}

fn ms(v: Option<f64>) -> String {
    v.map_or("–".into(), |x| format!("{x:.1}"))
}

const STYLE: &str = "body{font:13px/1.35 system-ui,sans-serif;margin:1em 2em;color:#222}\
h1{font-size:18px;margin:0 0 .3em}h2{font-size:15px;margin:1.2em 0 .3em}\
table{border-collapse:collapse;margin-bottom:.5em}\
th,td{border:1px solid #bbb;padding:2px 8px;text-align:right}th{background:#dde}\
td.l,th.l{text-align:left}tr.up{background:#d8f5d0}tr.down{background:#f8c8c8}\
tr.drained{background:#e0e0e0;color:#666}tr.busy{background:#fff2c0}\
.meta{color:#555}form{display:inline;margin:0}input[type=number]{width:4em}\
.warn{color:#b00;font-weight:bold}";

/// The page. `token`: the admin token the page was opened with, when it matched (carried in
/// its forms); `needs_token`: a token is configured, so forms without one ask for it.
pub fn render(s: &Snapshot, refresh: u32, token: Option<&str>, needs_token: bool) -> String {
    let mut o = String::with_capacity(16 * 1024);
    let _ = write!(
        o,
        "<!DOCTYPE html><html><head><meta charset=\"utf-8\"><title>ringx status</title>"
    );
    if refresh > 0 {
        let _ = write!(o, "<meta http-equiv=\"refresh\" content=\"{refresh}\">");
    }
    let _ = write!(o, "<style>{STYLE}</style></head><body>");
    let _ = write!(
        o,
        "<h1>ringx {} status</h1><p class=\"meta\">engine {} · up {:.0} s · configuration \
         generation {} · reloads ok {} failed {} · <span id=\"requests\">{}</span> requests · \
         <span id=\"connections\">{}</span> connections · <span id=\"rps\">{:.0}</span> \
         requests/s · refreshes {} · <a href=\"/status.json\">JSON</a> · \
         <a href=\"/metrics\">metrics</a></p>",
        esc(&s.version),
        esc(&s.engine),
        s.uptime,
        s.generation,
        s.reloads_ok,
        s.reloads_failed,
        s.requests(),
        s.connections(),
        s.rps(),
        if refresh > 0 {
            format!("every {refresh} s")
        } else {
            "never (?refresh=N)".into()
        }
    );
    let classes: Vec<String> = s
        .responses
        .iter()
        .map(|(k, v)| format!("{k}: <span id=\"resp-{k}\">{v}</span>"))
        .collect();
    let _ = write!(o, "<p>Responses: {}</p>", classes.join(" · "));

    o.push_str(
        "<h2>Zones</h2><table id=\"zones\"><tr><th>zone</th><th>state</th><th>CPU</th>\
         <th>CPU %</th><th>busy %</th><th>connections</th><th>requests</th>\
         <th>requests/s</th></tr>",
    );
    for z in &s.zones {
        let _ = write!(
            o,
            "<tr class=\"{}\" id=\"zone-{}\"><td>{}</td><td class=\"l\">{}</td><td>{}</td>\
             <td>{}</td><td>{:.0}</td><td class=\"conns\">{}</td><td class=\"reqs\">{}</td>\
             <td>{:.0}</td></tr>",
            if z.parked { "up" } else { "busy" },
            z.id,
            z.id,
            if z.parked { "parked" } else { "busy" },
            z.on_cpu.map_or("–".into(), |c| c.to_string()),
            z.cpu_pct.map_or("–".into(), |c| format!("{c:.0}")),
            z.busy,
            z.connections,
            z.requests,
            z.rps
        );
    }
    o.push_str("</table>");

    o.push_str(
        "<h2>Upstreams</h2><table id=\"servers\"><tr><th class=\"l\">upstream</th>\
         <th class=\"l\">server</th><th class=\"l\">address</th><th>state</th><th>weight</th>\
         <th>active</th><th>responses</th><th>failures</th><th>p50 ms</th><th>p90 ms</th>\
         <th>p99 ms</th><th class=\"l\">actions</th></tr>",
    );
    if s.servers.is_empty() {
        o.push_str("<tr><td class=\"l\" colspan=\"12\">no upstreams</td></tr>");
    }
    let tok = token_field(token, needs_token);
    for r in &s.servers {
        let (class, state) = match (r.drained, r.healthy) {
            (true, _) => ("drained", "DRAIN"),
            (false, true) => ("up", "UP"),
            (false, false) => ("down", "DOWN"),
        };
        let hidden = format!(
            "<input type=\"hidden\" name=\"upstream\" value=\"{}\">\
             <input type=\"hidden\" name=\"server\" value=\"{}\">\
             <input type=\"hidden\" name=\"back\" value=\"1\">{tok}",
            esc(&r.upstream),
            esc(&r.server)
        );
        let toggle = if r.drained { "enable" } else { "drain" };
        let _ = write!(
            o,
            "<tr class=\"{class}\" data-upstream=\"{}\" data-server=\"{}\"><td class=\"l\">{}</td>\
             <td class=\"l\">{}</td><td class=\"l\">{}</td><td class=\"state\">{state}</td>\
             <td class=\"weight\">{}</td><td class=\"active\">{}</td>\
             <td class=\"responses\">{}</td><td class=\"failures\">{}</td><td>{}</td><td>{}</td>\
             <td>{}</td><td class=\"l\"><form method=\"post\" action=\"/action\">{hidden}\
             <button name=\"action\" value=\"{toggle}\">{toggle}</button></form> \
             <form method=\"post\" action=\"/action\">{hidden}<input type=\"number\" \
             name=\"weight\" min=\"1\" max=\"1000\" value=\"{}\"><button name=\"action\" \
             value=\"weight\">set weight</button></form></td></tr>",
            esc(&r.upstream),
            esc(&r.server),
            esc(&r.upstream),
            esc(&r.server),
            esc(&r.addr),
            r.weight,
            r.active,
            r.responses,
            r.failures,
            ms(r.p50),
            ms(r.p90),
            ms(r.p99),
            r.weight
        );
    }
    o.push_str("</table>");

    o.push_str("<h2>Listeners</h2><table id=\"listeners\"><tr><th class=\"l\">address</th><th class=\"l\">serves</th></tr>");
    for (a, p) in &s.listeners {
        let _ = write!(
            o,
            "<tr><td class=\"l\">{}</td><td class=\"l\">{}</td></tr>",
            esc(a),
            esc(p)
        );
    }
    o.push_str("</table>");

    if !s.certs.is_empty() {
        o.push_str("<h2>TLS certificates</h2><table id=\"certs\"><tr><th class=\"l\">file</th><th class=\"l\">subject</th><th>days to expiry</th></tr>");
        for (f, subj, days) in &s.certs {
            let warn = if *days < 14.0 { " class=\"warn\"" } else { "" };
            let _ = write!(
                o,
                "<tr><td class=\"l\">{}</td><td class=\"l\">{}</td><td{warn}>{:.0}</td></tr>",
                esc(f),
                esc(subj),
                days.floor()
            );
        }
        o.push_str("</table>");
    }

    if let Some(x) = &s.xdp_drops {
        o.push_str("<h2>XDP drops</h2><table id=\"xdp\"><tr><th class=\"l\">reason</th><th>packets</th></tr>");
        for (k, v) in x {
            let _ = write!(o, "<tr><td class=\"l\">{}</td><td>{v}</td></tr>", esc(k));
        }
        o.push_str("</table>");
    }

    if let Some(c) = &s.cache {
        let ratio = s
            .cache_hit_ratio()
            .map_or("–".into(), |r| format!("{:.1} %", r * 100.0));
        let _ = write!(
            o,
            "<h2>Proxy cache</h2><p>hit ratio <span id=\"cache-hit-ratio\">{ratio}</span></p>\
             <table id=\"cache\"><tr>"
        );
        for k in c.keys() {
            let _ = write!(o, "<th>{}</th>", esc(k));
        }
        o.push_str("</tr><tr>");
        for v in c.values() {
            let _ = write!(o, "<td>{v}</td>");
        }
        let _ = write!(
            o,
            "</tr></table><form method=\"post\" action=\"/action\">\
             <input type=\"hidden\" name=\"back\" value=\"1\">{tok}cache <input name=\"cache\" \
             size=\"10\"> key <input name=\"key\" size=\"40\"> <button name=\"action\" \
             value=\"purge\">purge</button></form>"
        );
    }
    o.push_str("</body></html>\n");
    o
}

/// The token input of the forms: hidden with the page's token, a field to fill in when one is
/// needed and the page was not opened with it, nothing otherwise.
fn token_field(token: Option<&str>, needs: bool) -> String {
    match (token, needs) {
        (Some(t), _) => format!(
            "<input type=\"hidden\" name=\"token\" value=\"{}\">",
            esc(t)
        ),
        (None, true) => {
            "<input type=\"password\" name=\"token\" placeholder=\"token\" size=\"8\">".into()
        }
        (None, false) => String::new(),
    }
}
