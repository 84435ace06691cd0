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
    token: Option<crate::token::Token>,
    common: Vec<(String, String)>,
    transport: Transport,
}

enum Transport {
    Http(ureq::Agent, String),
    Grpc(Box<crate::grpc::Client>),
}

impl Otlp {
    /// A destination at `url` over `protocol`; `common` are the attributes
    /// of every resource. The connection is made at the first send.
    pub fn new(
        url: Url,
        protocol: Protocol,
        common: Vec<(String, String)>,
        token: Option<crate::token::Token>,
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
                Transport::Grpc(Box::new(crate::grpc::Client::new(&url, token.clone())?))
            }
        };
        Ok(Otlp {
            url,
            token,
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
            Transport::Http(agent, target) => {
                let mut req = agent
                    .post(target.as_str())
                    .header("Content-Type", "application/x-protobuf");
                if let Some(t) = &self.token {
                    req = req.header("Authorization", t.header_value());
                }
                req.send(body)
                    .map(drop)
                    .map_err(|e| format!("{target}: {e}"))
            }
            Transport::Grpc(g) => g.call(GRPC_PATH, body),
        }
    }
}
