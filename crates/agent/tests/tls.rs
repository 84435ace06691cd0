//! The destinations over TLS with their credentials, one request each (a
//! cut of an empty interval: what a request holds is checked end to end
//! in otlp.rs, pyroscope.rs and parca.rs): against a server whose
//! certificate a test CA signed, trusted with `--tls-ca`, the request
//! arrives with its credential, gzipped where the protocol allows; the
//! same server is refused by the system's roots and by another CA, with a
//! sentence that names the certificate, and takes nothing.

mod common;

use common::*;
use profdev_agent::otlp::{Otlp, Protocol};
use profdev_agent::pyroscope::{Api, Pyroscope};
use profdev_agent::send::Destination;
use profdev_agent::tls::Tls;
use profdev_agent::token::Token;
use profdev_agent::url::Url;
use profdev_agent::Cut;
use prost::Message;
use std::io::Read;
use std::net::TcpListener;
use std::path::Path;

/// A cut of an empty interval.
fn cut() -> Cut {
    let mut enc = profdev_formats::recording::Encoder::new(&Default::default());
    enc.end();
    Cut {
        seq: 0,
        start_ns: 1_700_000_000_000_000_000,
        end_ns: 1_700_000_001_000_000_000,
        recording: enc.take(),
        ..Cut::default()
    }
}

fn common_labels() -> Vec<(String, String)> {
    vec![
        ("host.name".into(), "box".into()),
        ("service_name".into(), "web".into()),
    ]
}

/// `ca`'s certificate as a `--tls-ca` file in `dir`.
fn trust(dir: &Path, ca: &TestCa) -> Tls {
    let f = dir.join(format!("ca{}.pem", ca.cert_der.len()));
    std::fs::write(&f, &ca.ca_pem).unwrap();
    Tls::with_ca(&f).unwrap()
}

/// A credential file of `kind` holding `text`.
fn credential(dir: &Path, text: &str, basic: bool) -> Token {
    let f = dir.join(if basic { "basic" } else { "token" });
    std::fs::write(&f, text).unwrap();
    if basic {
        Token::read_basic(&f).unwrap()
    } else {
        Token::read(&f).unwrap()
    }
}

/// Send one cut to `d`.
fn send(d: &mut dyn Destination) -> Result<(), String> {
    let body = d.encode(&cut())?;
    d.send(&body)
}

#[test]
fn otlp_http_over_tls_trusts_the_ca_given_and_nothing_else() {
    let dir = tempfile::tempdir().unwrap();
    let ca = test_ca();
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("https://{}", listener.local_addr().unwrap());
    let got = https_collector(listener, &ca);
    let token = credential(dir.path(), "tls-t0ken\n", false);
    let make = |tls: &Tls| {
        let url = Url::parse(&url, 4318).unwrap();
        Otlp::new(
            url,
            Protocol::Http,
            common_labels(),
            Some(token.clone()),
            tls,
        )
        .unwrap()
    };

    // Neither the system's roots nor another CA trust the test server.
    for tls in [Tls::system(), trust(dir.path(), &test_ca())] {
        let e = send(&mut make(&tls)).unwrap_err();
        assert!(e.to_lowercase().contains("certificate"), "{e}");
        assert!(!e.contains("tls-t0ken"), "{e}");
    }
    assert!(got.lock().unwrap().is_empty());

    send(&mut make(&trust(dir.path(), &ca))).expect("the CA given is trusted");
    let taken = got.lock().unwrap().clone();
    assert_eq!(taken.len(), 1);
    let t = &taken[0];
    assert_eq!(t.path, "/v1development/profiles");
    assert_eq!(t.content_type, "application/x-protobuf");
    assert_eq!(t.content_encoding.as_deref(), Some("gzip"));
    assert_eq!(t.authorization.as_deref(), Some("Bearer tls-t0ken"));
    decode(&t.body);
}

#[test]
fn otlp_grpc_over_tls_is_gzipped_and_carries_basic_auth() {
    let dir = tempfile::tempdir().unwrap();
    let ca = test_ca();
    // RFC 7617: "user:pass" is dXNlcjpwYXNz.
    let (url, got, encodings) = grpc_collector_with("Basic dXNlcjpwYXNz", Some(&ca));
    assert!(url.starts_with("https://"), "{url}");
    let token = credential(dir.path(), "user:pass\n", true);
    let make = |tls: &Tls| {
        let url = Url::parse(&url, 4317).unwrap();
        Otlp::new(
            url,
            Protocol::Grpc,
            common_labels(),
            Some(token.clone()),
            tls,
        )
        .unwrap()
    };
    let e = send(&mut make(&trust(dir.path(), &test_ca()))).unwrap_err();
    assert!(e.to_lowercase().contains("certificate"), "{e}");
    assert!(got.lock().unwrap().is_empty());

    send(&mut make(&trust(dir.path(), &ca))).expect("the CA given is trusted");
    assert_eq!(got.lock().unwrap().len(), 1);
    assert_eq!(*encodings.lock().unwrap(), vec![Some("gzip".to_string())]);
}

/// The part named `name` of a multipart body.
fn part<'a>(body: &'a [u8], boundary: &str, name: &str) -> &'a [u8] {
    let head = format!("name=\"{name}\"");
    let sep = format!("\r\n--{boundary}");
    let at = body
        .windows(head.len())
        .position(|w| w == head.as_bytes())
        .unwrap_or_else(|| panic!("no part {name}"));
    let start = at
        + body[at..]
            .windows(4)
            .position(|w| w == b"\r\n\r\n")
            .unwrap()
        + 4;
    let len = body[start..]
        .windows(sep.len())
        .position(|w| w == sep.as_bytes())
        .unwrap();
    &body[start..start + len]
}

#[test]
fn pyroscope_ingest_over_tls_with_basic_auth() {
    let dir = tempfile::tempdir().unwrap();
    let ca = test_ca();
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("https://{}/base/", listener.local_addr().unwrap());
    let got = https_collector(listener, &ca);
    let token = credential(dir.path(), "Aladdin:open sesame", true);
    let mut d = Pyroscope::new(
        Url::parse(&url, 4040).unwrap(),
        Api::Ingest,
        19,
        common_labels(),
        Some(token),
        &trust(dir.path(), &ca),
    )
    .unwrap();
    send(&mut d).unwrap();
    let taken = got.lock().unwrap().clone();
    assert_eq!(taken.len(), 1);
    let t = &taken[0];
    assert_eq!(
        t.path,
        "/base/ingest?name=web%7Bhost_name%3Dbox%7D&from=1700000000&until=1700000001&format=pprof&sampleRate=19&spyName=profdev"
    );
    assert_eq!(
        t.authorization.as_deref(),
        Some("Basic QWxhZGRpbjpvcGVuIHNlc2FtZQ==")
    );
    let boundary = t
        .content_type
        .strip_prefix("multipart/form-data; boundary=")
        .unwrap_or_else(|| panic!("{}", t.content_type));
    let profile = part(&t.body, boundary, "profile");
    let mut pb = Vec::new();
    flate2::read::GzDecoder::new(profile)
        .read_to_end(&mut pb)
        .unwrap();
    let p = profdev_formats::pprof::Profile::decode(&pb[..]).unwrap();
    assert_eq!(p.duration_nanos, 1_000_000_000);
    let config = part(&t.body, boundary, "sample_type_config");
    assert_eq!(
        config,
        profdev_agent::pyroscope::SAMPLE_TYPE_CONFIG.as_bytes()
    );
}
