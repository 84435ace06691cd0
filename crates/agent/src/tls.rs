//! TLS for the destinations given as `https://…`: the server's
//! certificate is checked against the system's roots (the distribution's
//! store, as `rustls-native-certs` finds it: `/etc/ssl/certs`, or
//! `$SSL_CERT_FILE`), or, with `--tls-ca F`, against the certificates of
//! that PEM file only (as curl's `--cacert`: a private CA replaces the
//! public ones rather than adding to them). The HTTP destinations (OTLP
//! over HTTP, Pyroscope) use ureq's rustls, the gRPC ones (OTLP, Parca)
//! tonic's; both on ring.

use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

/// The most bytes of a `--tls-ca` file read.
const MAX_CA: u64 = 4 << 20;

/// How the destinations check their servers.
#[derive(Clone, Debug, Default)]
pub struct Tls {
    /// `--tls-ca`: the file and its certificates (DER), PEM kept for tonic.
    ca: Option<Ca>,
    /// The system's roots, loaded at the first https destination that
    /// needs them (shared by the clones of this value).
    system: Arc<OnceLock<Result<Vec<Vec<u8>>, String>>>,
}

#[derive(Clone, Debug)]
struct Ca {
    path: PathBuf,
    pem: Vec<u8>,
    certs: Vec<Vec<u8>>,
}

impl Tls {
    /// The system's roots.
    pub fn system() -> Tls {
        Tls::default()
    }

    /// The certificates of the PEM file `path` (`--tls-ca`): read whole
    /// (bounded), at least one certificate.
    pub fn with_ca(path: &Path) -> Result<Tls, String> {
        use std::io::Read;
        let what = |e: &dyn std::fmt::Display| format!("--tls-ca {}: {e}", path.display());
        let mut pem = Vec::new();
        std::fs::File::open(path)
            .and_then(|f| f.take(MAX_CA + 1).read_to_end(&mut pem))
            .map_err(|e| what(&format!("cannot read it: {e}")))?;
        if pem.len() as u64 > MAX_CA {
            return Err(what(&format!("longer than {MAX_CA} bytes")));
        }
        let mut certs = Vec::new();
        for item in ureq::tls::parse_pem(&pem) {
            match item {
                Ok(ureq::tls::PemItem::Certificate(c)) => certs.push(c.der().to_vec()),
                Ok(_) => {}
                Err(e) => return Err(what(&format!("not a PEM file: {e}"))),
            }
        }
        if certs.is_empty() {
            return Err(what(
                &"holds no certificate (give the CA's certificate in PEM, -----BEGIN CERTIFICATE-----)",
            ));
        }
        Ok(Tls {
            ca: Some(Ca {
                path: path.to_path_buf(),
                pem,
                certs,
            }),
            ..Tls::default()
        })
    }

    /// What the certificates are checked against, for error messages.
    pub fn roots(&self) -> String {
        match &self.ca {
            Some(ca) => format!("the CA of --tls-ca {}", ca.path.display()),
            None => "the system's roots".into(),
        }
    }

    /// The roots as ureq takes them.
    fn ureq_roots(&self) -> Result<Vec<ureq::tls::Certificate<'static>>, String> {
        let ders: &[Vec<u8>] = match &self.ca {
            Some(ca) => &ca.certs,
            None => self
                .system
                .get_or_init(system_roots)
                .as_ref()
                .map_err(Clone::clone)?,
        };
        Ok(ders
            .iter()
            .map(|d| ureq::tls::Certificate::from_der(d).to_owned())
            .collect())
    }

    /// A blocking HTTP client whose requests end within `timeout`; https
    /// checked against these roots.
    pub fn http_agent(&self, timeout: Duration) -> Result<ureq::Agent, String> {
        let tls = ureq::tls::TlsConfig::builder()
            .root_certs(ureq::tls::RootCerts::Specific(Arc::new(self.ureq_roots()?)))
            .build();
        let config = ureq::Agent::config_builder()
            .timeout_global(Some(timeout))
            .http_status_as_error(true)
            .tls_config(tls)
            .build();
        Ok(config.into())
    }

    /// tonic's client TLS for the server named `host`.
    pub fn grpc(&self, host: &str) -> tonic::transport::ClientTlsConfig {
        let config = tonic::transport::ClientTlsConfig::new().domain_name(host);
        match &self.ca {
            Some(ca) => config.ca_certificate(tonic::transport::Certificate::from_pem(&ca.pem)),
            None => config.with_native_roots(),
        }
    }
}

/// The system's roots; an error when there are none.
fn system_roots() -> Result<Vec<Vec<u8>>, String> {
    let found = rustls_native_certs::load_native_certs();
    let certs: Vec<Vec<u8>> = found.certs.iter().map(|c| c.to_vec()).collect();
    if certs.is_empty() {
        let why = found
            .errors
            .first()
            .map_or_else(String::new, |e| format!(" ({e})"));
        return Err(format!(
            "no system root certificates found{why}; install ca-certificates or give --tls-ca FILE"
        ));
    }
    Ok(certs)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_ca_file_needs_a_certificate() {
        let d = tempfile::tempdir().unwrap();
        let f = d.path().join("ca.pem");
        std::fs::write(&f, "not pem\n").unwrap();
        let e = Tls::with_ca(&f).unwrap_err();
        assert!(e.contains("holds no certificate"), "{e}");
        let e = Tls::with_ca(&d.path().join("none")).unwrap_err();
        assert!(
            e.starts_with("--tls-ca ") && e.contains("cannot read it"),
            "{e}"
        );
    }
}
