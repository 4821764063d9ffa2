//! The client build number in the web client's MCS Connect Initial.
//!
//! IronRDP's web client announces `clientBuild` 0 in its Client Core Data (it derives the
//! number from its own crate's version, 0.0.0). xrdp reads a build of 419 or less as a client
//! too old to be resized and then skips the Deactivation-Reactivation Sequence that gives the
//! client its new desktop size (`libxrdp_reset` in xrdp 0.9.21), while still resizing the
//! desktop behind it: the window's resize would change the guest's screen but not the picture.
//! The proxy, which carries the plaintext, puts [`CLIENT_BUILD`] in place of a 0; any other
//! value, and any PDU it does not recognise, is left as it is.
//!
//! Where the field is ([MS-RDPBCGR] 2.2.1.3): the Connect Initial is TPKT + X.224 Data +
//! the BER `Connect-Initial` (tag `7F 65`) whose user data is the GCC Conference Create
//! Request; its client data blocks follow the H.221 key `"Duca"` and a PER length; the first
//! block is `CS_CORE` (type `0xC001`), and `clientBuild` is its little-endian `u32` at offset 20
//! (after the header, version, desktop width and height, colour depth, SAS sequence and
//! keyboard layout).
//!
//! [MS-RDPBCGR]: https://learn.microsoft.com/en-us/openspecs/windows_protocols/ms-rdpbcgr/

use super::x224::{self, DATA_HEADER};

/// The build number announced for a web client that says 0: that of the RDP 5.1 client, above
/// what xrdp takes for a client that cannot be resized (419).
pub const CLIENT_BUILD: u32 = 2600;

/// `CS_CORE`'s block type, little-endian ([MS-RDPBCGR] 2.2.1.3.2).
const CS_CORE: [u8; 2] = [0x01, 0xC0];

/// Offset of `clientBuild` in the `CS_CORE` block.
const CLIENT_BUILD_OFFSET: usize = 20;

/// Where `clientBuild` is in `pdu` when `pdu` is a whole MCS Connect Initial.
fn client_build_at(pdu: &[u8]) -> Option<usize> {
    // An X.224 Data TPDU holding a BER Connect-Initial (7F 65).
    if !x224::is_data(pdu) || pdu.get(DATA_HEADER..DATA_HEADER + 2)? != [0x7F, 0x65] {
        return None;
    }
    let key = pdu.windows(4).position(|w| w == b"Duca")? + 4;
    // The PER length of the client data, then the blocks.
    let blocks = key + x224::per_length(&pdu[key..])?.1;
    if pdu.get(blocks..blocks + 2)? != CS_CORE {
        return None;
    }
    let length = usize::from(u16::from_le_bytes([
        *pdu.get(blocks + 2)?,
        *pdu.get(blocks + 3)?,
    ]));
    let at = blocks + CLIENT_BUILD_OFFSET;
    (length >= CLIENT_BUILD_OFFSET + 4 && pdu.len() >= at + 4).then_some(at)
}

/// Puts [`CLIENT_BUILD`] in `pdu`'s Client Core Data when `pdu` is an MCS Connect Initial that
/// announces build 0; says whether it did. Lengths do not change.
pub fn announce_build(pdu: &mut [u8]) -> bool {
    let Some(at) = client_build_at(pdu) else {
        return false;
    };
    if pdu[at..at + 4] != [0; 4] {
        return false;
    }
    pdu[at..at + 4].copy_from_slice(&CLIENT_BUILD.to_le_bytes());
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A Connect Initial shaped as IronRDP's web client sends it (the GCC and BER bytes before
    /// the key are filler of the right kind), with `build` in its Client Core Data.
    fn connect_initial(build: u32, long_length: bool) -> Vec<u8> {
        let mut core = Vec::new();
        core.extend_from_slice(&CS_CORE);
        core.extend_from_slice(&216u16.to_le_bytes());
        core.extend_from_slice(&0x0008_0004u32.to_le_bytes()); // version
        core.extend_from_slice(&1280u16.to_le_bytes());
        core.extend_from_slice(&742u16.to_le_bytes());
        core.extend_from_slice(&0xCA01u16.to_le_bytes()); // colour depth
        core.extend_from_slice(&0xAA03u16.to_le_bytes()); // SAS sequence
        core.extend_from_slice(&0x0409u32.to_le_bytes()); // keyboard layout
        core.extend_from_slice(&build.to_le_bytes());
        core.resize(216, 0x11);
        let mut pdu = vec![3, 0, 0, 0, 0x02, 0xF0, 0x80, 0x7F, 0x65, 0x82, 0x01, 0x00];
        pdu.extend_from_slice(&[0x04, 0x01, 0x01, 0x04, 0x01, 0x01, 0x01, 0x01, 0xFF]);
        pdu.extend_from_slice(b"Duca");
        if long_length {
            pdu.extend_from_slice(&[0x81, 0x2C]);
        } else {
            pdu.push(0x6C);
        }
        pdu.extend_from_slice(&core);
        let total = u16::try_from(pdu.len()).unwrap().to_be_bytes();
        pdu[2..4].copy_from_slice(&total);
        pdu
    }

    fn build_of(pdu: &[u8]) -> u32 {
        let at = client_build_at(pdu).expect("a Connect Initial");
        u32::from_le_bytes(pdu[at..at + 4].try_into().unwrap())
    }

    #[test]
    fn a_zero_build_becomes_the_announced_one_and_nothing_else_moves() {
        for long_length in [false, true] {
            let before = connect_initial(0, long_length);
            let mut pdu = before.clone();
            assert!(announce_build(&mut pdu));
            assert_eq!(build_of(&pdu), CLIENT_BUILD);
            assert_eq!(pdu.len(), before.len());
            let changed: Vec<usize> = (0..pdu.len()).filter(|&i| pdu[i] != before[i]).collect();
            assert!(changed.len() <= 4, "{changed:?}");
            // The build follows the desktop width by 12 bytes (height, depth, SAS, layout).
            let width = changed[0] - 12;
            assert_eq!(
                u16::from_le_bytes([pdu[width], pdu[width + 1]]),
                1280,
                "the build sits after the desktop width"
            );
        }
    }

    #[test]
    fn a_real_build_and_other_pdus_are_left_alone() {
        let before = connect_initial(18363, false);
        let mut pdu = before.clone();
        assert!(!announce_build(&mut pdu));
        assert_eq!(pdu, before);
        // Not a Connect Initial: an MCS Erect Domain Request, a fast-path input, a cut PDU.
        for other in [
            vec![3, 0, 0, 12, 0x02, 0xF0, 0x80, 0x04, 0x01, 0x00, 0x01, 0x00],
            vec![0x00, 0x05, 0x01, 0x02, 0x03],
            connect_initial(0, false)[..40].to_vec(),
        ] {
            let mut pdu = other.clone();
            assert!(!announce_build(&mut pdu));
            assert_eq!(pdu, other);
        }
        // A first block other than CS_CORE.
        let mut pdu = connect_initial(0, false);
        let key = pdu.windows(4).position(|w| w == b"Duca").unwrap() + 5;
        pdu[key] = 0x02;
        let other = pdu.clone();
        assert!(!announce_build(&mut pdu));
        assert_eq!(pdu, other);
    }
}
