//! `include` patterns as glob(3) expands them for nginx: `*`, `?` and `[...]` in any path
//! component, matches sorted by name, names starting with `.` only matched by a pattern
//! that starts with `.`, and a directory that does not exist matching nothing.

use std::path::{Component, Path, PathBuf};

/// Whether `pattern` has glob characters (nginx globs only then; otherwise the file must exist).
pub fn is_pattern(pattern: &str) -> bool {
    pattern.contains(['*', '?', '['])
}

/// The paths `pattern` (absolute) matches, in glob(3)'s order.
pub fn expand(pattern: &Path) -> Vec<PathBuf> {
    let mut found = vec![PathBuf::new()];
    for comp in pattern.components() {
        let part = match comp {
            Component::Normal(p) => p.to_string_lossy().into_owned(),
            other => {
                for f in &mut found {
                    f.push(other.as_os_str());
                }
                continue;
            }
        };
        if !is_pattern(&part) {
            for f in &mut found {
                f.push(&part);
            }
            found.retain(|f| f.symlink_metadata().is_ok());
            continue;
        }
        let mut next = Vec::new();
        for dir in &found {
            let Ok(entries) = std::fs::read_dir(if dir.as_os_str().is_empty() {
                Path::new(".")
            } else {
                dir
            }) else {
                continue;
            };
            let mut names: Vec<String> = entries
                .filter_map(|e| e.ok())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| (part.starts_with('.') || !n.starts_with('.')) && matches(&part, n))
                .collect();
            names.sort();
            next.extend(names.into_iter().map(|n| dir.join(n)));
        }
        found = next;
    }
    found
}

/// Whether `name` matches the glob `pat` (one path component).
pub fn matches(pat: &str, name: &str) -> bool {
    let p: Vec<char> = pat.chars().collect();
    let n: Vec<char> = name.chars().collect();
    let (mut pi, mut ni) = (0, 0);
    // Where the last `*` was, and the name position it has taken up to.
    let mut star: Option<(usize, usize)> = None;
    while ni < n.len() {
        let step = match p.get(pi) {
            Some('*') => {
                star = Some((pi, ni));
                pi += 1;
                continue;
            }
            Some('?') => Some(1),
            Some('[') => class(&p[pi..], n[ni]).map(|(ok, len)| if ok { len } else { 0 }),
            Some(&c) => Some(usize::from(c == n[ni])),
            None => Some(0),
        };
        match step {
            Some(len) if len > 0 => {
                pi += len;
                ni += 1;
            }
            // `[` without its `]` is a literal.
            None if n[ni] == '[' => {
                pi += 1;
                ni += 1;
            }
            _ => match star {
                Some((sp, sn)) => {
                    pi = sp + 1;
                    ni = sn + 1;
                    star = Some((sp, sn + 1));
                }
                None => return false,
            },
        }
    }
    p[pi..].iter().all(|&c| c == '*')
}

/// A `[...]` class at the start of `p`: whether `c` is in it and the class's length; None
/// when it is not closed.
fn class(p: &[char], c: char) -> Option<(bool, usize)> {
    let mut i = 1;
    let negate = matches!(p.get(1), Some('!' | '^'));
    if negate {
        i += 1;
    }
    let mut hit = false;
    let mut first = true;
    while let Some(&ch) = p.get(i) {
        if ch == ']' && !first {
            return Some((hit != negate, i + 1));
        }
        first = false;
        if p.get(i + 1) == Some(&'-') && p.get(i + 2).is_some_and(|&e| e != ']') {
            if (ch..=p[i + 2]).contains(&c) {
                hit = true;
            }
            i += 3;
        } else {
            hit |= ch == c;
            i += 1;
        }
    }
    None
}
