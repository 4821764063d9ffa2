//! The TLS the proxy does with a guest's RDP server on the web client's behalf (RDCleanPath:
//! the proxy ends TLS and hands the client the server's certificate chain, which CredSSP binds
//! to). RDP servers present self-signed certificates, so no chain is verified against an
//! authority: the server's certificate is pinned by its SHA-256 fingerprint instead, which the
//! user accepts the first time and is asked about again when it changes. The handshake's own
//! signatures are still checked, so a peer must hold the pinned certificate's private key.

use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::WebPkiSupportedAlgorithms;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{DigitallySignedStruct, SignatureScheme};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio_rustls::TlsConnector;
use tokio_rustls::client::TlsStream;

/// Accepts any certificate (pinning is the caller's: [`super::fingerprint`]) and checks the
/// handshake's signatures with the certificate's key.
#[derive(Debug)]
struct Pinned {
    algorithms: WebPkiSupportedAlgorithms,
}

impl ServerCertVerifier for Pinned {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.algorithms.supported_schemes()
    }
}

/// A TLS client for RDP servers: TLS 1.2 and 1.3 with ring, any certificate (see the module).
///
/// Errors: the provider refuses the default protocol versions (never with ring).
pub fn connector() -> Result<TlsConnector, String> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let verifier = Pinned {
        algorithms: provider.signature_verification_algorithms,
    };
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("no TLS for RDP: {e}"))?
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(verifier))
        .with_no_client_auth();
    Ok(TlsConnector::from(Arc::new(config)))
}

/// Does the TLS handshake over `io` (right after the server's X.224 Connection Confirm) and
/// returns the stream with the server's certificate chain (DER, leaf first).
///
/// Errors: the handshake failed (its alert or I/O error, in words), or the server sent no
/// certificate.
pub async fn handshake<IO>(io: IO, member: &str) -> Result<(TlsStream<IO>, Vec<Vec<u8>>), String>
where
    IO: AsyncRead + AsyncWrite + Unpin,
{
    // Windows ignores the name; a member's name is a DNS label, the right thing to send.
    let name = ServerName::try_from(member.to_owned())
        .unwrap_or_else(|_| ServerName::from(std::net::Ipv4Addr::LOCALHOST));
    let tls = connector()?
        .connect(name, io)
        .await
        .map_err(|e| format!("the TLS handshake with {member}'s RDP server failed: {e}"))?;
    let chain: Vec<Vec<u8>> = tls
        .get_ref()
        .1
        .peer_certificates()
        .unwrap_or_default()
        .iter()
        .map(|c| c.as_ref().to_vec())
        .collect();
    if chain.is_empty() {
        return Err(format!("{member}'s RDP server sent no TLS certificate"));
    }
    Ok((tls, chain))
}
