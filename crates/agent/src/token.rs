//! `--token-file F`: the bearer token every request carries
//! (`Authorization: Bearer TOKEN` over HTTP, the `authorization` metadata
//! over gRPC). It is read from a file, never taken on the command line,
//! and never shown: its `Debug` is redacted and no error or health line
//! quotes it.

use std::fmt;
use std::path::Path;

/// The most bytes of a token file read.
const MAX_TOKEN: u64 = 16 * 1024;

/// A bearer token (see the module doc).
#[derive(Clone, PartialEq, Eq)]
pub struct Token(String);

impl fmt::Debug for Token {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Token(redacted)")
    }
}

impl Token {
    /// The token in file `path`: its text less surrounding white space.
    pub fn read(path: &Path) -> Result<Token, String> {
        use std::io::Read;
        let mut text = String::new();
        std::fs::File::open(path)
            .and_then(|f| f.take(MAX_TOKEN + 1).read_to_string(&mut text))
            .map_err(|e| format!("--token-file {}: cannot read it: {e}", path.display()))?;
        let t = text.trim();
        if text.len() as u64 > MAX_TOKEN {
            return Err(format!(
                "--token-file {}: longer than {MAX_TOKEN} bytes",
                path.display()
            ));
        }
        if t.is_empty() || t.chars().any(|c| c.is_control() || c == ' ') {
            return Err(format!(
                "--token-file {}: holds no token (one line, no spaces or control characters)",
                path.display()
            ));
        }
        Ok(Token(t.to_string()))
    }

    /// The `Authorization` header's value.
    pub fn header_value(&self) -> String {
        format!("Bearer {}", self.0)
    }
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
    }
}
