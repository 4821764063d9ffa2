//! The RDP certificates a user has accepted, by member: trust on first use, as RDP clients do
//! (a guest's certificate is self-signed). A JSON object `{"<namespace>/<member>":
//! {"fingerprint": "<fingerprint>", "vmUid": "<uid>"}}` in one file of the user's data folder,
//! written whole (a temporary file renamed over it) and readable by its owner only.
//! Fingerprints are not secrets; the file holds nothing else.
//!
//! A pin holds for the VirtualMachine it was accepted on (its uid): a member deleted and made
//! again under the same name (a reset, a re-cloned pool, someone else's VM) is another machine,
//! so its certificate is asked about again even when it is the same, and a saved login is not
//! sent to it before the user says so. An entry of an older version (a bare fingerprint) names
//! no VM and is asked about again once.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

/// What the certificate a guest shows now is to the user.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "bindings", derive(specta::Type))]
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
    /// The one accepted before, but on another VirtualMachine of that name (the member was
    /// made again since): the user is asked again.
    Replaced,
}

/// One accepted certificate.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Pin {
    fingerprint: String,
    /// The uid of the VirtualMachine it was accepted on; `None`: not known (an older entry, or
    /// a VM the user may not read).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    vm_uid: Option<String>,
}

/// An entry as stored: a pin, or an older version's bare fingerprint.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
enum Stored {
    Pin(Pin),
    Fingerprint(String),
}

impl From<Stored> for Pin {
    fn from(stored: Stored) -> Self {
        match stored {
            Stored::Pin(pin) => pin,
            Stored::Fingerprint(fingerprint) => Pin {
                fingerprint,
                vm_uid: None,
            },
        }
    }
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

    fn read(&self) -> BTreeMap<String, Pin> {
        std::fs::read(&self.path)
            .ok()
            .and_then(|bytes| serde_json::from_slice::<BTreeMap<String, Stored>>(&bytes).ok())
            .map(|all| all.into_iter().map(|(k, v)| (k, v.into())).collect())
            .unwrap_or_default()
    }

    /// What `fingerprint` is for `member` in `namespace`, whose VirtualMachine has `vm_uid`
    /// (`None` when it could not be read: then only a pin that names no VM either is known). A
    /// missing or unreadable file knows nothing (every certificate is then [`Trust::New`]).
    pub fn check(
        &self,
        namespace: &str,
        member: &str,
        vm_uid: Option<&str>,
        fingerprint: &str,
    ) -> Trust {
        match self.read().remove(&key(namespace, member)) {
            None => Trust::New,
            Some(pin) if pin.fingerprint != fingerprint => Trust::Changed {
                previous: pin.fingerprint,
            },
            Some(pin) if pin.vm_uid.as_deref() != vm_uid => Trust::Replaced,
            Some(_) => Trust::Known,
        }
    }

    /// Records that the user accepted `fingerprint` for `member` in `namespace`, on its
    /// VirtualMachine with `vm_uid`.
    ///
    /// Errors: the file or its folder cannot be written (in words, with the path).
    pub fn accept(
        &self,
        namespace: &str,
        member: &str,
        vm_uid: Option<&str>,
        fingerprint: &str,
    ) -> Result<(), String> {
        let mut known = self.read();
        known.insert(
            key(namespace, member),
            Pin {
                fingerprint: fingerprint.to_owned(),
                vm_uid: vm_uid.map(str::to_owned),
            },
        );
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
    fn first_use_then_known_then_changed_and_a_pin_holds_for_its_vm_only() {
        let dir = std::env::temp_dir().join(format!("corral-trust-{}", std::process::id()));
        let store = KnownCertificates::new(dir.join("rdp-certificates.json"));
        let vm = Some("uid-1");
        assert_eq!(store.check("ns", "d-1", vm, "AA"), Trust::New);
        store.accept("ns", "d-1", vm, "AA").unwrap();
        assert_eq!(store.check("ns", "d-1", vm, "AA"), Trust::Known);
        assert_eq!(
            store.check("ns", "d-1", vm, "BB"),
            Trust::Changed {
                previous: "AA".into()
            }
        );
        assert_eq!(store.check("ns", "d-2", vm, "AA"), Trust::New);
        // The member made again: same name, same certificate, another VM.
        assert_eq!(
            store.check("ns", "d-1", Some("uid-2"), "AA"),
            Trust::Replaced
        );
        assert_eq!(store.check("ns", "d-1", None, "AA"), Trust::Replaced);
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(dir.join("rdp-certificates.json"))
                .unwrap()
                .permissions()
                .mode();
            assert_eq!(mode & 0o077, 0);
        }
        // An older version's entry (a bare fingerprint) names no VM: asked about again.
        std::fs::write(dir.join("rdp-certificates.json"), r#"{"ns/d-1": "AA"}"#).unwrap();
        assert_eq!(store.check("ns", "d-1", vm, "AA"), Trust::Replaced);
        assert_eq!(store.check("ns", "d-1", None, "AA"), Trust::Known);
        let _ = std::fs::remove_dir_all(dir);
    }
}
