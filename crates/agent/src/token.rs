//! The credentials every request carries: `--token-file F`, a bearer
//! token (`Authorization: Bearer TOKEN` over HTTP, the `authorization`
//! metadata over gRPC), or `--basic-auth-file F`, `USER:PASSWORD` on one
//! line (`Authorization: Basic …`, RFC 7617). Either is read from a file,
//! never taken on the command line, and never shown: its `Debug` is
//! redacted and no error or health line quotes it.

use std::fmt;
use std::path::Path;

/// The most bytes of a token file read.
const MAX_TOKEN: u64 = 16 * 1024;

/// A credential (see the module doc): the `Authorization` header's value
/// and the option it came from.
#[derive(Clone, PartialEq, Eq)]
pub struct Token {
    header: String,
    flag: &'static str,
}

impl fmt::Debug for Token {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Token(redacted)")
    }
}

impl Token {
    /// The bearer token in file `path` (`--token-file`): its text less
    /// surrounding white space.
    pub fn read(path: &Path) -> Result<Token, String> {
        let flag = "--token-file";
        let t = read_line(path, flag)?;
        if t.contains(' ') {
            return Err(format!(
                "{flag} {}: holds no token (one line, no spaces or control characters)",
                path.display()
            ));
        }
        Ok(Token {
            header: format!("Bearer {t}"),
            flag,
        })
    }

    /// The user and password in file `path` (`--basic-auth-file`):
    /// `USER:PASSWORD` on one line.
    pub fn read_basic(path: &Path) -> Result<Token, String> {
        use base64::Engine;
        let flag = "--basic-auth-file";
        let t = read_line(path, flag)?;
        match t.split_once(':') {
            Some((user, _)) if !user.is_empty() => Ok(Token {
                header: format!(
                    "Basic {}",
                    base64::engine::general_purpose::STANDARD.encode(t.as_bytes())
                ),
                flag,
            }),
            _ => Err(format!(
                "{flag} {}: holds no USER:PASSWORD line",
                path.display()
            )),
        }
    }

    /// The `Authorization` header's value.
    pub fn header_value(&self) -> String {
        self.header.clone()
    }

    /// The option it was read from (`--token-file`, `--basic-auth-file`).
    pub fn flag(&self) -> &'static str {
        self.flag
    }
}

/// The one line of file `path` (option `flag`), trimmed: bounded, not
/// empty, no control characters; never quoted in an error.
fn read_line(path: &Path, flag: &str) -> Result<String, String> {
    use std::io::Read;
    let mut text = String::new();
    std::fs::File::open(path)
        .and_then(|f| f.take(MAX_TOKEN + 1).read_to_string(&mut text))
        .map_err(|e| format!("{flag} {}: cannot read it: {e}", path.display()))?;
    if text.len() as u64 > MAX_TOKEN {
        return Err(format!(
            "{flag} {}: longer than {MAX_TOKEN} bytes",
            path.display()
        ));
    }
    let t = text.trim();
    if t.is_empty() || t.chars().any(char::is_control) {
        return Err(format!(
            "{flag} {}: holds no credential (one line, no control characters)",
            path.display()
        ));
    }
    Ok(t.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_token_is_read_trimmed_and_never_shown() {
        let d = tempfile::tempdir().unwrap();
        let f = d.path().join("token");
        std::fs::write(&f, "s3cr3t-t0ken\n").unwrap();
        let t = Token::read(&f).unwrap();
        assert_eq!(t.header_value(), "Bearer s3cr3t-t0ken");
        assert_eq!(format!("{t:?}"), "Token(redacted)");
        std::fs::write(&f, "two words\n").unwrap();
        let e = Token::read(&f).unwrap_err();
        assert!(e.contains("holds no token") && !e.contains("words"), "{e}");
        assert!(Token::read(&d.path().join("none"))
            .unwrap_err()
            .contains("cannot read it"));
        std::fs::write(&f, "a\nb\n").unwrap();
        assert!(Token::read(&f).unwrap_err().contains("holds no credential"));
    }

    /// RFC 7617's example: Aladdin, open sesame.
    #[test]
    fn basic_auth_is_user_colon_password_in_base64() {
        let d = tempfile::tempdir().unwrap();
        let f = d.path().join("basic");
        std::fs::write(&f, "Aladdin:open sesame\n").unwrap();
        let t = Token::read_basic(&f).unwrap();
        assert_eq!(t.header_value(), "Basic QWxhZGRpbjpvcGVuIHNlc2FtZQ==");
        assert_eq!(
            (format!("{t:?}"), t.flag()),
            ("Token(redacted)".into(), "--basic-auth-file")
        );
        std::fs::write(&f, "no-colon\n").unwrap();
        let e = Token::read_basic(&f).unwrap_err();
        assert!(e.ends_with("holds no USER:PASSWORD line"), "{e}");
    }
}
