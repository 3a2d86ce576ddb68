//! Apache/nginx `htpasswd` files: `user:hash` lines, `#` comments. The hash kinds a server
//! verifies with kept crates are accepted (bcrypt `$2a$`/`$2b$`/`$2y$`, SHA-crypt `$5$`/`$6$`,
//! MD5-crypt `$apr1$`/`$1$`); the ones that are broken (`{SHA}`, DES `crypt`, plain text) are
//! refused at load with the line, so a file that would lock everyone out, or let weak hashes
//! in, is reported before it serves.

use std::path::Path;

/// How a password is hashed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HashKind {
    Bcrypt,
    Sha256Crypt,
    Sha512Crypt,
    /// `$apr1$` (Apache's MD5) or `$1$` (the glibc one): one algorithm, two magics.
    Md5Crypt,
}

impl HashKind {
    /// The kind of `hash`, or why it is not accepted.
    pub fn of(hash: &str) -> Result<HashKind, String> {
        if ["$2a$", "$2b$", "$2y$"].iter().any(|p| hash.starts_with(p)) {
            return Ok(HashKind::Bcrypt);
        }
        if hash.starts_with("$5$") {
            return Ok(HashKind::Sha256Crypt);
        }
        if hash.starts_with("$6$") {
            return Ok(HashKind::Sha512Crypt);
        }
        if hash.starts_with("$apr1$") || hash.starts_with("$1$") {
            return Ok(HashKind::Md5Crypt);
        }
        if hash.starts_with("{SHA}") {
            return Err(
                "{SHA} is an unsalted SHA-1: regenerate it with `htpasswd -B` (bcrypt)".into(),
            );
        }
        if hash.starts_with("{PLAIN}") || hash.starts_with("{SSHA}") {
            return Err(format!(
                "{} is not supported: hash with bcrypt (`htpasswd -B`) or SHA-crypt ($5$, $6$)",
                &hash[..hash.find('}').map_or(hash.len(), |i| i + 1)]
            ));
        }
        if hash.len() == 13 && !hash.starts_with('$') {
            return Err(
                "a DES crypt(3) hash (8 characters of password at most): regenerate it \
                        with `htpasswd -B` (bcrypt)"
                    .into(),
            );
        }
        Err(
            "not a supported hash: bcrypt (`htpasswd -B`), SHA-crypt ($5$, $6$) and $apr1$ are"
                .into(),
        )
    }
}

/// One user of the file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct User {
    pub name: String,
    pub hash: String,
    pub kind: HashKind,
}

/// Reads and checks a user file; the error names the file and the line.
pub fn load(path: &Path) -> Result<Vec<User>, String> {
    let text =
        std::fs::read_to_string(path).map_err(|e| format!("user_file {}: {e}", path.display()))?;
    parse(&text).map_err(|(line, why)| format!("user_file {} line {line}: {why}", path.display()))
}

/// Parses a user file's text; errors carry the 1-based line.
pub fn parse(text: &str) -> Result<Vec<User>, (usize, String)> {
    let mut users: Vec<User> = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.trim_end_matches('\r');
        if line.trim().is_empty() || line.trim_start().starts_with('#') {
            continue;
        }
        let Some((name, rest)) = line.split_once(':') else {
            return Err((i + 1, "expected user:hash".into()));
        };
        // Apache's digest files have `user:realm:hash`; other tools append `:comment`.
        let hash = rest.split(':').next().unwrap_or("");
        if name.is_empty() {
            return Err((i + 1, "empty user name".into()));
        }
        let kind = HashKind::of(hash).map_err(|e| (i + 1, format!("user {name:?}: {e}")))?;
        if users.iter().any(|u| u.name == name) {
            return Err((i + 1, format!("user {name:?} is listed twice")));
        }
        users.push(User {
            name: name.to_string(),
            hash: hash.to_string(),
            kind,
        });
    }
    if users.is_empty() {
        return Err((0, "no users: nobody could log in".into()));
    }
    Ok(users)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_and_errors() {
        let ok = "# admins\nalice:$2y$05$abcdefghijklmnopqrstuu5xkqfGtA7MpZ9wsoA0lH1yUxLy5pzS6\n\
                  bob:$6$salt$hash:comment\ncarol:$apr1$x$y\ndave:$5$s$h\n";
        let u = parse(ok).unwrap();
        assert_eq!(
            u.iter().map(|x| x.kind).collect::<Vec<_>>(),
            [
                HashKind::Bcrypt,
                HashKind::Sha512Crypt,
                HashKind::Md5Crypt,
                HashKind::Sha256Crypt
            ]
        );
        assert_eq!(u[1].hash, "$6$salt$hash");
        for (bad, line) in [
            ("a:{SHA}qUqP5cyxm6YcTAhz05Hph5gvu9M=\n", 1),
            ("\nb:abcdefghijklm\n", 2),
            ("c\n", 1),
            ("a:$6$x$y\na:$6$x$z\n", 2),
            ("# only comments\n", 0),
        ] {
            assert_eq!(parse(bad).unwrap_err().0, line, "{bad:?}");
        }
    }
}
