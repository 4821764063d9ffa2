//! Cuts the guest's RDP output into whole PDUs, one websocket message each.
//!
//! Why: IronRDP's web client reads the connection sequence through one framed reader and then
//! starts the session on the bare websocket, dropping whatever that reader had buffered past the
//! Font Map PDU (`into_inner_no_leftover` in `ironrdp-web`'s `connect`, at the version the app
//! ships). A server that sends more right behind the Font Map in the same TLS record (xrdp sends
//! its Dynamic Virtual Channel capabilities there, [MS-RDPEDYC] 2.2.1.1) would lose it, and a
//! PDU cut in two would leave the session decoding from its middle. A message that holds
//! exactly one PDU leaves nothing behind to drop.
//!
//! What a PDU is here, once the client speaks RDP proper (after CredSSP, if any):
//! - a slow-path PDU: TPKT, first byte 3, its length a big-endian `u16` in bytes 2–3
//!   ([MS-RDPBCGR] 2.2.8.1.1.1.1, RFC 1006);
//! - a fast-path output PDU: the two low bits of the first byte 0, its length in the next one
//!   or two bytes (the high bit of the first length byte set means two)
//!   ([MS-RDPBCGR] 2.2.9.1.2).
//!
//! Anything else (a length below its own header) is passed on as it came and the framer gives
//! up cutting for the rest of the connection, so an unexpected stream is carried, not stopped.
//!
//! [MS-RDPEDYC]: https://learn.microsoft.com/en-us/openspecs/windows_protocols/ms-rdpedyc/
//! [MS-RDPBCGR]: https://learn.microsoft.com/en-us/openspecs/windows_protocols/ms-rdpbcgr/

use bytes::{Bytes, BytesMut};

use super::x224;

/// The server's output, cut at PDU boundaries.
#[derive(Debug, Default)]
pub struct PduFramer {
    pending: BytesMut,
    /// Set when the stream did not look like RDP: everything passes through uncut after that.
    passthrough: bool,
}

/// The whole length of the PDU at the start of `bytes` (header included), `Ok(None)` when more
/// bytes are needed to know it, `Err(())` when the start is no PDU header.
fn pdu_length(bytes: &[u8]) -> Result<Option<usize>, ()> {
    let Some(&first) = bytes.first() else {
        return Ok(None);
    };
    if first == 3 {
        let Some(length) = bytes.get(2..4) else {
            return Ok(None);
        };
        let length = usize::from(u16::from_be_bytes([length[0], length[1]]));
        return if length < 4 {
            Err(())
        } else {
            Ok(Some(length))
        };
    }
    if first & 0b11 != 0 {
        return Err(());
    }
    // length1 and, when its high bit is set, length2: the encoding of a PER length.
    let Some((length, used)) = x224::per_length(&bytes[1..]) else {
        return Ok(None);
    };
    if length < 1 + used {
        Err(())
    } else {
        Ok(Some(length))
    }
}

impl PduFramer {
    /// Takes the bytes of one read from the server and returns the PDUs they complete, in order
    /// (none when the read ends inside a PDU: its start waits here for the rest).
    pub fn push(&mut self, bytes: &[u8]) -> Vec<Bytes> {
        if self.passthrough {
            return vec![Bytes::copy_from_slice(bytes)];
        }
        self.pending.extend_from_slice(bytes);
        let mut out = Vec::new();
        loop {
            match pdu_length(&self.pending) {
                Ok(Some(length)) if length <= self.pending.len() => {
                    out.push(self.pending.split_to(length).freeze());
                }
                Ok(_) => break,
                Err(()) => {
                    self.passthrough = true;
                    if !self.pending.is_empty() {
                        out.push(self.pending.split().freeze());
                    }
                    break;
                }
            }
        }
        out
    }

    /// Bytes held back waiting for the rest of a PDU (for a connection that ends).
    pub fn remainder(&mut self) -> Option<Bytes> {
        (!self.pending.is_empty()).then(|| self.pending.split().freeze())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tpkt(body: usize) -> Vec<u8> {
        let length = u16::try_from(body + 4).unwrap().to_be_bytes();
        let mut pdu = vec![3, 0, length[0], length[1]];
        pdu.extend(std::iter::repeat_n(0xAB, body));
        pdu
    }

    fn fast_path(total: usize) -> Vec<u8> {
        let mut pdu = if total < 0x80 {
            vec![0, u8::try_from(total).unwrap()]
        } else {
            vec![
                0,
                0x80 | u8::try_from(total >> 8).unwrap(),
                (total & 0xff) as u8,
            ]
        };
        pdu.resize(total, 0xCD);
        pdu
    }

    #[test]
    fn two_pdus_in_one_read_come_out_as_two() {
        // The case that lost xrdp's DVC capabilities: a Font Map and what follows in one read.
        let (a, b) = (tpkt(22), tpkt(30));
        let mut framer = PduFramer::default();
        let out = framer.push(&[a.clone(), b.clone()].concat());
        assert_eq!(out, vec![Bytes::from(a), Bytes::from(b)]);
        assert_eq!(framer.remainder(), None);
    }

    #[test]
    fn a_pdu_cut_across_reads_comes_out_whole_once_complete() {
        let pdu = fast_path(1000);
        let mut framer = PduFramer::default();
        assert!(
            framer.push(&pdu[..1]).is_empty(),
            "one byte: length unknown"
        );
        assert!(
            framer.push(&pdu[1..2]).is_empty(),
            "two-byte length half read"
        );
        assert!(framer.push(&pdu[2..700]).is_empty());
        let next = tpkt(10);
        let out = framer.push(&[&pdu[700..], &next[..5]].concat());
        assert_eq!(out, vec![Bytes::from(pdu)]);
        assert_eq!(framer.push(&next[5..]), vec![Bytes::from(next)]);
    }

    #[test]
    fn short_fast_path_and_tpkt_lengths_are_read() {
        let mut framer = PduFramer::default();
        let small = fast_path(5);
        let large = fast_path(0x7fff);
        let slow = tpkt(65531);
        let out = framer.push(&[small.clone(), large.clone(), slow.clone()].concat());
        assert_eq!(
            out.iter().map(Bytes::len).collect::<Vec<_>>(),
            [5, 0x7fff, 65535]
        );
    }

    #[test]
    fn a_stream_that_is_not_rdp_passes_through_uncut() {
        let mut framer = PduFramer::default();
        let whole = tpkt(6);
        // A first byte with fast-path action bits set (1) is no PDU: passed on, and from then
        // on everything is.
        const ODD: [u8; 3] = [0x01, 0x02, 0x03];
        let out = framer.push(&[whole.clone(), ODD.to_vec()].concat());
        assert_eq!(out, vec![Bytes::from(whole), Bytes::from_static(&ODD)]);
        let later = tpkt(3);
        assert_eq!(
            framer.push(&later[..2]),
            vec![Bytes::copy_from_slice(&later[..2])]
        );
        // A length shorter than its own header is no PDU either.
        let mut framer = PduFramer::default();
        assert_eq!(
            framer.push(&[3, 0, 0, 2]),
            vec![Bytes::from_static(&[3, 0, 0, 2])]
        );
        let mut framer = PduFramer::default();
        assert_eq!(framer.push(&[0, 1]), vec![Bytes::from_static(&[0, 1])]);
    }

    #[test]
    fn the_remainder_of_a_cut_pdu_is_handed_back_at_the_end() {
        let mut framer = PduFramer::default();
        let pdu = tpkt(40);
        assert!(framer.push(&pdu[..10]).is_empty());
        assert_eq!(framer.remainder(), Some(Bytes::copy_from_slice(&pdu[..10])));
        assert_eq!(framer.remainder(), None);
    }
}
