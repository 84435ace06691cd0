//! The OpenTelemetry destination: each cut as an
//! `ExportProfilesServiceRequest` of opentelemetry-proto v1.10.0 (the
//! release formats' OTLP encoder is pinned to, `profdev_formats::export::
//! otlp`), sent over HTTP (`POST /v1development/profiles`, `Content-Type:
//! application/x-protobuf`, a path given in the URL used instead) or gRPC
//! (`opentelemetry.proto.collector.profiles.v1development.ProfilesService/
//! Export`, the request's bytes passed through a codec of our own). Both
//! send the request gzipped (HTTP `Content-Encoding: gzip`, gRPC
//! `grpc-encoding: gzip`), as every OTLP receiver accepts, and read the
//! answer's `partial_success`: profiles the collector took but rejected
//! are not sent again, and its sentence becomes the destination's last
//! error.
//!
//! A cut's heap profiles (`--heap`) go in a request of their own, sent
//! after the CPU one ([`crate::otlp_heap`]).
//!
//! Resource attributes: `host.name` and each `--label` on every resource;
//! per process `process.pid` and `process.executable.name` (the encoder's),
//! `process.executable.path`, `process.executable.build_id.gnu` (the
//! process's label, else the executable's object in the recording), `process.linux.cgroup`,
//! `container.id`, `k8s.pod.uid` (OpenTelemetry's semantic conventions)
//! and `profdev.systemd.unit` (no convention names it).

use crate::send::Destination;
use crate::url::Url;
use crate::Cut;
use profdev_formats::export::otlp::{self, Resource, Span};
use profdev_formats::recording::{self, Recording};
use prost::Message;
use std::io::Write;
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
            let build_id = l.build_id.clone().or_else(|| {
                rec.objects
                    .iter()
                    .find(|o| o.info.path == *exe && !o.info.build_id.is_empty())
                    .map(|o| crate::labels::hex(&o.info.build_id))
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

/// `ExportProfilesServiceResponse` of opentelemetry-proto v1.10.0
/// (`collector/profiles/v1development/profiles_service.proto`): its one
/// field.
#[derive(Clone, PartialEq, Message)]
pub struct Response {
    #[prost(message, optional, tag = "1")]
    pub partial_success: Option<PartialSuccess>,
}

/// `ExportProfilesPartialSuccess`.
#[derive(Clone, PartialEq, Message)]
pub struct PartialSuccess {
    #[prost(int64, tag = "1")]
    pub rejected_profiles: i64,
    #[prost(string, tag = "2")]
    pub error_message: String,
}

/// What a collector's answer says beyond success: the sentence of a
/// partial success (profiles rejected, or a warning), if any.
pub fn partial_success(answer: &[u8]) -> Option<String> {
    let p = Response::decode(answer).ok()?.partial_success?;
    let msg = p.error_message.trim();
    match (p.rejected_profiles, msg.is_empty()) {
        (0, true) => None,
        (0, false) => Some(format!("the collector warns: {msg}")),
        (n, true) => Some(format!("the collector rejected {n} profiles")),
        (n, false) => Some(format!("the collector rejected {n} profiles: {msg}")),
    }
}

/// `body` gzipped.
pub fn gzip(body: &[u8]) -> Vec<u8> {
    let mut z = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    z.write_all(body).expect("writing to memory");
    z.finish().expect("writing to memory")
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
    /// The last answer's partial success, not yet taken.
    note: Option<String>,
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
        tls: &crate::tls::Tls,
    ) -> Result<Otlp, String> {
        let transport = match protocol {
            Protocol::Http => {
                let path = if url.path.is_empty() || url.path == "/" {
                    HTTP_PATH
                } else {
                    &url.path
                };
                let target = format!("{}://{}{path}", url.scheme, url.authority());
                Transport::Http(tls.http_agent(TIMEOUT)?, target)
            }
            Protocol::Grpc => Transport::Grpc(Box::new(crate::grpc::Client::new(
                &url,
                token.clone(),
                tls,
                true,
            )?)),
        };
        Ok(Otlp {
            url,
            token,
            common,
            transport,
            note: None,
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

    /// The CPU request, then the heap one (`--heap`), framed
    /// ([`crate::send::frames`]).
    fn encode(&self, cut: &Cut) -> Result<Vec<u8>, String> {
        let cpu = request(cut, &self.common)?;
        let heap = crate::otlp_heap::request(cut, &self.common);
        Ok(crate::send::frames(std::iter::once(cpu).chain(heap).map(
            |body| match self.transport {
                // gRPC compresses each message itself.
                Transport::Http(..) => gzip(&body),
                Transport::Grpc(..) => body,
            },
        )))
    }

    fn send(&mut self, bodies: &[u8]) -> Result<(), String> {
        for body in crate::send::unframe(bodies)? {
            self.send_one(body)?;
        }
        Ok(())
    }

    fn note(&mut self) -> Option<String> {
        self.note.take()
    }
}

impl Otlp {
    /// Send one request; its answer's partial success kept for `note`.
    fn send_one(&mut self, body: &[u8]) -> Result<(), String> {
        let answer = match &mut self.transport {
            Transport::Http(agent, target) => {
                let mut req = agent
                    .post(target.as_str())
                    .header("Content-Type", "application/x-protobuf")
                    .header("Content-Encoding", "gzip");
                if let Some(t) = &self.token {
                    req = req.header("Authorization", t.header_value());
                }
                let mut resp = req.send(body).map_err(|e| format!("{target}: {e}"))?;
                // An answer that does not read is no failure: the
                // collector took the profile.
                resp.body_mut()
                    .with_config()
                    .limit(1 << 20)
                    .read_to_vec()
                    .unwrap_or_default()
            }
            Transport::Grpc(g) => g.call(GRPC_PATH, body)?,
        };
        if let Some(n) = partial_success(&answer) {
            self.note = Some(n);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_partial_success_is_said_in_one_sentence() {
        let answer = |n: i64, m: &str| {
            Response {
                partial_success: Some(PartialSuccess {
                    rejected_profiles: n,
                    error_message: m.into(),
                }),
            }
            .encode_to_vec()
        };
        assert_eq!(partial_success(&[]), None);
        assert_eq!(partial_success(&answer(0, "")), None);
        assert_eq!(
            partial_success(&answer(2, "too old")).as_deref(),
            Some("the collector rejected 2 profiles: too old")
        );
        assert_eq!(
            partial_success(&answer(0, "slow down")).as_deref(),
            Some("the collector warns: slow down")
        );
        assert_eq!(partial_success(b"\xff\xff"), None);
        let z = gzip(b"profile");
        assert_eq!(&z[..2], &[0x1f, 0x8b]);
    }
}
