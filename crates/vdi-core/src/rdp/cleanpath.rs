//! The RDCleanPath PDUs the proxy reads and writes (the `ironrdp-rdcleanpath` crate's types):
//! the client's request, gathered from however many websocket messages it came in, and the
//! answers: the response, or an error the web client turns into its own message (an HTTP
//! status for a refused token, a socket error for a guest that cannot be reached, a TLS alert,
//! or the server's own negotiation failure).

use ironrdp_rdcleanpath::{DetectionResult, RDCleanPath, RDCleanPathPdu};

/// The largest request accepted (bytes): a request is its X.224 PDU plus short strings.
pub const MAX_REQUEST: usize = 16 * 1024;

/// A client's RDCleanPath request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    /// What it wants to reach (`host:port`); the session decides the real target.
    pub destination: String,
    /// The proxy authorization it sent: the session's one-time token.
    pub token: String,
    /// Its X.224 Connection Request, to forward to the server.
    pub x224: Vec<u8>,
}

/// Where reading a request stands after the bytes so far.
#[derive(Debug)]
pub enum Read {
    /// More bytes are needed.
    More,
    /// A whole request.
    Done(Request),
}

/// Reads a request from the bytes received so far (`buffer`, all of them).
///
/// Errors (in words, for the log and the session's last error): not an RDCleanPath PDU,
/// larger than [`MAX_REQUEST`], or a PDU that is not a request (a VMConnect request, a
/// response sent by a client).
pub fn read_request(buffer: &[u8]) -> Result<Read, String> {
    // The PDU is a DER SEQUENCE: anything else is refused on its first byte.
    if buffer.first().is_some_and(|&tag| tag != 0x30) {
        return Err("the client did not send an RDCleanPath request".into());
    }
    match RDCleanPathPdu::detect(buffer) {
        DetectionResult::NotEnoughBytes if buffer.len() < MAX_REQUEST => Ok(Read::More),
        DetectionResult::NotEnoughBytes => Err("the RDCleanPath request is too large".into()),
        DetectionResult::Failed => Err("the client did not send an RDCleanPath request".into()),
        DetectionResult::Detected { total_length, .. } if total_length > MAX_REQUEST => {
            Err("the RDCleanPath request is too large".into())
        }
        DetectionResult::Detected { total_length, .. } if buffer.len() < total_length => {
            Ok(Read::More)
        }
        DetectionResult::Detected { total_length, .. } => {
            let pdu = RDCleanPathPdu::from_der(&buffer[..total_length])
                .map_err(|e| format!("the RDCleanPath request does not decode: {e}"))?;
            match pdu.into_enum() {
                Ok(RDCleanPath::Request {
                    destination,
                    proxy_auth,
                    x224_connection_request,
                    ..
                }) => Ok(Read::Done(Request {
                    destination,
                    token: proxy_auth,
                    x224: x224_connection_request.as_bytes().to_vec(),
                })),
                Ok(_) => Err("the client sent an RDCleanPath PDU that is not a request".into()),
                Err(missing) => Err(format!("the RDCleanPath request lacks {missing:?}")),
            }
        }
    }
}

/// The answer that lets the client go on: the server's Connection Confirm and certificate
/// chain (DER, leaf first) and the address reached.
///
/// Errors: a field too long for DER (never for a real confirm and chain).
pub fn response(server_addr: &str, x224: Vec<u8>, chain: Vec<Vec<u8>>) -> Result<Vec<u8>, String> {
    RDCleanPathPdu::new_response(server_addr.to_owned(), x224, chain)
        .and_then(|pdu| pdu.to_der())
        .map_err(|e| format!("encode the RDCleanPath response: {e}"))
}

/// Why the proxy refuses, as the client is told it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// A token that is wrong or already used (HTTP 403).
    Token,
    /// The guest's port could not be reached (WSAECONNREFUSED, 10061).
    Unreachable,
    /// The TLS handshake failed, or the certificate is not the one the user accepted (TLS
    /// alert 42, bad_certificate).
    Certificate,
    /// The server refused the negotiation: its Connection Confirm, as it sent it.
    Negotiation(Vec<u8>),
    /// Anything else (a malformed request).
    General,
}

impl Refusal {
    /// The error PDU, DER-encoded.
    pub fn to_der(&self) -> Vec<u8> {
        let pdu = match self {
            Refusal::Token => RDCleanPathPdu::new_http_error(403),
            Refusal::Unreachable => RDCleanPathPdu::new_wsa_error(10061),
            Refusal::Certificate => RDCleanPathPdu::new_tls_error(42),
            Refusal::Negotiation(confirm) => RDCleanPathPdu::new_negotiation_error(confirm.clone())
                .unwrap_or_else(|_| RDCleanPathPdu::new_general_error()),
            Refusal::General => RDCleanPathPdu::new_general_error(),
        };
        // The error PDUs hold only small integers and a short confirm: they always encode.
        pdu.to_der().unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request_der() -> Vec<u8> {
        RDCleanPathPdu::new_request(vec![3, 0, 0, 19], "d-1:3389".into(), "tok".into(), None)
            .unwrap()
            .to_der()
            .unwrap()
    }

    #[test]
    fn a_request_is_read_whole_from_pieces() {
        let der = request_der();
        assert!(matches!(read_request(&der[..1]), Ok(Read::More)));
        assert!(matches!(
            read_request(&der[..der.len() - 1]),
            Ok(Read::More)
        ));
        let Ok(Read::Done(request)) = read_request(&der) else {
            panic!("a whole request");
        };
        assert_eq!(request.destination, "d-1:3389");
        assert_eq!(request.token, "tok");
        assert_eq!(request.x224, vec![3, 0, 0, 19]);
    }

    #[test]
    fn other_bytes_and_other_pdus_are_refused() {
        assert!(read_request(b"GET / HTTP/1.1\r\n").is_err());
        let response = response("127.0.0.1:3389", vec![3, 0, 0, 19], vec![vec![1, 2]]).unwrap();
        assert!(
            read_request(&response)
                .unwrap_err()
                .contains("not a request")
        );
        for refusal in [
            Refusal::Token,
            Refusal::Unreachable,
            Refusal::Certificate,
            Refusal::Negotiation(vec![3, 0, 0, 19]),
            Refusal::General,
        ] {
            let pdu = RDCleanPathPdu::from_der(&refusal.to_der()).unwrap();
            assert!(pdu.error.is_some(), "{refusal:?}");
        }
        let token = RDCleanPathPdu::from_der(&Refusal::Token.to_der()).unwrap();
        assert_eq!(token.error.unwrap().http_status_code, Some(403));
    }
}
