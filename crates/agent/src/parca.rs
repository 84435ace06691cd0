//! The Parca destination: each cut as pprof (formats' one pprof encoder,
//! gzipped) in a `WriteRaw` call of Parca's profile store
//! (`parca.profilestore.v1alpha1.ProfileStoreService/WriteRaw`, gRPC,
//! default port 7070).
//!
//! The request holds one series, labelled as Pyroscope's is
//! ([`crate::pyroscope::series`]: `__name__` = `process_cpu`,
//! `service_name`, `host_name`, the `--label`s), its one sample the pprof
//! whose samples carry their process's labels; `normalized` is set, as
//! every address in profdev's pprof is already the object's own (its
//! link-time address), not the process's.
//!
//! The messages below are those of parca-dev/parca's
//! `proto/parca/profilestore/v1alpha1/profilestore.proto` (read at commit
//! 182cd0943aa9): the field names, numbers and types are the protocol's.

use crate::send::Destination;
use crate::url::Url;
use crate::Cut;
use prost::Message;

/// The WriteRaw method.
pub const WRITE_RAW_PATH: &str = "/parca.profilestore.v1alpha1.ProfileStoreService/WriteRaw";

/// `parca.profilestore.v1alpha1.WriteRawRequest`.
#[derive(Clone, PartialEq, Message)]
pub struct WriteRawRequest {
    /// Deprecated by Parca; left empty.
    #[prost(string, tag = "1")]
    pub tenant: String,
    #[prost(message, repeated, tag = "2")]
    pub series: Vec<RawProfileSeries>,
    #[prost(bool, tag = "3")]
    pub normalized: bool,
}

/// `parca.profilestore.v1alpha1.RawProfileSeries`.
#[derive(Clone, PartialEq, Message)]
pub struct RawProfileSeries {
    #[prost(message, optional, tag = "1")]
    pub labels: Option<LabelSet>,
    #[prost(message, repeated, tag = "2")]
    pub samples: Vec<RawSample>,
}

/// `parca.profilestore.v1alpha1.LabelSet`.
#[derive(Clone, PartialEq, Message)]
pub struct LabelSet {
    #[prost(message, repeated, tag = "1")]
    pub labels: Vec<Label>,
}

/// `parca.profilestore.v1alpha1.Label`.
#[derive(Clone, PartialEq, Message)]
pub struct Label {
    #[prost(string, tag = "1")]
    pub name: String,
    #[prost(string, tag = "2")]
    pub value: String,
}

/// `parca.profilestore.v1alpha1.RawSample`.
#[derive(Clone, PartialEq, Message)]
pub struct RawSample {
    /// The pprof profile (gzipped).
    #[prost(bytes = "vec", tag = "1")]
    pub raw_profile: Vec<u8>,
}

/// The `WriteRawRequest` bytes of `cut` (its CPU series, then a heap
/// series per `--heap` process, `__name__` = `memory`, as Parca names Go's
/// heap profiles); `common` are the attributes of
/// every profile (the host, `--label`s).
pub fn request(cut: &Cut, common: &[(String, String)]) -> Result<Vec<u8>, String> {
    let cpu = crate::pyroscope::series(cut, common)?;
    let req = WriteRawRequest {
        tenant: String::new(),
        series: std::iter::once(cpu)
            .chain(crate::pyroscope::heap_series(cut, common))
            .map(|(labels, raw_profile)| RawProfileSeries {
                labels: Some(LabelSet {
                    labels: labels
                        .into_iter()
                        .map(|(name, value)| Label { name, value })
                        .collect(),
                }),
                samples: vec![RawSample { raw_profile }],
            })
            .collect(),
        normalized: true,
    };
    Ok(req.encode_to_vec())
}

/// A Parca server.
pub struct Parca {
    url: Url,
    common: Vec<(String, String)>,
    client: crate::grpc::Client,
}

impl Parca {
    /// A destination at `url`; `common` are the attributes of every
    /// profile.
    pub fn new(
        url: Url,
        common: Vec<(String, String)>,
        token: Option<crate::token::Token>,
        tls: &crate::tls::Tls,
    ) -> Result<Parca, String> {
        // The pprof inside is gzipped already.
        let client = crate::grpc::Client::new(&url, token, tls, false)?;
        Ok(Parca {
            url,
            common,
            client,
        })
    }
}

impl Destination for Parca {
    fn name(&self) -> String {
        format!("parca {}", self.url)
    }

    fn encode(&self, cut: &Cut) -> Result<Vec<u8>, String> {
        request(cut, &self.common)
    }

    fn send(&mut self, body: &[u8]) -> Result<(), String> {
        self.client.call(WRITE_RAW_PATH, body).map(drop)
    }
}
