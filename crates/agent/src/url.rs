//! A destination's address: `http://HOST[:PORT][/PATH]` (or `https://`),
//! HOST a name, an IPv4 address or a bracketed IPv6 one; and the rule
//! that plain http goes only to this machine unless `--insecure` says
//! otherwise.

use std::fmt;
use std::net::IpAddr;

/// A parsed destination address.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Url {
    /// `http` or `https`.
    pub scheme: String,
    /// The host, without brackets.
    pub host: String,
    pub port: u16,
    /// The path, empty when none was given.
    pub path: String,
}

impl Url {
    /// Parse `text`; `default_port` when it names none.
    pub fn parse(text: &str, default_port: u16) -> Result<Url, String> {
        let bad = |why: &str| {
            format!("{text}: not a destination address ({why}); give http://HOST[:PORT][/PATH]")
        };
        let (scheme, rest) = text.split_once("://").ok_or_else(|| bad("no scheme"))?;
        if scheme != "http" && scheme != "https" {
            return Err(bad("the scheme is neither http nor https"));
        }
        let (authority, path) = match rest.find('/') {
            Some(i) => (&rest[..i], &rest[i..]),
            None => (rest, ""),
        };
        if authority.contains('@') {
            return Err(bad(
                "credentials go in --token-file or --basic-auth-file, never in the address",
            ));
        }
        let (host, port) = if let Some(v6) = authority.strip_prefix('[') {
            let (h, after) = v6
                .split_once(']')
                .ok_or_else(|| bad("no closing bracket"))?;
            (h, after.strip_prefix(':'))
        } else {
            match authority.rsplit_once(':') {
                Some((h, p)) => (h, Some(p)),
                None => (authority, None),
            }
        };
        if host.is_empty() {
            return Err(bad("no host"));
        }
        let port = match port {
            Some(p) => p.parse().map_err(|_| bad("the port is not a number"))?,
            None => default_port,
        };
        Ok(Url {
            scheme: scheme.into(),
            host: host.into(),
            port,
            path: path.into(),
        })
    }

    /// `HOST:PORT`, an IPv6 host in brackets.
    pub fn authority(&self) -> String {
        if self.host.contains(':') {
            format!("[{}]:{}", self.host, self.port)
        } else {
            format!("{}:{}", self.host, self.port)
        }
    }

    /// Whether the host is this machine: `localhost` or a loopback address.
    pub fn is_loopback(&self) -> bool {
        self.host == "localhost" || self.host.parse::<IpAddr>().is_ok_and(|ip| ip.is_loopback())
    }

    /// Refuse plain http to another machine without `insecure`.
    pub fn check(&self, insecure: bool) -> Result<(), String> {
        if self.scheme == "http" && !self.is_loopback() && !insecure {
            return Err(format!(
                "{self}: refusing to send profiles over plain http to another machine; use https, or --insecure to accept it"
            ));
        }
        Ok(())
    }
}

impl fmt::Display for Url {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}://{}{}", self.scheme, self.authority(), self.path)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_parse_with_their_default_port() {
        let u = Url::parse("http://127.0.0.1", 4318).unwrap();
        assert_eq!(
            (u.host.as_str(), u.port, u.path.as_str()),
            ("127.0.0.1", 4318, "")
        );
        let u = Url::parse("http://[::1]:9/v1development/profiles", 4318).unwrap();
        assert_eq!((u.host.as_str(), u.port), ("::1", 9));
        assert_eq!(u.to_string(), "http://[::1]:9/v1development/profiles");
        assert_eq!(u.authority(), "[::1]:9");
        for bad in [
            "127.0.0.1:4318",
            "ftp://x",
            "http://:4318",
            "http://h:port",
            "http://u:p@h",
        ] {
            assert!(Url::parse(bad, 1).is_err(), "{bad}");
        }
    }

    #[test]
    fn plain_http_goes_only_to_this_machine_unless_insecure() {
        for ok in ["http://localhost", "http://127.0.0.2:1", "http://[::1]"] {
            assert_eq!(Url::parse(ok, 1).unwrap().check(false), Ok(()));
        }
        let far = Url::parse("http://collector.example:4318", 1).unwrap();
        assert_eq!(
            far.check(false).unwrap_err(),
            "http://collector.example:4318: refusing to send profiles over plain http to another machine; use https, or --insecure to accept it"
        );
        assert_eq!(far.check(true), Ok(()));
        let tls = Url::parse("https://collector.example", 1).unwrap();
        assert_eq!(tls.check(false), Ok(()));
    }
}
