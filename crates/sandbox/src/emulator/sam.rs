//! The user database of the guests' RDP servers. FreeRDP's NLA (NTLM inside CredSSP) checks a
//! client against a SAM file of `user:domain:LM hash:NT hash:::` lines with hex hashes, read
//! again at every authentication. An empty LM hash field is allowed, and an entry with an empty
//! domain matches whatever domain the client sends (FreeRDP 2.11: `SamReadEntry` in
//! winpr/libwinpr/utils/sam.c, `ntlm_fetch_ntlm_v2_hash` in
//! winpr/libwinpr/sspi/NTLM/ntlm_compute.c).

use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

use anyhow::{Context, Result};
use md4::{Digest, Md4};

/// The NT hash of a password: MD4 of its UTF-16LE encoding (`NTOWFv1`, [MS-NLMP] 3.3.1).
pub fn nt_hash(password: &str) -> [u8; 16] {
    let utf16le: Vec<u8> = password.encode_utf16().flat_map(u16::to_le_bytes).collect();
    Md4::digest(&utf16le).into()
}

/// The SAM file line that lets `user` in with `password`, from any domain (no LM hash).
pub fn sam_line(user: &str, password: &str) -> String {
    format!(
        "{user}:::{}:::\n",
        data_encoding::HEXLOWER.encode(&nt_hash(password))
    )
}

/// Replaces the SAM file at `path` with one holding only `user` (mode 0600, written beside it
/// and renamed over it, so that an authentication never reads half a file).
///
/// Errors: the file could not be written or renamed.
pub fn write_sam(path: &Path, user: &str, password: &str) -> Result<()> {
    let partial = path.with_extension("partial");
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&partial)
        .with_context(|| format!("create {}", partial.display()))?;
    file.write_all(sam_line(user, password).as_bytes())
        .with_context(|| format!("write {}", partial.display()))?;
    std::fs::rename(&partial, path).with_context(|| format!("rename to {}", path.display()))
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::emulator::knobs::{
        DEFAULT_RDP_PASSWORD, DEFAULT_RDP_USER, RDP_CREDENTIALS_ANNOTATION, rdp_credentials,
    };

    fn hex(bytes: [u8; 16]) -> String {
        data_encoding::HEXLOWER.encode(&bytes)
    }

    #[test]
    fn nt_hash_is_md4_of_utf16le() {
        // Known NT hashes: of "" and of "password" (also what
        // `iconv -t UTF-16LE | openssl dgst -md4` gives).
        assert_eq!(hex(nt_hash("")), "31d6cfe0d16ae931b73c59d7e0c089c0");
        assert_eq!(hex(nt_hash("password")), "8846f7eaee8fb117ad06bdd830b7586c");
        assert_eq!(
            hex(nt_hash(DEFAULT_RDP_PASSWORD)),
            "8f5e23b8344769f5f01b056900b176c9"
        );
    }

    #[test]
    fn sam_line_has_an_empty_domain_and_lm_hash() {
        assert_eq!(
            sam_line("corral", "corral-sandbox"),
            "corral:::8f5e23b8344769f5f01b056900b176c9:::\n"
        );
    }

    #[test]
    fn write_sam_replaces_the_file_with_mode_0600() {
        use std::os::unix::fs::PermissionsExt;
        let dir = std::env::temp_dir().join(format!("corral-sam-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("sam");
        write_sam(&path, "a", "one").unwrap();
        write_sam(&path, "b", "two").unwrap();
        assert_eq!(
            std::fs::read_to_string(&path).unwrap(),
            sam_line("b", "two")
        );
        let mode = std::fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        assert!(!path.with_extension("partial").exists());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn credentials_come_from_the_annotation_else_the_defaults() {
        let with = |value: &str| {
            BTreeMap::from([(RDP_CREDENTIALS_ANNOTATION.to_owned(), value.to_owned())])
        };
        let defaults = (DEFAULT_RDP_USER.to_owned(), DEFAULT_RDP_PASSWORD.to_owned());
        assert_eq!(rdp_credentials(&BTreeMap::new()), defaults);
        assert_eq!(
            rdp_credentials(&with("alice:s3:cr:et")),
            ("alice".to_owned(), "s3:cr:et".to_owned())
        );
        assert_eq!(
            rdp_credentials(&with("alice:")),
            ("alice".to_owned(), String::new())
        );
        for malformed in ["alice", ":secret", "al\nice:secret", ""] {
            assert_eq!(rdp_credentials(&with(malformed)), defaults, "{malformed:?}");
        }
    }
}
