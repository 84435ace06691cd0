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

/// A UUID-shaped id of a cut, from its number and start.
fn profile_id(cut: &Cut) -> String {
    let a = cut.start_ns;
    let b = cut.seq ^ 0x9e37_79b9_7f4a_7c15;
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

/// The `PushRequest` bytes of `cut`; `common` are the attributes of every
/// profile (the host, `--label`s).
pub fn request(cut: &Cut, common: &[(String, String)]) -> Result<Vec<u8>, String> {
    let (labels, raw_profile) = series(cut, common)?;
    let req = PushRequest {
        series: vec![RawProfileSeries {
            labels: labels
                .into_iter()
                .map(|(name, value)| LabelPair { name, value })
                .collect(),
            samples: vec![RawSample {
                raw_profile,
                id: profile_id(cut),
            }],
        }],
    };
    Ok(req.encode_to_vec())
}

/// A Pyroscope server.
pub struct Pyroscope {
    url: Url,
    token: Option<crate::token::Token>,
    target: String,
    common: Vec<(String, String)>,
    agent: ureq::Agent,
}

impl Pyroscope {
    /// A destination at `url` (its path, if any, goes before the
    /// method's); `common` are the attributes of every profile.
    pub fn new(
        url: Url,
        common: Vec<(String, String)>,
        token: Option<crate::token::Token>,
    ) -> Pyroscope {
        let config = ureq::Agent::config_builder()
            .timeout_global(Some(TIMEOUT))
            .http_status_as_error(true)
            .build();
        let base = url.path.trim_end_matches('/');
        let target = format!("http://{}{base}{PUSH_PATH}", url.authority());
        Pyroscope {
            url,
            token,
            target,
            common,
            agent: config.into(),
        }
    }
}

impl Destination for Pyroscope {
    fn name(&self) -> String {
        format!("pyroscope {}", self.url)
    }

    fn encode(&self, cut: &Cut) -> Result<Vec<u8>, String> {
        request(cut, &self.common)
    }

    fn send(&mut self, body: &[u8]) -> Result<(), String> {
        let mut req = self
            .agent
            .post(self.target.as_str())
            .header("Content-Type", "application/proto")
            .header("Connect-Protocol-Version", "1");
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
    }
}
