//! What the agent's end-to-end tests share: a CPU-hot C program placed in
//! cgroups named as a container runtime, systemd and Kubernetes name
//! them; collectors on 127.0.0.1 (HTTP by hand, gRPC with tonic from the
//! opentelemetry-proto crate's generated service); the requests decoded
//! with that crate's types (proto v1.10.0, the release profdev pins).

#![allow(dead_code)]

use opentelemetry_proto::tonic::collector::profiles::v1development::ExportProfilesServiceRequest;
use opentelemetry_proto::tonic::common::v1::any_value::Value;
use prost::Message;
use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The hot program: `hot_loop` spins for the seconds of its argument.
const HOT_C: &str = r#"
#include <stdlib.h>
#include <time.h>
volatile unsigned long sink;
__attribute__((noinline)) void hot_loop(double secs)
{
    struct timespec t0, t;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    unsigned long x = 1;
    do {
        for (int i = 0; i < 100000; i++)
            x = x * 6364136223846793005UL + 1442695040888963407UL;
        sink = x;
        clock_gettime(CLOCK_MONOTONIC, &t);
    } while ((t.tv_sec - t0.tv_sec) + (t.tv_nsec - t0.tv_nsec) / 1e9 < secs);
}
int main(int argc, char **argv) { hot_loop(argc > 1 ? atof(argv[1]) : 1); return 0; }
"#;

/// The gate of a test that samples the whole machine with gcc's program.
pub fn ready(what: &str) -> bool {
    let can = if profdev_testkit::is_root() {
        Ok(())
    } else {
        Err("system-wide sampling needs root or CAP_PERFMON".to_string())
    };
    profdev_testkit::privileged(what, can) && profdev_testkit::tools(what, &["gcc"])
}

/// Build the hot program in `dir`.
pub fn build_hot(dir: &Path) -> PathBuf {
    let src = dir.join("hot.c");
    std::fs::write(&src, HOT_C).unwrap();
    let exe = dir.join("hot");
    let o = Command::new("gcc")
        .args([
            "-O1",
            "-g",
            "-fno-omit-frame-pointer",
            "-Wl,--build-id",
            "-o",
        ])
        .arg(&exe)
        .arg(&src)
        .output()
        .unwrap();
    assert!(o.status.success(), "gcc: {o:?}");
    exe
}

pub const CONTAINER: &str = "3f2a8c9d0b1e4f5a6b7c8d9e0f1a2b3c4d5e6f7a8b9c0d1e2f3a4b5c6d7e8f90";
pub const POD: &str = "8d7e6f5a-4b3c-2d1e-0f9a-8b7c6d5e4f3a";

/// A cgroup the test made under the v1 `name=systemd` hierarchy (this
/// machine's; on a v2-only one, under the unified root), removed on drop.
pub struct Cgroup {
    pub dir: PathBuf,
    top: PathBuf,
}

impl Cgroup {
    /// `/profdev-test-PID-TAG/REL`.
    pub fn new(tag: &str, rel: &str) -> Cgroup {
        let root = ["/sys/fs/cgroup/systemd", "/sys/fs/cgroup"]
            .iter()
            .map(PathBuf::from)
            .find(|p| p.join("cgroup.procs").exists())
            .expect("a cgroup hierarchy with cgroup.procs");
        let top = root.join(format!("profdev-test-{}-{tag}", std::process::id()));
        let dir = top.join(rel.trim_start_matches('/'));
        std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("mkdir {}: {e}", dir.display()));
        Cgroup { dir, top }
    }

    /// Run `exe SECS` inside it (the shell moves itself in, then execs).
    pub fn spawn(&self, exe: &Path, secs: &str) -> Child {
        Command::new("sh")
            .arg("-c")
            .arg("echo $$ > \"$1/cgroup.procs\" && exec \"$2\" \"$3\"")
            .args(["sh"])
            .arg(&self.dir)
            .arg(exe)
            .arg(secs)
            .spawn()
            .unwrap()
    }
}

impl Drop for Cgroup {
    fn drop(&mut self) {
        // Innermost first; each is empty once its process has exited.
        let mut d = self.dir.clone();
        while d.starts_with(&self.top) {
            let _ = std::fs::remove_dir(&d);
            if !d.pop() {
                break;
            }
        }
    }
}

/// One request a collector took.
#[derive(Clone, Debug)]
pub struct Taken {
    pub path: String,
    pub content_type: String,
    /// The request's Content-Encoding, if any (the body is kept decoded).
    pub content_encoding: Option<String>,
    pub authorization: Option<String>,
    pub body: Vec<u8>,
}

/// An HTTP/1.1 collector on `listener` answering every request with 200
/// and keeping it (a gzipped body decoded).
pub fn http_collector(listener: TcpListener) -> Arc<Mutex<Vec<Taken>>> {
    let got = Arc::new(Mutex::new(Vec::new()));
    let keep = got.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(stream) = stream else { return };
            let keep = keep.clone();
            std::thread::spawn(move || serve(stream, &keep));
        }
    });
    got
}

/// A test CA and a server certificate it signed for `localhost` and
/// 127.0.0.1.
pub struct TestCa {
    pub ca_pem: String,
    pub cert_pem: String,
    pub key_pem: String,
    pub cert_der: Vec<u8>,
    pub key_der: Vec<u8>,
}

/// A new [`TestCa`].
pub fn test_ca() -> TestCa {
    use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair};
    let mut ca = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca.distinguished_name
        .push(DnType::CommonName, "profdev test CA");
    let ca_key = KeyPair::generate().unwrap();
    let ca_cert = ca.self_signed(&ca_key).unwrap();
    let issuer = Issuer::new(ca, ca_key);
    let server =
        CertificateParams::new(vec!["localhost".to_string(), "127.0.0.1".to_string()]).unwrap();
    let key = KeyPair::generate().unwrap();
    let cert = server.signed_by(&key, &issuer).unwrap();
    TestCa {
        ca_pem: ca_cert.pem(),
        cert_pem: cert.pem(),
        key_pem: key.serialize_pem(),
        cert_der: cert.der().to_vec(),
        key_der: key.serialize_der(),
    }
}

/// [`http_collector`] over TLS with `ca`'s server certificate.
pub fn https_collector(listener: TcpListener, ca: &TestCa) -> Arc<Mutex<Vec<Taken>>> {
    use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(
            vec![CertificateDer::from(ca.cert_der.clone())],
            PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(ca.key_der.clone())),
        )
        .unwrap();
    let config = Arc::new(config);
    let got = Arc::new(Mutex::new(Vec::new()));
    let keep = got.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(stream) = stream else { return };
            let (keep, config) = (keep.clone(), config.clone());
            std::thread::spawn(move || {
                let conn = rustls::ServerConnection::new(config).unwrap();
                serve(rustls::StreamOwned::new(conn, stream), &keep)
            });
        }
    });
    got
}

fn serve<S: Read + Write>(stream: S, keep: &Mutex<Vec<Taken>>) {
    let mut r = BufReader::new(stream);
    loop {
        let mut line = String::new();
        // A client that gave up on the handshake (a certificate it does
        // not trust) ends here too.
        if r.read_line(&mut line).unwrap_or(0) == 0 {
            return;
        }
        let path = line.split_whitespace().nth(1).unwrap_or("").to_string();
        let (mut len, mut content_type, mut authorization) = (0usize, String::new(), None);
        let mut content_encoding = None;
        loop {
            let mut h = String::new();
            r.read_line(&mut h).unwrap();
            let h = h.trim_end();
            if h.is_empty() {
                break;
            }
            let (k, v) = h.split_once(':').unwrap();
            match k.to_ascii_lowercase().as_str() {
                "content-length" => len = v.trim().parse().unwrap(),
                "content-type" => content_type = v.trim().to_string(),
                "content-encoding" => content_encoding = Some(v.trim().to_string()),
                "authorization" => authorization = Some(v.trim().to_string()),
                _ => {}
            }
        }
        let mut body = vec![0; len];
        r.read_exact(&mut body).unwrap();
        if content_encoding.as_deref() == Some("gzip") {
            let mut plain = Vec::new();
            flate2::read::GzDecoder::new(&body[..])
                .read_to_end(&mut plain)
                .expect("a gzipped body");
            body = plain;
        }
        keep.lock().unwrap().push(Taken {
            path,
            content_type,
            content_encoding,
            authorization,
            body,
        });
        let w = r.get_mut();
        w.write_all(
            b"HTTP/1.1 200 OK\r\nContent-Type: application/x-protobuf\r\nContent-Length: 0\r\n\r\n",
        )
        .unwrap();
        w.flush().unwrap();
    }
}

/// A gRPC collector on 127.0.0.1 (a port of its own), built from the
/// opentelemetry-proto crate's generated ProfilesService: its address
/// and what it took. It refuses (unauthenticated) a call whose
/// `authorization` is not `Bearer TOKEN`.
pub fn grpc_collector(
    token: &'static str,
) -> (String, Arc<Mutex<Vec<ExportProfilesServiceRequest>>>) {
    let (url, got, _) = grpc_collector_with(&format!("Bearer {token}"), None);
    (url, got)
}

/// Each request's `grpc-encoding`, as a gRPC collector took it.
pub type Encodings = Arc<Mutex<Vec<Option<String>>>>;

/// [`grpc_collector`] whose calls must carry `authorization`, over TLS
/// with `tls`'s server certificate if given (its URL then `https://`),
/// with each request's `grpc-encoding` too.
pub fn grpc_collector_with(
    authorization: &str,
    tls: Option<&TestCa>,
) -> (
    String,
    Arc<Mutex<Vec<ExportProfilesServiceRequest>>>,
    Encodings,
) {
    use opentelemetry_proto::tonic::collector::profiles::v1development::profiles_service_server::{
        ProfilesService, ProfilesServiceServer,
    };
    use opentelemetry_proto::tonic::collector::profiles::v1development::ExportProfilesServiceResponse;
    struct Keep(
        Arc<Mutex<Vec<ExportProfilesServiceRequest>>>,
        String,
        Encodings,
    );
    #[tonic::async_trait]
    impl ProfilesService for Keep {
        async fn export(
            &self,
            request: tonic::Request<ExportProfilesServiceRequest>,
        ) -> Result<tonic::Response<ExportProfilesServiceResponse>, tonic::Status> {
            let auth = request.metadata().get("authorization");
            if auth.and_then(|v| v.to_str().ok()) != Some(self.1.as_str()) {
                return Err(tonic::Status::unauthenticated("no token"));
            }
            let enc = request.metadata().get("grpc-encoding");
            self.2
                .lock()
                .unwrap()
                .push(enc.and_then(|v| v.to_str().ok()).map(str::to_string));
            self.0.lock().unwrap().push(request.into_inner());
            Ok(tonic::Response::new(
                ExportProfilesServiceResponse::default(),
            ))
        }
    }
    let got = Arc::new(Mutex::new(Vec::new()));
    let encodings = Arc::new(Mutex::new(Vec::new()));
    let keep = Keep(got.clone(), authorization.to_string(), encodings.clone());
    let std_listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = std_listener.local_addr().unwrap();
    std_listener.set_nonblocking(true).unwrap();
    let identity = tls.map(|ca| tonic::transport::Identity::from_pem(&ca.cert_pem, &ca.key_pem));
    let scheme = if tls.is_some() { "https" } else { "http" };
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async move {
            let listener = tokio::net::TcpListener::from_std(std_listener).unwrap();
            let mut server = tonic::transport::Server::builder();
            if let Some(id) = identity {
                server = server
                    .tls_config(tonic::transport::ServerTlsConfig::new().identity(id))
                    .unwrap();
            }
            let service = ProfilesServiceServer::new(keep)
                .accept_compressed(tonic::codec::CompressionEncoding::Gzip);
            server
                .add_service(service)
                .serve_with_incoming(tonic::transport::server::TcpIncoming::from(listener))
                .await
                .unwrap();
        });
    });
    (format!("{scheme}://{addr}"), got, encodings)
}

pub fn decode(body: &[u8]) -> ExportProfilesServiceRequest {
    ExportProfilesServiceRequest::decode(body).expect("an ExportProfilesServiceRequest of v1.10.0")
}

/// One process's profile in a request, as a backend sees it.
#[derive(Clone, Debug, Default)]
pub struct Seen {
    pub attributes: BTreeMap<String, String>,
    pub functions: Vec<String>,
    pub sample_type: (String, String),
    pub samples: usize,
    pub time_unix_nano: u64,
    pub duration_nano: u64,
}

/// Each resource's profile of `req`, by pid.
pub fn profiles(req: &ExportProfilesServiceRequest) -> BTreeMap<u32, Seen> {
    let d = req.dictionary.as_ref().expect("a dictionary");
    let s = |i: i32| d.string_table[i as usize].clone();
    let mut out = BTreeMap::new();
    for rp in &req.resource_profiles {
        let attributes: BTreeMap<String, String> = rp
            .resource
            .as_ref()
            .unwrap()
            .attributes
            .iter()
            .map(|kv| {
                let v = match kv.value.as_ref().unwrap().value.as_ref().unwrap() {
                    Value::IntValue(i) => i.to_string(),
                    Value::StringValue(s) => s.clone(),
                    v => panic!("{v:?}"),
                };
                (kv.key.clone(), v)
            })
            .collect();
        let pid: u32 = attributes["process.pid"].parse().unwrap();
        let p = &rp.scope_profiles[0].profiles[0];
        let st = p.sample_type.as_ref().unwrap();
        let mut functions = Vec::new();
        let mut samples = 0;
        for sample in &p.samples {
            samples += sample.values.len();
            for &l in &d.stack_table[sample.stack_index as usize].location_indices {
                for line in &d.location_table[l as usize].lines {
                    functions.push(s(
                        d.function_table[line.function_index as usize].name_strindex
                    ));
                }
            }
        }
        out.insert(
            pid,
            Seen {
                attributes,
                functions,
                sample_type: (s(st.type_strindex), s(st.unit_strindex)),
                samples,
                time_unix_nano: p.time_unix_nano,
                duration_nano: p.duration_nano,
            },
        );
    }
    out
}

/// The agent's options for a test: 99 Hz, one-second intervals.
pub fn options() -> profdev_agent::Options {
    profdev_agent::Options {
        frequency: 99,
        interval: Duration::from_secs(1),
        labels: vec![("service_name".into(), "hot-test".into())],
        verbose: true,
        ..profdev_agent::Options::default()
    }
}

/// The calls a raw gRPC collector took: method path, request bytes.
pub type Calls = Arc<Mutex<Vec<(String, Vec<u8>)>>>;

/// A gRPC server on 127.0.0.1 that takes any unary call of Parca's
/// `ProfileStoreService` and keeps its method's path and request bytes (a
/// protocol whose generated code no crate here has: the test decodes the
/// bytes with the messages the agent defines from the published .proto).
pub fn parca_collector() -> (String, Calls) {
    let got = Arc::new(Mutex::new(Vec::new()));
    let capture = raw::Capture { keep: got.clone() };
    let std_listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = std_listener.local_addr().unwrap();
    std_listener.set_nonblocking(true).unwrap();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async move {
            let listener = tokio::net::TcpListener::from_std(std_listener).unwrap();
            tonic::transport::Server::builder()
                .add_service(capture)
                .serve_with_incoming(tonic::transport::server::TcpIncoming::from(listener))
                .await
                .unwrap();
        });
    });
    (format!("http://{addr}"), got)
}

mod raw {
    use std::sync::{Arc, Mutex};
    use tonic::codegen::*;

    type Kept = Arc<Mutex<Vec<(String, Vec<u8>)>>>;

    #[derive(Clone)]
    pub struct Capture {
        pub keep: Kept,
    }

    impl tonic::server::NamedService for Capture {
        const NAME: &'static str = "parca.profilestore.v1alpha1.ProfileStoreService";
    }

    struct Unary(Kept, String);

    impl tonic::server::UnaryService<Vec<u8>> for Unary {
        type Response = ();
        type Future = std::future::Ready<Result<tonic::Response<()>, tonic::Status>>;
        fn call(&mut self, req: tonic::Request<Vec<u8>>) -> Self::Future {
            self.0
                .lock()
                .unwrap()
                .push((self.1.clone(), req.into_inner()));
            std::future::ready(Ok(tonic::Response::new(())))
        }
    }

    impl Service<http::Request<tonic::body::Body>> for Capture {
        type Response = http::Response<tonic::body::Body>;
        type Error = std::convert::Infallible;
        type Future = BoxFuture<Self::Response, Self::Error>;
        fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
            Poll::Ready(Ok(()))
        }
        fn call(&mut self, req: http::Request<tonic::body::Body>) -> Self::Future {
            let path = req.uri().path().to_string();
            let keep = self.keep.clone();
            Box::pin(async move {
                let mut grpc = tonic::server::Grpc::new(ServerCodec);
                Ok(grpc.unary(Unary(keep, path), req).await)
            })
        }
    }

    /// Requests as bytes, empty answers.
    #[derive(Clone, Copy, Default)]
    struct ServerCodec;

    impl tonic::codec::Codec for ServerCodec {
        type Encode = ();
        type Decode = Vec<u8>;
        type Encoder = ServerCodec;
        type Decoder = ServerCodec;
        fn encoder(&mut self) -> ServerCodec {
            ServerCodec
        }
        fn decoder(&mut self) -> ServerCodec {
            ServerCodec
        }
    }

    impl tonic::codec::Encoder for ServerCodec {
        type Item = ();
        type Error = tonic::Status;
        fn encode(
            &mut self,
            _item: (),
            _dst: &mut tonic::codec::EncodeBuf<'_>,
        ) -> Result<(), tonic::Status> {
            Ok(())
        }
    }

    impl tonic::codec::Decoder for ServerCodec {
        type Item = Vec<u8>;
        type Error = tonic::Status;
        fn decode(
            &mut self,
            src: &mut tonic::codec::DecodeBuf<'_>,
        ) -> Result<Option<Vec<u8>>, tonic::Status> {
            use bytes::Buf;
            Ok(Some(src.copy_to_bytes(src.remaining()).to_vec()))
        }
    }
}
