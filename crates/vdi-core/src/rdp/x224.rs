//! The first exchange of an RDP connection: the client's X.224 Connection Request with its RDP
//! Negotiation Request, and the server's Connection Confirm with the protocol it selected or
//! why it refused ([MS-RDPBCGR] 2.2.1.1 and 2.2.1.2), each in a TPKT packet ([T.123] 8: version
//! 3, a reserved byte, the packet's whole length as a big-endian u16).
//!
//! [MS-RDPBCGR]: https://learn.microsoft.com/en-us/openspecs/windows_protocols/ms-rdpbcgr/
//! [T.123]: https://www.itu.int/rec/T-REC-T.123

use tokio::io::{AsyncRead, AsyncReadExt};

/// `PROTOCOL_SSL`: TLS ([MS-RDPBCGR] 2.2.1.1.1).
pub const PROTOCOL_SSL: u32 = 0x1;
/// `PROTOCOL_HYBRID`: CredSSP (NLA) over TLS.
pub const PROTOCOL_HYBRID: u32 = 0x2;
/// `PROTOCOL_HYBRID_EX`: CredSSP with the Early User Authorization Result PDU.
pub const PROTOCOL_HYBRID_EX: u32 = 0x8;

/// The largest TPKT packet read before TLS (bytes): a Connection Confirm is 19.
const MAX_PACKET: usize = 4096;

/// What the server answered to a Connection Request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Negotiation {
    /// The protocol it selected (`PROTOCOL_SSL`, `PROTOCOL_HYBRID`, …; 0 is standard RDP
    /// security, without TLS).
    Selected(u32),
    /// An RDP Negotiation Failure, with its `failureCode` ([MS-RDPBCGR] 2.2.1.2.2).
    Failure(u32),
    /// No negotiation response at all: a server that knows only standard RDP security.
    Legacy,
}

impl Negotiation {
    /// Whether the selected protocol is CredSSP: the client must authenticate (NLA) first.
    pub fn needs_nla(self) -> bool {
        matches!(self, Negotiation::Selected(p) if p & (PROTOCOL_HYBRID | PROTOCOL_HYBRID_EX) != 0)
    }

    /// Whether TLS follows (any selected protocol but standard RDP security).
    pub fn uses_tls(self) -> bool {
        matches!(self, Negotiation::Selected(p) if p != 0)
    }

    /// Why a client of ours cannot go on, in words naming `member`, or `None` when it can
    /// (TLS, with or without NLA).
    pub fn refusal(self, member: &str) -> Option<String> {
        let why = match self {
            Negotiation::Selected(p) if p != 0 => return None,
            Negotiation::Selected(_) | Negotiation::Legacy => {
                "offers only standard RDP security, without TLS, which the app does not use"
                    .to_owned()
            }
            Negotiation::Failure(1) => {
                "requires TLS and refused it (SSL_REQUIRED_BY_SERVER)".into()
            }
            Negotiation::Failure(2) => "does not allow TLS (SSL_NOT_ALLOWED_BY_SERVER)".into(),
            Negotiation::Failure(3) => "has no TLS certificate (SSL_CERT_NOT_ON_SERVER)".to_owned(),
            Negotiation::Failure(5) => {
                "requires Network Level Authentication (HYBRID_REQUIRED_BY_SERVER)".to_owned()
            }
            Negotiation::Failure(6) => {
                "requires TLS with user authentication (SSL_WITH_USER_AUTH_REQUIRED_BY_SERVER)"
                    .to_owned()
            }
            Negotiation::Failure(code) => format!("refused the connection (failure code {code})"),
        };
        Some(format!("the RDP server of {member} {why}"))
    }
}

/// A Connection Request asking for `protocols` (a mask of `PROTOCOL_*`), without a cookie:
/// TPKT (4 bytes), the X.224 CR TPDU (7), the RDP Negotiation Request (8).
pub fn connection_request(protocols: u32) -> Vec<u8> {
    let mut pdu = vec![
        3, 0, 0, 19, // TPKT: version 3, 19 bytes in all
        14, 0xE0, 0, 0, 0, 0, 0, // X.224: length indicator, CR, dst-ref, src-ref, class 0
        1, 0, 8, 0, // RDP_NEG_REQ: type, flags, length 8 (little-endian)
    ];
    pdu.extend_from_slice(&protocols.to_le_bytes());
    pdu
}

/// Reads one TPKT packet (header included) from `io`.
///
/// Errors: the stream ended or failed first, or the header is not TPKT version 3 with a length
/// from 7 to 4096 bytes (say so in words: the peer is not an RDP server).
pub async fn read_packet<R: AsyncRead + Unpin>(io: &mut R) -> std::io::Result<Vec<u8>> {
    let mut packet = vec![0u8; 4];
    io.read_exact(&mut packet).await?;
    let length = usize::from(u16::from_be_bytes([packet[2], packet[3]]));
    if packet[0] != 3 || !(7..=MAX_PACKET).contains(&length) {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            "the guest's port 3389 did not answer as an RDP server (no TPKT packet)",
        ));
    }
    packet.resize(length, 0);
    io.read_exact(&mut packet[4..]).await?;
    Ok(packet)
}

/// The length of the TPKT header and the X.224 Data TPDU header that carry every slow-path PDU
/// after the connection request (`03 00 LL LL 02 F0 80`, RFC 1006 and X.224 class 0).
pub const DATA_HEADER: usize = 7;

/// Whether `pdu` is a TPKT packet carrying an X.224 Data TPDU (its MCS PDU from
/// [`DATA_HEADER`] on).
pub fn is_data(pdu: &[u8]) -> bool {
    pdu.len() > DATA_HEADER && pdu[0] == 3 && pdu[4..DATA_HEADER] == [0x02, 0xF0, 0x80]
}

/// An aligned PER length at the start of `bytes` (one byte, or two when the first has its high
/// bit set, as MCS and GCC write them): the length and how many bytes it took.
pub fn per_length(bytes: &[u8]) -> Option<(usize, usize)> {
    let first = *bytes.first()?;
    if first & 0x80 == 0 {
        Some((usize::from(first), 1))
    } else {
        Some((
            (usize::from(first & 0x7F) << 8) | usize::from(*bytes.get(1)?),
            2,
        ))
    }
}

/// Reads a Connection Confirm (a whole TPKT packet) into what the server negotiated.
///
/// Errors: not an X.224 Connection Confirm (the TPDU code is not 0xD0).
pub fn parse_confirm(packet: &[u8]) -> Result<Negotiation, String> {
    // TPKT (4), length indicator (1), CC code (1), dst-ref (2), src-ref (2), class (1).
    const NEG: usize = 11;
    if packet.len() < NEG || packet[5] & 0xF0 != 0xD0 {
        return Err("the guest's RDP server did not confirm the connection (no X.224 CC)".into());
    }
    let neg = &packet[NEG..];
    if neg.len() < 8 {
        return Ok(Negotiation::Legacy);
    }
    let value = u32::from_le_bytes([neg[4], neg[5], neg[6], neg[7]]);
    match neg[0] {
        2 => Ok(Negotiation::Selected(value)),
        3 => Ok(Negotiation::Failure(value)),
        _ => Ok(Negotiation::Legacy),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_is_a_19_byte_tpkt_with_the_protocols() {
        let pdu = connection_request(PROTOCOL_SSL | PROTOCOL_HYBRID);
        assert_eq!(pdu.len(), 19);
        assert_eq!(usize::from(u16::from_be_bytes([pdu[2], pdu[3]])), pdu.len());
        // The length indicator counts the TPDU's bytes after itself.
        assert_eq!(usize::from(pdu[4]), pdu.len() - 5);
        assert_eq!(&pdu[15..], &3u32.to_le_bytes());
    }

    fn confirm(kind: u8, value: u32) -> Vec<u8> {
        let mut p = vec![3, 0, 0, 19, 14, 0xD0, 0, 0, 0x12, 0x34, 0, kind, 0, 8, 0];
        p.extend_from_slice(&value.to_le_bytes());
        p
    }

    #[test]
    fn confirm_says_selected_failure_or_legacy() {
        let nla = parse_confirm(&confirm(2, PROTOCOL_HYBRID)).unwrap();
        assert_eq!(nla, Negotiation::Selected(PROTOCOL_HYBRID));
        assert!(nla.needs_nla() && nla.uses_tls() && nla.refusal("d-1").is_none());
        let tls = parse_confirm(&confirm(2, PROTOCOL_SSL)).unwrap();
        assert!(!tls.needs_nla() && tls.uses_tls());
        let failed = parse_confirm(&confirm(3, 5)).unwrap();
        assert_eq!(failed, Negotiation::Failure(5));
        assert!(
            failed
                .refusal("d-1")
                .unwrap()
                .contains("Network Level Authentication")
        );
        let legacy = parse_confirm(&[3, 0, 0, 11, 6, 0xD0, 0, 0, 0, 0, 0]).unwrap();
        assert_eq!(legacy, Negotiation::Legacy);
        assert!(legacy.refusal("d-1").unwrap().contains("d-1"));
        assert!(parse_confirm(&[3, 0, 0, 11, 6, 0xE0, 0, 0, 0, 0, 0]).is_err());
    }

    #[tokio::test]
    async fn packets_are_read_whole_and_non_rdp_is_refused() {
        let bytes = confirm(2, 1);
        let mut reader = &bytes[..];
        assert_eq!(read_packet(&mut reader).await.unwrap(), bytes);
        let mut http = &b"HTTP/1.1 400 Bad Request\r\n"[..];
        assert!(read_packet(&mut http).await.is_err());
        let mut short = &bytes[..10];
        assert!(read_packet(&mut short).await.is_err());
    }
}
