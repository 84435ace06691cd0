//! A gRPC client of one server for the destinations that speak gRPC
//! (OTLP, Parca): tonic's channel on a tokio runtime of the sender
//! thread's own (current-thread), each call's request bytes made by the
//! destination's encoder and passed through a codec that copies them (no
//! generated client: the encoders are formats' and this crate's).

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
    /// A client of the server at `url`, each call carrying `token`.
    pub fn new(url: &Url, token: Option<crate::token::Token>) -> Result<Client, String> {
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
        Ok(Client {
            url: url.to_string(),
            token,
            runtime,
            client: tonic::client::Grpc::new(channel),
        })
    }

    /// Call the unary method `path` (`/package.Service/Method`) with the
    /// request's bytes; the answer's bytes are not read.
    pub fn call(&mut self, path: &'static str, body: &[u8]) -> Result<(), String> {
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
                .map(drop)
                .map_err(|s| format!("{url}: {}: {}", s.code(), s.message()))
        })
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
