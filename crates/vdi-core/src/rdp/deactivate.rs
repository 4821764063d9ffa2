//! xrdp's short Deactivate All PDU, lengthened for the web client.
//!
//! When the desktop is resized (display control), the server runs the Deactivation-Reactivation
//! Sequence: a Deactivate All PDU, then a new Demand Active with the new size ([MS-RDPBCGR]
//! 1.3.1.3). xrdp sends the Deactivate All as a bare 6-byte Share Control Header (totalLength,
//! pduType, pduSource), without shareId, lengthSourceDescriptor or sourceDescriptor. The web
//! client the app ships (`ironrdp-pdu` before Devolutions/IronRDP#1719) cannot decode a header
//! shorter than 10 bytes and drops the session. The proxy, which sees each whole PDU
//! ([`super::framing`]), hands such a PDU on in its full form: the share id of the last Demand
//! Active it carried, a one-byte source descriptor of 0 (what the field SHOULD be).
//!
//! xrdp then goes on drawing (a pointer, bitmaps, channel data) while the client is still in
//! the sequence's finalization, where IronRDP's connector takes anything but the server's
//! Synchronize, Control and Font Map PDUs for an "unexpected server message" and ends the
//! session. So from a Deactivate All until the server's Font Map the proxy holds back every
//! other PDU and hands them on, in order, right after the Font Map ([MS-RDPBCGR] 1.3.1.1: the
//! Font Map ends the server's part of the finalization). Outside that window every PDU passes
//! unchanged and at once.
//!
//! Last, the web client ends the session on a Data PDU it has no handler for, though each of
//! these only informs a client that may ignore it: Play Sound (xrdp sends one for the guest's
//! X bell), Set Keyboard IME Status, Status Info and Monitor Layout. The proxy drops those.
//!
//! [MS-RDPBCGR]: https://learn.microsoft.com/en-us/openspecs/windows_protocols/ms-rdpbcgr/

use bytes::{BufMut, Bytes, BytesMut};

use super::x224::{self, DATA_HEADER};

/// `pduType` (low 4 bits) of a Demand Active PDU ([MS-RDPBCGR] 2.2.8.1.1.1.1).
const PDUTYPE_DEMANDACTIVEPDU: u16 = 0x1;
/// `pduType` (low 4 bits) of a Deactivate All PDU.
const PDUTYPE_DEACTIVATEALLPDU: u16 = 0x6;
/// MCS Send Data Indication's first byte (choice 26, shifted).
const SEND_DATA_INDICATION: u8 = 26 << 2;

/// `pduType2` of the Data PDUs of the finalization ([MS-RDPBCGR] 2.2.8.1.1.1.2): Control,
/// Synchronize, Font Map; and Set Error Info, which ends a session at any time.
const PDUTYPE2_CONTROL: u8 = 20;
const PDUTYPE2_SYNCHRONIZE: u8 = 31;
const PDUTYPE2_FONTMAP: u8 = 40;
const PDUTYPE2_SET_ERROR_INFO_PDU: u8 = 47;
/// `pduType2` of the Data PDUs the web client cannot take and a client may ignore
/// ([MS-RDPBCGR] 2.2.9.1.1.5, 2.2.8.2.2, 2.2.5.2, 2.2.12.1).
const IGNORABLE_PDUTYPE2: [u8; 4] = [34, 45, 54, 55];
/// `pduType` (low 4 bits) of a Data PDU.
const PDUTYPE_DATAPDU: u16 = 0x7;
/// The most bytes held back during one reactivation; past it everything goes on at once.
const HOLD_LIMIT: usize = 16 << 20;
/// The most PDUs held back during one reactivation (a guest sending tiny PDUs would otherwise
/// fill memory with their bookkeeping well before [`HOLD_LIMIT`] bytes); past it everything goes
/// on at once.
const HOLD_COUNT: usize = 4096;

/// Mends the Deactivation-Reactivation Sequence on one connection (server to client): lengthens
/// xrdp's short Deactivate All and holds back what comes before the Font Map.
#[derive(Debug, Default)]
pub struct DeactivateAll {
    /// The shareId of the last Demand Active seen.
    share_id: u32,
    /// The MCS channel of the last Demand Active (the I/O channel).
    io_channel: Option<u16>,
    /// PDUs held back since a Deactivate All, while it waits for the Font Map.
    held: Option<Vec<Bytes>>,
    held_bytes: usize,
    /// Whether the connection's first Font Map has passed (the client is in its session).
    connected: bool,
}

/// What one slow-path PDU on the I/O channel is, for the sequence.
enum Share {
    DemandActive(u32),
    /// The Deactivate All, and whether it is xrdp's header-only one.
    DeactivateAll {
        short: bool,
    },
    /// A Data PDU of the finalization (or Set Error Info), and whether it is the Font Map.
    Finalization {
        font_map: bool,
    },
    /// A Data PDU the web client cannot take and may ignore.
    Ignorable,
    Other,
}

/// The parts of a slow-path PDU on an MCS Send Data Indication: the bytes up to the PER length
/// of its user data, and where the user data starts.
struct SendData<'a> {
    mcs_head: &'a [u8],
    channel: u16,
    user_data: &'a [u8],
}

fn send_data(pdu: &[u8]) -> Option<SendData<'_>> {
    // X.224 Data: Send Data Indication, initiator, channel id, priority and segmentation, then
    // the PER length of the user data.
    let mcs_head = pdu.get(DATA_HEADER..DATA_HEADER + 6)?;
    if !x224::is_data(pdu) || mcs_head[0] != SEND_DATA_INDICATION {
        return None;
    }
    let start = DATA_HEADER + 6;
    let (length, used) = x224::per_length(&pdu[start..])?;
    let user_data = pdu.get(start + used..start + used + length)?;
    Some(SendData {
        mcs_head,
        channel: u16::from_be_bytes([mcs_head[3], mcs_head[4]]),
        user_data,
    })
}

fn share(user_data: &[u8]) -> Share {
    if user_data.len() < 6 {
        return Share::Other;
    }
    let total = u16::from_le_bytes([user_data[0], user_data[1]]);
    match u16::from_le_bytes([user_data[2], user_data[3]]) & 0xF {
        PDUTYPE_DEMANDACTIVEPDU if user_data.len() >= 10 => {
            Share::DemandActive(u32::from_le_bytes([
                user_data[6],
                user_data[7],
                user_data[8],
                user_data[9],
            ]))
        }
        PDUTYPE_DEACTIVATEALLPDU => Share::DeactivateAll {
            short: total == 6 && user_data.len() == 6,
        },
        PDUTYPE_DATAPDU if user_data.len() > 14 => match user_data[14] {
            PDUTYPE2_FONTMAP => Share::Finalization { font_map: true },
            PDUTYPE2_CONTROL | PDUTYPE2_SYNCHRONIZE | PDUTYPE2_SET_ERROR_INFO_PDU => {
                Share::Finalization { font_map: false }
            }
            kind if IGNORABLE_PDUTYPE2.contains(&kind) => Share::Ignorable,
            _ => Share::Other,
        },
        _ => Share::Other,
    }
}

impl DeactivateAll {
    /// What to hand the web client for `pdu` (one whole PDU from the server), in order: `pdu`
    /// itself (lengthened if it is xrdp's Deactivate All), nothing while it is held back or
    /// when it is ignorable, or the Font Map followed by what was held.
    pub fn adapt(&mut self, pdu: Bytes) -> Vec<Bytes> {
        let (kind, channel) = match send_data(&pdu) {
            Some(data) if self.io_channel.is_none_or(|io| io == data.channel) => {
                (share(data.user_data), Some(data.channel))
            }
            _ => (Share::Other, None),
        };
        match kind {
            Share::DemandActive(share_id) => {
                self.share_id = share_id;
                self.io_channel = channel;
                vec![pdu]
            }
            Share::DeactivateAll { short } => {
                // Anything still held belongs before this.
                let mut out = self.held.take().unwrap_or_default();
                self.held = Some(Vec::new());
                self.held_bytes = 0;
                out.push(if short { self.lengthen(&pdu) } else { pdu });
                out
            }
            Share::Finalization { font_map: true } => {
                self.connected = true;
                let mut out = vec![pdu];
                out.extend(self.held.take().unwrap_or_default());
                out
            }
            Share::Finalization { font_map: false } => vec![pdu],
            Share::Ignorable => Vec::new(),
            Share::Other => match &mut self.held {
                Some(held)
                    if self.held_bytes + pdu.len() <= HOLD_LIMIT && held.len() < HOLD_COUNT =>
                {
                    self.held_bytes += pdu.len();
                    held.push(pdu);
                    Vec::new()
                }
                Some(_) => {
                    let mut out = self.held.take().unwrap_or_default();
                    out.push(pdu);
                    out
                }
                None => vec![pdu],
            },
        }
    }

    /// Whether a Font Map has passed: the web client has finished connecting and reads the
    /// rest through its session, which keeps what a message holds past one PDU.
    pub fn connected(&self) -> bool {
        self.connected
    }

    /// xrdp's header-only Deactivate All `pdu` with its body.
    fn lengthen(&self, pdu: &[u8]) -> Bytes {
        let data = send_data(pdu).expect("a Send Data Indication");
        // Header (6) + shareId (4) + lengthSourceDescriptor (2) + sourceDescriptor (1).
        let mut full = BytesMut::with_capacity(13);
        full.put_u16_le(13);
        full.put_slice(&data.user_data[2..6]);
        full.put_u32_le(self.share_id);
        full.put_u16_le(1);
        full.put_u8(0);
        let mut out = BytesMut::with_capacity(27);
        out.put_slice(&pdu[..DATA_HEADER]);
        out.put_slice(data.mcs_head);
        out.put_u8(13);
        out.put_slice(&full);
        let length = u16::try_from(out.len()).expect("27 bytes").to_be_bytes();
        out[2..4].copy_from_slice(&length);
        out.freeze()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A slow-path PDU on MCS channel `channel` from the server (1002) carrying `share`.
    fn slow_path_on(channel: u16, share: &[u8]) -> Bytes {
        let mut pdu = vec![3, 0, 0, 0, 0x02, 0xF0, 0x80, 0x68, 0x00, 0x05];
        pdu.extend_from_slice(&channel.to_be_bytes());
        pdu.push(0x70);
        if share.len() < 0x80 {
            pdu.push(u8::try_from(share.len()).unwrap());
        } else {
            pdu.push(0x80 | u8::try_from(share.len() >> 8).unwrap());
            pdu.push((share.len() & 0xFF) as u8);
        }
        pdu.extend_from_slice(share);
        let length = u16::try_from(pdu.len()).unwrap().to_be_bytes();
        pdu[2..4].copy_from_slice(&length);
        Bytes::from(pdu)
    }

    /// On the I/O channel (1003).
    fn slow_path(share: &[u8]) -> Bytes {
        slow_path_on(1003, share)
    }

    fn demand_active(share_id: u32) -> Bytes {
        let mut share = vec![0; 300];
        share[0..2].copy_from_slice(&300u16.to_le_bytes());
        share[2..4].copy_from_slice(&0x11u16.to_le_bytes());
        share[4..6].copy_from_slice(&0x3EEu16.to_le_bytes());
        share[6..10].copy_from_slice(&share_id.to_le_bytes());
        slow_path(&share)
    }

    /// A Data PDU with `pdu_type2` and a few bytes of body.
    fn data(pdu_type2: u8) -> Bytes {
        let mut share = vec![
            24, 0, 0x17, 0, 0xEE, 0x03, 0xEA, 0x03, 0x01, 0x00, 0, 1, 8, 0,
        ];
        share.extend_from_slice(&[pdu_type2, 0, 0, 0, 1, 2, 3, 4, 5, 6]);
        slow_path(&share)
    }

    /// As xrdp 0.9.21 sends it: totalLength 6, pduType 0x16, pduSource 0x3EE.
    fn short_deactivate() -> Bytes {
        slow_path(&[6, 0, 0x16, 0, 0xEE, 0x03])
    }

    #[test]
    fn xrdps_header_only_deactivate_all_gets_its_body_and_the_share_id() {
        let mut adapter = DeactivateAll::default();
        let demand = demand_active(0x0001_03EA);
        assert_eq!(adapter.adapt(demand.clone()), [demand]);
        let short = short_deactivate();
        let out = adapter.adapt(short.clone());
        assert_eq!(out.len(), 1);
        let full = out[0].clone();
        assert_eq!(full.len(), 27);
        assert_eq!(&full[..4], &[3, 0, 0, 27], "TPKT length");
        assert_eq!(&full[4..13], &short[4..13], "X.224 and MCS heads kept");
        assert_eq!(full[13], 13, "PER length of the user data");
        assert_eq!(
            &full[14..],
            &[13, 0, 0x16, 0, 0xEE, 0x03, 0xEA, 0x03, 0x01, 0x00, 1, 0, 0],
            "header, share id, one-byte source descriptor"
        );
        // A Deactivate All with its body already passes as it is.
        let mut adapter = DeactivateAll::default();
        assert_eq!(adapter.adapt(full.clone()), [full]);
    }

    #[test]
    fn what_comes_before_the_font_map_waits_for_it_in_order() {
        let mut adapter = DeactivateAll::default();
        adapter.adapt(demand_active(7));
        let pointer = data(27);
        let bitmap = data(2);
        let fast_path = Bytes::from_static(&[0x00, 0x05, 1, 2, 3]);
        let clipboard = slow_path_on(1004, &[12, 0, 0, 0, 3, 0, 0, 0, 2, 0, 0, 0]);
        let (sync, control, font_map) = (data(31), data(20), data(40));
        assert!(!adapter.connected());
        adapter.adapt(short_deactivate());
        let demand = demand_active(8);
        assert_eq!(adapter.adapt(demand.clone()), [demand]);
        for held in [&pointer, &bitmap, &fast_path, &clipboard] {
            assert!(adapter.adapt(held.clone()).is_empty(), "held: {held:?}");
        }
        assert_eq!(adapter.adapt(sync.clone()), [sync]);
        assert_eq!(adapter.adapt(control.clone()), [control]);
        assert_eq!(
            adapter.adapt(font_map.clone()),
            [font_map, pointer.clone(), bitmap, fast_path, clipboard]
        );
        assert!(adapter.connected(), "the Font Map says connected");
        // After the Font Map everything passes at once.
        assert_eq!(adapter.adapt(pointer.clone()), [pointer]);
    }

    #[test]
    fn a_play_sound_and_other_ignorable_data_pdus_are_dropped() {
        let mut adapter = DeactivateAll::default();
        for kind in IGNORABLE_PDUTYPE2 {
            assert!(adapter.adapt(data(kind)).is_empty(), "pduType2 {kind}");
        }
        // Not on the I/O channel: not a Data PDU, passed on.
        let elsewhere = {
            let on_io = data(34);
            let mut bytes = on_io.to_vec();
            bytes[10..12].copy_from_slice(&1004u16.to_be_bytes());
            Bytes::from(bytes)
        };
        adapter.adapt(demand_active(1));
        assert_eq!(adapter.adapt(elsewhere.clone()), [elsewhere]);
    }

    #[test]
    fn outside_a_reactivation_everything_passes_and_holding_has_a_limit() {
        let mut adapter = DeactivateAll::default();
        for pdu in [
            data(27),
            data(40),
            Bytes::from_static(&[0x00, 0x05, 1, 2, 3]),
            Bytes::from_static(&[3, 0, 0, 9, 0x02, 0xF0, 0x80, 0x21, 0x80]),
            // Cut short: the user data is not all there.
            short_deactivate().slice(..16),
        ] {
            assert_eq!(adapter.adapt(pdu.clone()), [pdu]);
        }
        adapter.adapt(short_deactivate());
        let big = Bytes::from(vec![0u8; 0x7000]);
        let mut out = Vec::new();
        for _ in 0..(HOLD_LIMIT / big.len() + 1) {
            out.extend(adapter.adapt(big.clone()));
        }
        assert_eq!(
            out.len(),
            HOLD_LIMIT / big.len() + 1,
            "past the limit all goes on"
        );
        assert_eq!(adapter.adapt(big.clone()), [big], "and is not held again");
        // Many tiny PDUs: held up to their own count, then all go on.
        let mut adapter = DeactivateAll::default();
        adapter.adapt(short_deactivate());
        let tiny = Bytes::from_static(&[0x00, 0x03, 0]);
        let mut out = Vec::new();
        for _ in 0..HOLD_COUNT {
            out.extend(adapter.adapt(tiny.clone()));
        }
        assert!(out.is_empty(), "held up to {HOLD_COUNT}");
        assert_eq!(adapter.adapt(tiny.clone()).len(), HOLD_COUNT + 1);
    }
}
