//! A gRPC client of one server for the destinations that speak gRPC
//! (OTLP, Parca): tonic's channel on a tokio runtime of the sender
//! thread's own (current-thread), each call's request bytes made by the
//! destination's encoder and passed through a codec that copies them (no
//! generated client: the encoders are formats' and this crate's). Over
//! https the server is checked as [`crate::tls`] says; a request may be
//! sent gzipped (`grpc-encoding: gzip`), and a gzipped answer is read.

use crate::url::Url;
use std::time::Duration;

/// How long one call, or connecting, may take.
const TIMEOUT: Duration = Duration::from_secs(10);

/// A client of the server at one address (connected at the first call,
/// again after a failure).
pub struct Client {
    url: String,
    token: Option<crate::token::Token>,
    runtime: tokio::runtime::Runtime,
    client: tonic::client::Grpc<tonic::transport::Channel>,
}

impl Client {
    /// A client of the server at `url`, each call carrying `token`, its
    /// requests gzipped if `gzip`.
    pub fn new(
        url: &Url,
        token: Option<crate::token::Token>,
        tls: &crate::tls::Tls,
        gzip: bool,
    ) -> Result<Client, String> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| format!("cannot start the gRPC client: {e}"))?;
        let mut endpoint = tonic::transport::Endpoint::from_shared(format!(
            "{}://{}",
            url.scheme,
            url.authority()
        ))
        .map_err(|e| format!("{url}: not a gRPC address: {e}"))?
        .connect_timeout(TIMEOUT)
        .timeout(TIMEOUT);
        if url.scheme == "https" {
            endpoint = endpoint
                .tls_config(tls.grpc(&url.host))
                .map_err(|e| format!("{url}: cannot set up TLS: {e}"))?;
        }
        let channel = {
            let _in = runtime.enter();
            endpoint.connect_lazy()
        };
        let mut client = tonic::client::Grpc::new(channel)
            .accept_compressed(tonic::codec::CompressionEncoding::Gzip);
        if gzip {
            client = client.send_compressed(tonic::codec::CompressionEncoding::Gzip);
        }
        Ok(Client {
            url: url.to_string(),
            token,
            runtime,
            client,
        })
    }

    /// Call the unary method `path` (`/package.Service/Method`) with the
    /// request's bytes; the answer's bytes.
    pub fn call(&mut self, path: &'static str, body: &[u8]) -> Result<Vec<u8>, String> {
        let Client {
            url,
            token,
            runtime,
            client,
        } = self;
        let mut request = tonic::Request::new(body.to_vec());
        if let Some(t) = token {
            let value = t
                .header_value()
                .parse()
                .map_err(|_| "the token is not a valid header value".to_string())?;
            request.metadata_mut().insert("authorization", value);
        }
        runtime.block_on(async move {
            client
                .ready()
                .await
                .map_err(|e| format!("{url}: cannot connect: {e}"))?;
            let path = tonic::codegen::http::uri::PathAndQuery::from_static(path);
            client
                .unary(request, path, RawCodec)
                .await
                .map(tonic::Response::into_inner)
                .map_err(|s| {
                    // A TLS failure is in the source chain, not the message.
                    let mut why = s.message().to_string();
                    let mut src = std::error::Error::source(&s);
                    while let Some(e) = src {
                        why = format!("{why}: {e}");
                        src = e.source();
                    }
                    format!("{url}: {}: {why}", s.code())
                })
        })
    }
}

/// A gRPC codec of bytes already encoded, both ways.
#[derive(Clone, Copy, Default)]
struct RawCodec;

impl tonic::codec::Codec for RawCodec {
    type Encode = Vec<u8>;
    type Decode = Vec<u8>;
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
    type Item = Vec<u8>;
    type Error = tonic::Status;
    fn decode(
        &mut self,
        src: &mut tonic::codec::DecodeBuf<'_>,
    ) -> Result<Option<Vec<u8>>, tonic::Status> {
        use bytes::Buf;
        let mut out = vec![0; src.remaining()];
        src.copy_to_slice(&mut out);
        Ok(Some(out))
    }
}
