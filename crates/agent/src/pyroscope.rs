//! The Grafana Pyroscope destination: each cut as pprof (formats' one
//! pprof encoder, gzipped), pushed through Pyroscope's push API over the
//! connect protocol: `POST /push.v1.PusherService/Push`, a `PushRequest`
//! in protobuf (`Content-Type: application/proto`,
//! `Connect-Protocol-Version: 1`).
//!
//! The request holds one series: its labels `__name__` = `process_cpu`,
//! `service_name` (the `--label service_name=…`, else `profdev-agent`),
//! `host_name` and every other `--label`; its one sample the pprof, whose
//! time span is the interval and whose samples carry the process's labels
//! (`pid`, `comm`, `process_executable_path`, `container_id`…: the OTLP
//! attributes with every character Pyroscope's label names do not allow,
//! `[^A-Za-z0-9_]`, written `_`). Pyroscope splits a pushed profile into
//! series by its sample labels, so each process is a series of its own.
//!
//! With `--pyroscope-api ingest` the same pprof goes to the older HTTP
//! API every Pyroscope release keeps: `POST /ingest?name=…&from=…&until=…
//! &format=pprof&sampleRate=HZ&spyName=profdev`, the series labels in
//! `name` (`SERVICE{key=value,…}`, the syntax of Pyroscope's server API
//! page), the body `multipart/form-data` with the gzipped pprof in the
//! form file `profile` and a `sample_type_config` naming its `samples`
//! type as CPU samples (the form fields of Pyroscope's pprof ingestion).
//!
//! A cut's heap profiles (`--heap`) are series of their own
//! ([`heap_series`]): `__name__` = `memory`, the series labels above,
//! `pid` and `comm`; a pprof of Go's heap sample types. The push request
//! holds them after the CPU series; `/ingest` gets one request each, its
//! `sample_type_config` [`HEAP_SAMPLE_TYPE_CONFIG`].
//!
//! The messages below are those of grafana/pyroscope's
//! `api/push/v1/push.proto` (read at commit 0ed69a0b06a0) and
//! `api/types/v1/types.proto` (`LabelPair`, commit 06206ad74307): the
//! field names, numbers and types are the protocol's. `RawProfileSeries`'s
//! `annotations` (3) are left out: the server drops those a client sends.

use crate::send::Destination;
use crate::url::Url;
use crate::Cut;
use profdev_formats::export::{pprof, Resource};
use profdev_formats::recording;
use prost::Message;
use std::time::Duration;

/// The push method's path.
pub const PUSH_PATH: &str = "/push.v1.PusherService/Push";
/// The ingest API's path.
pub const INGEST_PATH: &str = "/ingest";
/// The `sample_type_config` of an ingested pprof: its `samples/count`
/// values are CPU samples (the `cpu/nanoseconds` ones are left out).
pub const SAMPLE_TYPE_CONFIG: &str =
    r#"{"samples":{"units":"samples","aggregation":"sum","display-name":"cpu","sampled":true}}"#;
/// The `sample_type_config` of an ingested heap pprof (`--heap`):
/// Pyroscope's own for Go's heap profiles, but none cumulative (the
/// agent's `alloc_*` values are the interval's already).
pub const HEAP_SAMPLE_TYPE_CONFIG: &str = concat!(
    r#"{"alloc_objects":{"units":"objects"},"alloc_space":{"units":"bytes"},"#,
    r#""inuse_objects":{"units":"objects","aggregation":"average"},"#,
    r#""inuse_space":{"units":"bytes","aggregation":"average"}}"#
);
/// The profile name of CPU profiles in Pyroscope.
pub const PROFILE_NAME: &str = "process_cpu";
/// `service_name` when no `--label` gives one.
pub const DEFAULT_SERVICE: &str = "profdev-agent";
const TIMEOUT: Duration = Duration::from_secs(10);

/// `push.v1.PushRequest`.
#[derive(Clone, PartialEq, Message)]
pub struct PushRequest {
    #[prost(message, repeated, tag = "1")]
    pub series: Vec<RawProfileSeries>,
}

/// `push.v1.RawProfileSeries`.
#[derive(Clone, PartialEq, Message)]
pub struct RawProfileSeries {
    #[prost(message, repeated, tag = "1")]
    pub labels: Vec<LabelPair>,
    #[prost(message, repeated, tag = "2")]
    pub samples: Vec<RawSample>,
}

/// `push.v1.RawSample`.
#[derive(Clone, PartialEq, Message)]
pub struct RawSample {
    /// The pprof profile (gzipped).
    #[prost(bytes = "vec", tag = "1")]
    pub raw_profile: Vec<u8>,
    /// A unique id of the profile (`ID` in the .proto).
    #[prost(string, tag = "2")]
    pub id: String,
}

/// `types.v1.LabelPair`.
#[derive(Clone, PartialEq, Message)]
pub struct LabelPair {
    #[prost(string, tag = "1")]
    pub name: String,
    #[prost(string, tag = "2")]
    pub value: String,
}

/// A label name Pyroscope accepts: `[A-Za-z_][A-Za-z0-9_]*`.
pub fn label_name(key: &str) -> String {
    let mut s: String = key
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect();
    if s.is_empty() || s.starts_with(|c: char| c.is_ascii_digit()) {
        s.insert(0, '_');
    }
    s
}

/// A UUID-shaped id of a cut's `n`-th series, from its number and start.
fn profile_id(cut: &Cut, n: u64) -> String {
    let a = cut.start_ns;
    let b = (cut.seq ^ 0x9e37_79b9_7f4a_7c15).wrapping_add(n << 40);
    format!(
        "{:08x}-{:04x}-{:04x}-{:04x}-{:012x}",
        a >> 32,
        (a >> 16) & 0xffff,
        a & 0xffff,
        b >> 48,
        b & 0xffff_ffff_ffff
    )
}

/// A series' labels (name, value) and its gzipped pprof.
pub type Series = (Vec<(String, String)>, Vec<u8>);

/// The series labels and the gzipped pprof of `cut` (see the module
/// doc), as Pyroscope and Parca take them; `common` are the attributes of
/// every profile (the host, `--label`s).
pub fn series(cut: &Cut, common: &[(String, String)]) -> Result<Series, String> {
    let rec = recording::read(&cut.recording)
        .map_err(|e| format!("internal error: the interval's recording does not read: {e}"))?;
    let otlp = crate::otlp::resource(cut, &rec, common);
    let resource = Resource {
        common: Vec::new(),
        processes: otlp
            .processes
            .into_iter()
            .map(|(pid, a)| {
                (
                    pid,
                    a.into_iter().map(|(k, v)| (label_name(&k), v)).collect(),
                )
            })
            .collect(),
        span: otlp.span,
    };
    let mut labels = vec![("__name__".to_string(), PROFILE_NAME.to_string())];
    labels.extend(common.iter().map(|(k, v)| (label_name(k), v.clone())));
    if !labels.iter().any(|(k, _)| k == "service_name") {
        labels.push(("service_name".into(), DEFAULT_SERVICE.into()));
    }
    Ok((labels, pprof::write_with(&rec, &resource)))
}

/// The heap series of `cut` (`--heap`), one per process: labelled
/// `__name__` = `memory`, the series labels of the CPU one, `pid` and
/// `comm`; the gzipped pprof of Go's heap sample types.
pub fn heap_series(cut: &Cut, common: &[(String, String)]) -> Vec<Series> {
    cut.heap
        .iter()
        .map(|h| {
            let mut labels = vec![(
                "__name__".to_string(),
                crate::heap::PROFILE_NAME.to_string(),
            )];
            labels.extend(common.iter().map(|(k, v)| (label_name(k), v.clone())));
            if !labels.iter().any(|(k, _)| k == "service_name") {
                labels.push(("service_name".into(), DEFAULT_SERVICE.into()));
            }
            labels.push(("pid".into(), h.pid.to_string()));
            labels.push(("comm".into(), h.comm.clone()));
            let pprof = h.pprof(cut.start_ns, cut.end_ns);
            (labels, crate::otlp::gzip(&pprof))
        })
        .collect()
}

/// The `PushRequest` bytes of `cut`: its CPU series, then its heap ones;
/// `common` are the attributes of every profile (the host, `--label`s).
pub fn request(cut: &Cut, common: &[(String, String)]) -> Result<Vec<u8>, String> {
    let cpu = series(cut, common)?;
    let req = PushRequest {
        series: std::iter::once(cpu)
            .chain(heap_series(cut, common))
            .enumerate()
            .map(|(i, (labels, raw_profile))| RawProfileSeries {
                labels: labels
                    .into_iter()
                    .map(|(name, value)| LabelPair { name, value })
                    .collect(),
                samples: vec![RawSample {
                    raw_profile,
                    id: profile_id(cut, i as u64),
                }],
            })
            .collect(),
    };
    Ok(req.encode_to_vec())
}

/// `text` with every byte but RFC 3986's unreserved ones percent-encoded,
/// for a query value.
fn query_value(text: &str) -> String {
    let mut out = String::new();
    for b in text.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// The ingest API's `name`: `SERVICE{key=value,…}`, the series labels
/// but `__name__` and `service_name`; a value's `{},=` written `_`, as
/// the syntax has no escape.
pub fn ingest_name(labels: &[(String, String)]) -> String {
    let clean = |v: &str| v.replace(['{', '}', ',', '='], "_");
    let service = labels
        .iter()
        .find(|(k, _)| k == "service_name")
        .map_or(DEFAULT_SERVICE, |(_, v)| v.as_str());
    let rest: Vec<String> = labels
        .iter()
        .filter(|(k, _)| k != "__name__" && k != "service_name")
        .map(|(k, v)| format!("{k}={}", clean(v)))
        .collect();
    format!("{}{{{}}}", clean(service), rest.join(","))
}

/// The ingest request of `cut` at `frequency` Hz: the query (after `?`),
/// the multipart boundary, and the body.
pub fn ingest_request(
    cut: &Cut,
    common: &[(String, String)],
    frequency: u32,
) -> Result<(String, String, Vec<u8>), String> {
    let (labels, profile) = series(cut, common)?;
    let rate = format!("&sampleRate={frequency}");
    Ok(ingest_part(
        cut,
        &labels,
        &profile,
        &rate,
        SAMPLE_TYPE_CONFIG,
    ))
}

/// The ingest requests of `cut`'s heap profiles (`--heap`), as
/// [`ingest_request`]'s: each series' labels but `__name__` in `name`,
/// its pprof with [`HEAP_SAMPLE_TYPE_CONFIG`].
pub fn heap_ingest_requests(
    cut: &Cut,
    common: &[(String, String)],
) -> Vec<(String, String, Vec<u8>)> {
    heap_series(cut, common)
        .iter()
        .map(|(labels, profile)| ingest_part(cut, labels, profile, "", HEAP_SAMPLE_TYPE_CONFIG))
        .collect()
}

/// One ingest request: the series `labels`, the gzipped pprof `profile`,
/// `rate` (`&sampleRate=HZ` or nothing) and the `sample_type_config`.
fn ingest_part(
    cut: &Cut,
    labels: &[(String, String)],
    profile: &[u8],
    rate: &str,
    config: &str,
) -> (String, String, Vec<u8>) {
    let query = format!(
        "name={}&from={}&until={}&format=pprof{rate}&spyName=profdev",
        query_value(&ingest_name(labels)),
        cut.start_ns / 1_000_000_000,
        cut.end_ns.div_ceil(1_000_000_000),
    );
    // A boundary that occurs in no part.
    let mut n = cut.start_ns ^ cut.seq.rotate_left(32);
    let boundary = loop {
        let b = format!("profdev-{n:016x}");
        let found = |hay: &[u8]| hay.windows(b.len()).any(|w| w == b.as_bytes());
        if !found(profile) && !found(config.as_bytes()) {
            break b;
        }
        n = n.wrapping_mul(0x9e37_79b9_7f4a_7c15).wrapping_add(1);
    };
    let mut body = Vec::new();
    for (field, file, bytes) in [
        ("profile", "profile.pprof", profile),
        ("sample_type_config", "config.json", config.as_bytes()),
    ] {
        body.extend_from_slice(
            format!(
                "--{boundary}\r\nContent-Disposition: form-data; name=\"{field}\"; filename=\"{file}\"\r\nContent-Type: application/octet-stream\r\n\r\n"
            )
            .as_bytes(),
        );
        body.extend_from_slice(bytes);
        body.extend_from_slice(b"\r\n");
    }
    body.extend_from_slice(format!("--{boundary}--\r\n").as_bytes());
    (query, boundary, body)
}

/// Pyroscope's two ingestion APIs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Api {
    /// `/push.v1.PusherService/Push` (connect protocol), the default.
    Push,
    /// `/ingest?format=pprof`, multipart.
    Ingest,
}

/// A Pyroscope server.
pub struct Pyroscope {
    url: Url,
    token: Option<crate::token::Token>,
    /// The API's address, the query left out.
    target: String,
    api: Api,
    frequency: u32,
    common: Vec<(String, String)>,
    agent: ureq::Agent,
}

impl Pyroscope {
    /// A destination at `url` (its path, if any, goes before the
    /// method's) through `api`; `common` are the attributes of every
    /// profile, sampled at `frequency` Hz.
    pub fn new(
        url: Url,
        api: Api,
        frequency: u32,
        common: Vec<(String, String)>,
        token: Option<crate::token::Token>,
        tls: &crate::tls::Tls,
    ) -> Result<Pyroscope, String> {
        let base = url.path.trim_end_matches('/');
        let path = match api {
            Api::Push => PUSH_PATH,
            Api::Ingest => INGEST_PATH,
        };
        let target = format!("{}://{}{base}{path}", url.scheme, url.authority());
        Ok(Pyroscope {
            url,
            token,
            target,
            api,
            frequency,
            common,
            agent: tls.http_agent(TIMEOUT)?,
        })
    }
}

/// How a body is sent: its query and content type.
struct Body {
    query: Option<String>,
    content_type: String,
}

/// The body of a request, with what `send` needs beyond the bytes: the
/// ingest API's query and boundary ride in front of the body, on one
/// line, as `encode` hands `send` one byte string.
fn split_body(api: Api, body: &[u8]) -> Result<(Body, &[u8]), String> {
    match api {
        Api::Push => Ok((
            Body {
                query: None,
                content_type: "application/proto".into(),
            },
            body,
        )),
        Api::Ingest => {
            let nl = body
                .iter()
                .position(|&b| b == b'\n')
                .ok_or("internal error: an ingest body without its query line")?;
            let head = std::str::from_utf8(&body[..nl])
                .map_err(|_| "internal error: an ingest query that is not text")?;
            let (query, boundary) = head
                .split_once(' ')
                .ok_or("internal error: an ingest query without its boundary")?;
            Ok((
                Body {
                    query: Some(query.to_string()),
                    content_type: format!("multipart/form-data; boundary={boundary}"),
                },
                &body[nl + 1..],
            ))
        }
    }
}

impl Destination for Pyroscope {
    fn name(&self) -> String {
        format!("pyroscope {}", self.url)
    }

    /// One push request (CPU and heap series), or an ingest request per
    /// profile, framed ([`crate::send::frames`]).
    fn encode(&self, cut: &Cut) -> Result<Vec<u8>, String> {
        Ok(crate::send::frames(match self.api {
            Api::Push => vec![request(cut, &self.common)?],
            Api::Ingest => {
                let cpu = ingest_request(cut, &self.common, self.frequency)?;
                std::iter::once(cpu)
                    .chain(heap_ingest_requests(cut, &self.common))
                    .map(|(query, boundary, body)| {
                        let mut out = format!("{query} {boundary}\n").into_bytes();
                        out.extend_from_slice(&body);
                        out
                    })
                    .collect()
            }
        }))
    }

    fn send(&mut self, bodies: &[u8]) -> Result<(), String> {
        for body in crate::send::unframe(bodies)? {
            self.send_one(body)?;
        }
        Ok(())
    }
}

impl Pyroscope {
    /// Send one request.
    fn send_one(&mut self, body: &[u8]) -> Result<(), String> {
        let (how, body) = split_body(self.api, body)?;
        let target = match &how.query {
            Some(q) => format!("{}?{q}", self.target),
            None => self.target.clone(),
        };
        let mut req = self
            .agent
            .post(target.as_str())
            .header("Content-Type", how.content_type.as_str());
        if self.api == Api::Push {
            req = req.header("Connect-Protocol-Version", "1");
        }
        if let Some(t) = &self.token {
            req = req.header("Authorization", t.header_value());
        }
        req.send(body)
            .map(drop)
            .map_err(|e| format!("{}: {e}", self.target))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn label_names_are_what_pyroscope_accepts() {
        assert_eq!(
            label_name("process.executable.path"),
            "process_executable_path"
        );
        assert_eq!(label_name("k8s.pod.uid"), "k8s_pod_uid");
        assert_eq!(label_name("9lives"), "_9lives");
        assert_eq!(label_name(""), "_");
    }

    /// An empty interval still makes a request with one series, its
    /// labels and a pprof of no samples.
    #[test]
    fn the_request_names_the_series() {
        let enc = profdev_formats::recording::Encoder::new(&Default::default());
        let mut enc = enc;
        enc.end();
        let cut = Cut {
            seq: 3,
            start_ns: 1_700_000_000_000_000_000,
            end_ns: 1_700_000_015_000_000_000,
            recording: enc.take(),
            ..Cut::default()
        };
        let common = vec![("host.name".to_string(), "box".to_string())];
        let req = PushRequest::decode(&request(&cut, &common).unwrap()[..]).unwrap();
        assert_eq!(req.series.len(), 1);
        let labels: Vec<(&str, &str)> = req.series[0]
            .labels
            .iter()
            .map(|l| (l.name.as_str(), l.value.as_str()))
            .collect();
        assert_eq!(
            labels,
            vec![
                ("__name__", "process_cpu"),
                ("host_name", "box"),
                ("service_name", "profdev-agent")
            ]
        );
        let s = &req.series[0].samples[0];
        assert_eq!(s.id.len(), 36);
        assert_eq!(&s.raw_profile[..2], &[0x1f, 0x8b]);

        let (query, boundary, body) = ingest_request(&cut, &common, 19).unwrap();
        assert_eq!(
            query,
            "name=profdev-agent%7Bhost_name%3Dbox%7D&from=1700000000&until=1700000015&format=pprof&sampleRate=19&spyName=profdev"
        );
        let text = String::from_utf8_lossy(&body);
        assert!(
            text.starts_with(&format!(
                "--{boundary}\r\nContent-Disposition: form-data; name=\"profile\""
            )),
            "{text}"
        );
        assert!(
            text.contains(SAMPLE_TYPE_CONFIG) && text.ends_with(&format!("--{boundary}--\r\n"))
        );
    }

    /// A cut with a heap profile: a second push series, `memory`, with
    /// the process's pid and comm; an ingest request of its own with
    /// Go's heap sample types.
    #[test]
    fn heap_profiles_are_series_of_their_own() {
        let mut enc = profdev_formats::recording::Encoder::new(&Default::default());
        enc.end();
        let stack = profdev_formats::pprof::heap::HeapStack {
            frames: vec![profdev_formats::pprof::heap::HeapFrame {
                function: "churn".into(),
                ..Default::default()
            }],
            alloc_objects: 2,
            alloc_space: 2048,
            ..Default::default()
        };
        let cut = Cut {
            start_ns: 1_700_000_000_000_000_000,
            end_ns: 1_700_000_015_000_000_000,
            recording: enc.take(),
            heap: vec![crate::heap::HeapProfile {
                pid: 42,
                comm: "svc".into(),
                sample_bytes: 524288,
                stacks: vec![stack],
            }],
            ..Cut::default()
        };
        let req = PushRequest::decode(&request(&cut, &[]).unwrap()[..]).unwrap();
        assert_eq!(req.series.len(), 2);
        let labels: Vec<(&str, &str)> = req.series[1]
            .labels
            .iter()
            .map(|l| (l.name.as_str(), l.value.as_str()))
            .collect();
        assert_eq!(
            labels,
            [
                ("__name__", "memory"),
                ("service_name", "profdev-agent"),
                ("pid", "42"),
                ("comm", "svc")
            ]
        );
        assert_ne!(req.series[0].samples[0].id, req.series[1].samples[0].id);
        let heap =
            profdev_formats::pprof::decode::heap_stacks(&req.series[1].samples[0].raw_profile)
                .unwrap();
        assert_eq!(
            (heap[0].frames[0].function.as_str(), heap[0].alloc_space),
            ("churn", 2048)
        );

        let parts = heap_ingest_requests(&cut, &[]);
        assert_eq!(parts.len(), 1);
        let (query, _, body) = &parts[0];
        assert_eq!(
            query,
            "name=profdev-agent%7Bpid%3D42%2Ccomm%3Dsvc%7D&from=1700000000&until=1700000015&format=pprof&spyName=profdev"
        );
        assert!(String::from_utf8_lossy(body).contains(HEAP_SAMPLE_TYPE_CONFIG));
        // Both go out, the CPU request first, framed.
        let d = Pyroscope::new(
            crate::url::Url::parse("http://127.0.0.1:1", 4040).unwrap(),
            Api::Ingest,
            19,
            Vec::new(),
            None,
            &crate::tls::Tls::system(),
        )
        .unwrap();
        let framed = d.encode(&cut).unwrap();
        let bodies = crate::send::unframe(&framed).unwrap();
        assert_eq!(bodies.len(), 2);
        assert!(bodies[1].starts_with(format!("{query} ").as_bytes()));
    }

    #[test]
    fn the_ingest_name_has_the_series_labels() {
        let labels = |v: &[(&str, &str)]| -> Vec<(String, String)> {
            v.iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect()
        };
        assert_eq!(
            ingest_name(&labels(&[
                ("__name__", "process_cpu"),
                ("service_name", "web"),
                ("host_name", "a,b"),
                ("env", "x{=}")
            ])),
            "web{host_name=a_b,env=x___}"
        );
        assert_eq!(query_value("a{b=c}"), "a%7Bb%3Dc%7D");
    }
}
