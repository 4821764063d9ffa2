//! RDP in the app: the pieces of the RDCleanPath proxy between IronRDP's web client and a
//! guest's RDP server that know nothing of sessions or the cluster. The session that listens
//! and reaches the guest through its `portforward` stream is `crate::session`'s.
//!
//! The flow ([RDCleanPath], as IronRDP's web client and Devolutions Gateway speak it):
//! 1. the web client opens a websocket to the proxy and sends one RDCleanPath request (DER):
//!    the destination, an authorization string (our one-time token) and its X.224 Connection
//!    Request;
//! 2. the proxy reaches the server, forwards the Connection Request, reads the Connection
//!    Confirm ([`x224`]), does the TLS handshake itself ([`tls`]) and answers with the Confirm
//!    and the server's certificate chain (or an error PDU);
//! 3. from then on every websocket binary message is plaintext RDP, which the proxy carries
//!    over its TLS connection, and back.
//!
//! [`probe`] does steps 2's first half once before a session starts, so that the app knows the
//! server's certificate (to pin: [`trust`]) and whether it needs credentials (NLA) before it
//! shows anything; [`cleanpath`] reads and writes the PDUs.
//!
//! [RDCleanPath]: https://github.com/Devolutions/IronRDP/tree/master/crates/ironrdp-rdcleanpath

pub mod cleanpath;
pub mod client_core;
pub mod deactivate;
pub mod framing;
pub mod tls;
pub mod trust;
pub mod x224;

use serde::Serialize;
use sha2::{Digest, Sha256};
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};

/// The guest port of RDP.
pub const RDP_PORT: u16 = 3389;

/// How long the guest's RDP server has to confirm the connection and finish TLS (seconds).
pub const NEGOTIATION_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(15);

/// The SHA-256 fingerprint of a DER certificate, as RDP clients show it: 32 upper-case hex
/// bytes joined by colons.
pub fn fingerprint(der: &[u8]) -> String {
    let digest = Sha256::digest(der);
    let hex = data_encoding::HEXUPPER.encode(&digest);
    hex.as_bytes()
        .chunks(2)
        .map(|pair| String::from_utf8_lossy(pair).into_owned())
        .collect::<Vec<_>>()
        .join(":")
}

/// What a guest's RDP server said before any credentials: the protocol it selected and its
/// certificate.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "bindings", derive(specta::Type))]
#[serde(rename_all = "camelCase")]
pub struct Probe {
    /// Whether it selected CredSSP: the user must give a user name and password (NLA) before
    /// a desktop is shown.
    pub nla: bool,
    /// The SHA-256 fingerprint of its TLS certificate ([`fingerprint`]).
    pub fingerprint: String,
}

/// Asks the RDP server at the other end of `io` (a fresh connection to its port) for TLS and
/// CredSSP, reads what it selected, does the TLS handshake and closes the connection.
///
/// Errors, as one sentence naming `member`: nothing answered as an RDP server (the port is
/// closed or another program listens there), the server refused every protocol the app
/// uses ([`x224::Negotiation::refusal`]), or the TLS handshake failed; or it all took longer
/// than [`NEGOTIATION_TIMEOUT`].
pub async fn probe<IO>(mut io: IO, member: &str) -> Result<Probe, String>
where
    IO: AsyncRead + AsyncWrite + Unpin,
{
    let run = async {
        let request = x224::connection_request(
            x224::PROTOCOL_SSL | x224::PROTOCOL_HYBRID | x224::PROTOCOL_HYBRID_EX,
        );
        io.write_all(&request)
            .await
            .map_err(|e| closed(member, &e))?;
        let confirm = x224::read_packet(&mut io)
            .await
            .map_err(|e| closed(member, &e))?;
        let negotiation = x224::parse_confirm(&confirm)?;
        if let Some(refusal) = negotiation.refusal(member) {
            return Err(refusal);
        }
        let (mut tls, chain) = tls::handshake(io, member).await?;
        let _ = tls.shutdown().await;
        Ok(Probe {
            nla: negotiation.needs_nla(),
            fingerprint: fingerprint(&chain[0]),
        })
    };
    tokio::time::timeout(NEGOTIATION_TIMEOUT, run)
        .await
        .unwrap_or_else(|_| {
            Err(format!(
                "{member}'s RDP server did not finish negotiating within {} s",
                NEGOTIATION_TIMEOUT.as_secs()
            ))
        })
}

/// What the app shows when `member`'s RDP server refused the login during CredSSP (NLA). The
/// RDP view recognises it by [`LOGIN_REFUSED`].
pub fn login_refused(member: &str) -> String {
    format!("{member} {LOGIN_REFUSED} (NLA): check them and connect again")
}

/// The words of [`login_refused`] that the RDP view looks for in a session's end.
pub const LOGIN_REFUSED: &str = "refused the user name or password";

/// The sentence for a connection that ended before the server answered.
pub fn closed(member: &str, e: &std::io::Error) -> String {
    if e.kind() == std::io::ErrorKind::InvalidData {
        format!("{member}: {e}")
    } else {
        format!(
            "nothing answers on port {RDP_PORT} of {member}: the guest runs no RDP server, or \
             it is still starting"
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fingerprint_is_colon_separated_upper_hex_of_sha256() {
        let f = fingerprint(b"abc");
        assert_eq!(f.len(), 32 * 3 - 1);
        assert!(f.starts_with("BA:78:16:BF:8F:01:CF:EA"));
    }

    #[tokio::test]
    async fn probe_names_a_port_that_answers_nothing_and_one_that_is_not_rdp() {
        let (ours, theirs) = tokio::io::duplex(1024);
        drop(theirs);
        let e = probe(ours, "d-1").await.unwrap_err();
        assert!(e.contains("nothing answers on port 3389 of d-1"), "{e}");

        let (ours, mut theirs) = tokio::io::duplex(1024);
        tokio::spawn(async move {
            let mut buf = [0u8; 19];
            let _ = tokio::io::AsyncReadExt::read_exact(&mut theirs, &mut buf).await;
            let _ = theirs.write_all(b"SSH-2.0-OpenSSH_9.2\r\n").await;
        });
        let e = probe(ours, "d-1").await.unwrap_err();
        assert!(e.contains("did not answer as an RDP server"), "{e}");
    }
}
