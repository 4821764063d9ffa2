//! The RDP certificates a user has accepted, by member: trust on first use, as RDP clients do
//! (a guest's certificate is self-signed). A JSON object `{"<namespace>/<member>":
//! "<fingerprint>"}` in one file of the user's data folder, written whole (a temporary file
//! renamed over it) and readable by its owner only. Fingerprints are not secrets; the file
//! holds nothing else.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::Serialize;

/// What the certificate a guest shows now is to the user.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, specta::Type)]
#[serde(rename_all = "camelCase", tag = "kind")]
pub enum Trust {
    /// Never seen for this member: the user is shown the fingerprint and asked.
    New,
    /// The one the user accepted before.
    Known,
    /// Another than the one accepted before: the user is shown both and asked again (a
    /// re-created member has a new certificate; so does a man in the middle).
    Changed {
        /// The fingerprint accepted before.
        previous: String,
    },
}

/// The accepted certificates, in the file at `path`.
#[derive(Debug, Clone)]
pub struct KnownCertificates {
    path: PathBuf,
}

fn key(namespace: &str, member: &str) -> String {
    format!("{namespace}/{member}")
}

impl KnownCertificates {
    /// The store in `path` (the file need not exist yet).
    pub fn new(path: PathBuf) -> Self {
        KnownCertificates { path }
    }

    fn read(&self) -> BTreeMap<String, String> {
        std::fs::read(&self.path)
            .ok()
            .and_then(|bytes| serde_json::from_slice(&bytes).ok())
            .unwrap_or_default()
    }

    /// What `fingerprint` is for `member` in `namespace`. A missing or unreadable file knows
    /// nothing (every certificate is then [`Trust::New`]).
    pub fn check(&self, namespace: &str, member: &str, fingerprint: &str) -> Trust {
        match self.read().remove(&key(namespace, member)) {
            None => Trust::New,
            Some(known) if known == fingerprint => Trust::Known,
            Some(previous) => Trust::Changed { previous },
        }
    }

    /// Records that the user accepted `fingerprint` for `member` in `namespace`.
    ///
    /// Errors: the file or its folder cannot be written (in words, with the path).
    pub fn accept(&self, namespace: &str, member: &str, fingerprint: &str) -> Result<(), String> {
        let mut known = self.read();
        known.insert(key(namespace, member), fingerprint.to_owned());
        let failed = |e: std::io::Error| format!("save {}: {e}", self.path.display());
        if let Some(dir) = self.path.parent() {
            std::fs::create_dir_all(dir).map_err(failed)?;
        }
        let json = serde_json::to_vec_pretty(&known).map_err(|e| e.to_string())?;
        let temporary = self.path.with_extension("json.new");
        {
            let mut options = std::fs::OpenOptions::new();
            options.write(true).create(true).truncate(true);
            #[cfg(unix)]
            std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
            let mut file = options.open(&temporary).map_err(failed)?;
            std::io::Write::write_all(&mut file, &json).map_err(failed)?;
        }
        std::fs::rename(&temporary, &self.path).map_err(failed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_use_then_known_then_changed() {
        let dir = std::env::temp_dir().join(format!("corral-trust-{}", std::process::id()));
        let store = KnownCertificates::new(dir.join("rdp-certificates.json"));
        assert_eq!(store.check("ns", "d-1", "AA"), Trust::New);
        store.accept("ns", "d-1", "AA").unwrap();
        assert_eq!(store.check("ns", "d-1", "AA"), Trust::Known);
        assert_eq!(
            store.check("ns", "d-1", "BB"),
            Trust::Changed {
                previous: "AA".into()
            }
        );
        assert_eq!(store.check("ns", "d-2", "AA"), Trust::New);
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(dir.join("rdp-certificates.json"))
                .unwrap()
                .permissions()
                .mode();
            assert_eq!(mode & 0o077, 0);
        }
        let _ = std::fs::remove_dir_all(dir);
    }
}
