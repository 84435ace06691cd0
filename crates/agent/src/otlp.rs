//! The OpenTelemetry destination: each cut as an
//! `ExportProfilesServiceRequest` of opentelemetry-proto v1.10.0 (the
//! release formats' OTLP encoder is pinned to, `profdev_formats::export::
//! otlp`), sent over HTTP (`POST /v1development/profiles`, `Content-Type:
//! application/x-protobuf`, a path given in the URL used instead) or gRPC
//! (`opentelemetry.proto.collector.profiles.v1development.ProfilesService/
//! Export`, the request's bytes passed through a codec of our own).
//!
//! Resource attributes: `host.name` and each `--label` on every resource;
//! per process `process.pid` and `process.executable.name` (the encoder's),
//! `process.executable.path`, `process.executable.build_id.gnu` (the
//! executable's object in the recording), `process.linux.cgroup`,
//! `container.id`, `k8s.pod.uid` (OpenTelemetry's semantic conventions)
//! and `profdev.systemd.unit` (no convention names it).

use crate::send::Destination;
use crate::url::Url;
use crate::Cut;
use profdev_formats::export::otlp::{self, Resource, Span};
use profdev_formats::recording::{self, Recording};
use std::time::Duration;

/// The gRPC method.
pub const GRPC_PATH: &str =
    "/opentelemetry.proto.collector.profiles.v1development.ProfilesService/Export";
/// The HTTP path, when the URL gives none.
pub const HTTP_PATH: &str = "/v1development/profiles";
/// How long one request may take.
const TIMEOUT: Duration = Duration::from_secs(10);

/// OTLP's two transports.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Protocol {
    Grpc,
    Http,
}

/// The resource attributes of `cut` (see the module doc).
pub fn resource(cut: &Cut, rec: &Recording, common: &[(String, String)]) -> Resource {
    let mut r = Resource {
        common: common.to_vec(),
        span: Some(Span {
            start_ns: cut.start_ns,
            end_ns: cut.end_ns,
            to_unix: cut.to_unix,
        }),
        ..Resource::default()
    };
    for (&pid, l) in &cut.processes {
        let mut a: Vec<(String, String)> = Vec::new();
        let mut add = |k: &str, v: &str| a.push((k.to_string(), v.to_string()));
        if let Some(exe) = &l.exe {
            add("process.executable.path", exe);
            let build_id = rec
                .objects
                .iter()
                .find(|o| o.info.path == *exe && !o.info.build_id.is_empty())
                .map(|o| {
                    o.info
                        .build_id
                        .iter()
                        .map(|b| format!("{b:02x}"))
                        .collect::<String>()
                });
            if let Some(b) = build_id {
                add("process.executable.build_id.gnu", &b);
            }
        }
        if let Some(c) = &l.cgroup {
            add("process.linux.cgroup", &c.path);
            if let Some(id) = &c.container_id {
                add("container.id", id);
            }
            if let Some(uid) = &c.pod_uid {
                add("k8s.pod.uid", uid);
            }
            if let Some(unit) = &c.systemd_unit {
                add("profdev.systemd.unit", unit);
            }
        }
        r.processes.insert(pid, a);
    }
    r
}

/// The request body of `cut`.
pub fn request(cut: &Cut, common: &[(String, String)]) -> Result<Vec<u8>, String> {
    let rec = recording::read(&cut.recording)
        .map_err(|e| format!("internal error: the interval's recording does not read: {e}"))?;
    Ok(otlp::write_with(&rec, &resource(cut, &rec, common)))
}

/// An OTLP collector.
pub struct Otlp {
    url: Url,
    common: Vec<(String, String)>,
    transport: Transport,
}

enum Transport {
    Http(ureq::Agent, String),
    Grpc(Box<Grpc>),
}

struct Grpc {
    runtime: tokio::runtime::Runtime,
    client: tonic::client::Grpc<tonic::transport::Channel>,
}

impl Otlp {
    /// A destination at `url` over `protocol`; `common` are the attributes
    /// of every resource. The connection is made at the first send.
    pub fn new(
        url: Url,
        protocol: Protocol,
        common: Vec<(String, String)>,
    ) -> Result<Otlp, String> {
        let transport = match protocol {
            Protocol::Http => {
                let config = ureq::Agent::config_builder()
                    .timeout_global(Some(TIMEOUT))
                    .http_status_as_error(true)
                    .build();
                let path = if url.path.is_empty() || url.path == "/" {
                    HTTP_PATH
                } else {
                    &url.path
                };
                let target = format!("http://{}{path}", url.authority());
                Transport::Http(config.into(), target)
            }
            Protocol::Grpc => {
                let runtime = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .map_err(|e| format!("cannot start the gRPC client: {e}"))?;
                let endpoint =
                    tonic::transport::Endpoint::from_shared(format!("http://{}", url.authority()))
                        .map_err(|e| format!("{url}: not a gRPC address: {e}"))?
                        .connect_timeout(TIMEOUT)
                        .timeout(TIMEOUT);
                let channel = {
                    let _in = runtime.enter();
                    endpoint.connect_lazy()
                };
                Transport::Grpc(Box::new(Grpc {
                    runtime,
                    client: tonic::client::Grpc::new(channel),
                }))
            }
        };
        Ok(Otlp {
            url,
            common,
            transport,
        })
    }
}

impl Destination for Otlp {
    fn name(&self) -> String {
        let kind = match self.transport {
            Transport::Http(..) => "otlp-http",
            Transport::Grpc(..) => "otlp-grpc",
        };
        format!("{kind} {}", self.url)
    }

    fn encode(&self, cut: &Cut) -> Result<Vec<u8>, String> {
        request(cut, &self.common)
    }

    fn send(&mut self, body: &[u8]) -> Result<(), String> {
        match &mut self.transport {
            Transport::Http(agent, target) => agent
                .post(target.as_str())
                .header("Content-Type", "application/x-protobuf")
                .send(body)
                .map(drop)
                .map_err(|e| format!("{target}: {e}")),
            Transport::Grpc(g) => {
                let Grpc { runtime, client } = &mut **g;
                let body = body.to_vec();
                let url = &self.url;
                runtime.block_on(async move {
                    client
                        .ready()
                        .await
                        .map_err(|e| format!("{url}: cannot connect: {e}"))?;
                    let path = tonic::codegen::http::uri::PathAndQuery::from_static(GRPC_PATH);
                    client
                        .unary(tonic::Request::new(body), path, RawCodec)
                        .await
                        .map(drop)
                        .map_err(|s| format!("{url}: {}: {}", s.code(), s.message()))
                })
            }
        }
    }
}

/// A gRPC codec of bytes already encoded; the response's are not read
/// (its `partial_success` is a later slice's).
#[derive(Clone, Copy, Default)]
struct RawCodec;

impl tonic::codec::Codec for RawCodec {
    type Encode = Vec<u8>;
    type Decode = ();
    type Encoder = RawCodec;
    type Decoder = RawCodec;
    fn encoder(&mut self) -> RawCodec {
        RawCodec
    }
    fn decoder(&mut self) -> RawCodec {
        RawCodec
    }
}

impl tonic::codec::Encoder for RawCodec {
    type Item = Vec<u8>;
    type Error = tonic::Status;
    fn encode(
        &mut self,
        item: Vec<u8>,
        dst: &mut tonic::codec::EncodeBuf<'_>,
    ) -> Result<(), tonic::Status> {
        use bytes::BufMut;
        dst.put_slice(&item);
        Ok(())
    }
}

impl tonic::codec::Decoder for RawCodec {
    type Item = ();
    type Error = tonic::Status;
    fn decode(
        &mut self,
        src: &mut tonic::codec::DecodeBuf<'_>,
    ) -> Result<Option<()>, tonic::Status> {
        use bytes::Buf;
        src.advance(src.remaining());
        Ok(Some(()))
    }
}
