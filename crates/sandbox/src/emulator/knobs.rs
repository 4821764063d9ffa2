//! Settings tests use to shape the emulation, read from the ConfigMap
//! `kubevirt/corral-sandbox-emulator` on every reconcile (absent keys keep their defaults):
//!
//! | key | meaning | default |
//! |---|---|---|
//! | `startMillis` | time from VMI creation to `Running` | 800 |
//! | `stopMillis` | time a stopping VMI takes to go | 400 |
//! | `cloneStepMillis` | time a clone spends in each phase | 300 |
//! | `stallClones` | comma-separated clone target names that never leave their phase; `name:Phase` stalls once the clone reaches `Phase` (e.g. `pool-2:RestoreInProgress`), a bare name in its first phase | empty |
//! | `failClones` | comma-separated clone target names that go `Failed` | empty |
//!
//! VM annotations shape one VM:
//!
//! | annotation | effect |
//! |---|---|
//! | `sandbox.corral.dev/unschedulable: "true"` | the VMI is never scheduled; the VM shows `ErrorUnschedulable`, as one that asks for more than any node has does on KubeVirt (a VM asking for devices no node has free gets there by itself, see [`super::scheduler`]) |
//! | `sandbox.corral.dev/refuse-start: <reason>` | start is refused with a 409 carrying the reason |
//! | `sandbox.corral.dev/snapshot-disabled: "<volume>[,<volume>]"` | those volumes report snapshots disabled |
//! | `sandbox.corral.dev/paused: "true"` | the running VMI reports the condition `Paused` (phase stays `Running`), the VM `printableStatus: Paused`; portforward answers 409 `VMI is paused`, vnc and usbredir still connect |
//! | `sandbox.corral.dev/guest-ports: "22,3389"` | the guest TCP ports that answer (default 22 and 3389); any other is closed (portforward 500 `dialing VM: …`); 5900 is always closed |
//! | `sandbox.corral.dev/force-status: "<subresource>=<code>[,…]"` | the stream subresource (`vnc`, `screenshot`, `portforward`, `usbredir`) answers that code (404, 409, 500, 503 or 504) with a message like virt-api's, before anything else but authorization |
//! | `sandbox.corral.dev/guest-users: "alice,bob"` | the guest agent: absent, not connected (`userlist` answers virt-api's 500 `VMI does not have guest agent connected`); present, connected (the running VMI reports `AgentConnected`) and `userlist` lists these users, none for `""` (see [`super::agent`]) |
//! | `sandbox.corral.dev/disk-marker: <anything>` | a stand-in for "this VM's disk was written" (there are no disks): nothing reads it and nothing but a writer removes it, so it stays through stop, start and restart; a member re-cloned from the golden VM does not have it, since a clone copies its source (the golden VM, through the clone's annotation filters), never the member it replaces |
//! | `sandbox.corral.dev/rdp-credentials: "<user>:<password>"` | the user name and password the VM's RDP server (guest port 3389) takes through NLA, read again for every RDP connection (the password may contain `:`); absent or not of that form: [`DEFAULT_RDP_USER`] `corral`, [`DEFAULT_RDP_PASSWORD`] `corral-sandbox` (see [`super::guests`]) |
//! | `sandbox.corral.dev/rdp-server: "xrdp"` | the VM's RDP server (guest port 3389) is xrdp in front of the VMI's Xvnc ([`super::xrdp`]): TLS without NLA and no login, with clipboard text both ways and the screen resized to the client's; absent or any other value: FreeRDP's shadow server, NLA only, no clipboard or resize. Read when the VMI's display starts (a change applies from the next VMI, e.g. after a restart) |
//!
//! The emulator writes VMI annotations for tests and debugging: [`USBREDIR_ATTACHED_ANNOTATION`],
//! [`SOFT_REBOOTS_ANNOTATION`] and, once a VMI's display runs, [`XVNC_DISPLAY_ANNOTATION`],
//! [`XVNC_PID_ANNOTATION`], [`XVNC_RFB_PORT_ANNOTATION`], [`RDP_PORT_ANNOTATION`] and
//! [`TYPED_TEXT_ANNOTATION`].

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::{Api, Client};

/// Name of the knobs ConfigMap (in namespace `kubevirt`).
pub const CONFIG_MAP: &str = "corral-sandbox-emulator";
/// VM annotation whose value the emulated virt-api returns as a 409 on start.
pub const REFUSE_START_ANNOTATION: &str = "sandbox.corral.dev/refuse-start";
/// VM annotation that makes its VMI unschedulable.
pub const UNSCHEDULABLE_ANNOTATION: &str = "sandbox.corral.dev/unschedulable";
/// VM annotation listing (comma-separated) volumes whose snapshots are disabled.
pub const SNAPSHOT_DISABLED_ANNOTATION: &str = "sandbox.corral.dev/snapshot-disabled";
/// VM annotation (`"true"`) that makes its running VMI report the condition `Paused`.
pub const PAUSED_ANNOTATION: &str = "sandbox.corral.dev/paused";
/// VM annotation listing (comma-separated) the guest TCP ports that answer; absent: 22 and 3389.
pub const GUEST_PORTS_ANNOTATION: &str = "sandbox.corral.dev/guest-ports";
/// VM annotation forcing answers of the stream subresources: `"vnc=503,portforward=500"`.
pub const FORCE_STATUS_ANNOTATION: &str = "sandbox.corral.dev/force-status";
/// VM annotation standing for the guest agent: absent, not connected; else the comma-separated
/// users logged in to the guest (`""`: none), as the `userlist` subresource reports them.
pub const GUEST_USERS_ANNOTATION: &str = "sandbox.corral.dev/guest-users";
/// VM annotation standing for "this VM's disk was written": kept through stop, start and
/// restart, absent on a fresh clone of the golden VM (see the table above).
pub const DISK_MARKER_ANNOTATION: &str = "sandbox.corral.dev/disk-marker";
/// VM annotation: the credentials of the VM's RDP server, `"<user>:<password>"` (split at the
/// first `:`); see [`rdp_credentials`].
pub const RDP_CREDENTIALS_ANNOTATION: &str = "sandbox.corral.dev/rdp-credentials";
/// VM annotation choosing the VM's RDP server: [`XRDP`] for xrdp, else FreeRDP's shadow server;
/// see [`rdp_server`].
pub const RDP_SERVER_ANNOTATION: &str = "sandbox.corral.dev/rdp-server";
/// The value of [`RDP_SERVER_ANNOTATION`] that chooses xrdp.
pub const XRDP: &str = "xrdp";
/// The RDP user name of a VM without [`RDP_CREDENTIALS_ANNOTATION`].
pub const DEFAULT_RDP_USER: &str = "corral";
/// The RDP password of a VM without [`RDP_CREDENTIALS_ANNOTATION`].
pub const DEFAULT_RDP_PASSWORD: &str = "corral-sandbox";
/// VMI annotation: how many usbredir streams are attached now (`"0"` to `"4"`).
pub const USBREDIR_ATTACHED_ANNOTATION: &str = "sandbox.corral.dev/usbredir-attached";
/// VMI annotation: how many soft reboots (the `softreboot` subresource) the VMI took (`"1"`, …),
/// absent before the first.
pub const SOFT_REBOOTS_ANNOTATION: &str = "sandbox.corral.dev/soft-reboots";
/// VMI annotation: the X display number of the VMI's Xvnc (`":3"`), once started.
pub const XVNC_DISPLAY_ANNOTATION: &str = "sandbox.corral.dev/xvnc-display";
/// VMI annotation: the pid of the VMI's Xvnc, once started.
pub const XVNC_PID_ANNOTATION: &str = "sandbox.corral.dev/xvnc-pid";
/// VMI annotation: the RFB port of the VMI's Xvnc on 127.0.0.1, once started.
pub const XVNC_RFB_PORT_ANNOTATION: &str = "sandbox.corral.dev/xvnc-rfbport";
/// VMI annotation: the port on 127.0.0.1 of the RDP server behind the VMI's guest port 3389,
/// once started.
pub const RDP_PORT_ANNOTATION: &str = "sandbox.corral.dev/rdp-port";
/// VMI annotation: the file (absolute path) where the typing sink window on the VMI's screen
/// records every character typed into it, once the display runs (see [`super::guests`]).
pub const TYPED_TEXT_ANNOTATION: &str = "sandbox.corral.dev/typed-text-file";
/// Guest ports open when a VM has no [`GUEST_PORTS_ANNOTATION`]: SSH and RDP.
pub const DEFAULT_GUEST_PORTS: &[u16] = &[22, 3389];
/// Codes [`FORCE_STATUS_ANNOTATION`] may force.
pub const FORCIBLE_CODES: &[u16] = &[404, 409, 500, 503, 504];

/// The open guest ports of a VM with these annotations: the comma-separated ports of
/// [`GUEST_PORTS_ANNOTATION`] (entries that are not port numbers are ignored; an empty value
/// opens none), else [`DEFAULT_GUEST_PORTS`].
pub fn guest_ports(annotations: &BTreeMap<String, String>) -> Vec<u16> {
    match annotations.get(GUEST_PORTS_ANNOTATION) {
        Some(list) => list
            .split(',')
            .filter_map(|p| p.trim().parse::<u16>().ok())
            .collect(),
        None => DEFAULT_GUEST_PORTS.to_vec(),
    }
}

/// The users [`GUEST_USERS_ANNOTATION`] reports logged in, trimmed, empty entries skipped;
/// `None` when the annotation is absent (the guest agent is not connected).
pub fn guest_users(annotations: &BTreeMap<String, String>) -> Option<Vec<String>> {
    annotations.get(GUEST_USERS_ANNOTATION).map(|list| {
        list.split(',')
            .map(str::trim)
            .filter(|u| !u.is_empty())
            .map(str::to_owned)
            .collect()
    })
}

/// The RDP user name and password of a VM with these annotations: [`RDP_CREDENTIALS_ANNOTATION`]
/// split at its first `:`, else [`DEFAULT_RDP_USER`] and [`DEFAULT_RDP_PASSWORD`]. A value with
/// no `:`, an empty user name, or a user name with a line break (it would break the SAM file)
/// counts as absent (logged). User names match exactly, case included (FreeRDP's SAM lookup
/// compares bytes, unlike Windows); any domain a client sends is accepted.
pub fn rdp_credentials(annotations: &BTreeMap<String, String>) -> (String, String) {
    let defaults = || (DEFAULT_RDP_USER.to_owned(), DEFAULT_RDP_PASSWORD.to_owned());
    let Some(value) = annotations.get(RDP_CREDENTIALS_ANNOTATION) else {
        return defaults();
    };
    match value.split_once(':') {
        Some((user, password)) if !user.is_empty() && !user.contains(['\n', '\r']) => {
            (user.to_owned(), password.to_owned())
        }
        _ => {
            tracing::warn!(
                annotation = RDP_CREDENTIALS_ANNOTATION,
                "not <user>:<password> with a one-line user name: the default RDP credentials apply"
            );
            defaults()
        }
    }
}

/// Which program serves a VM's guest port 3389 (see [`super::guests`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RdpServer {
    /// FreeRDP's `freerdp-shadow-cli`: NLA only, no clipboard, no resize.
    Shadow,
    /// xrdp in front of the VMI's Xvnc ([`super::xrdp`]): TLS, no login, clipboard, resize.
    Xrdp,
}

/// The RDP server of a VM with these annotations: [`RdpServer::Xrdp`] when
/// [`RDP_SERVER_ANNOTATION`] is [`XRDP`], else [`RdpServer::Shadow`].
pub fn rdp_server(annotations: &BTreeMap<String, String>) -> RdpServer {
    match annotations.get(RDP_SERVER_ANNOTATION).map(String::as_str) {
        Some(XRDP) => RdpServer::Xrdp,
        _ => RdpServer::Shadow,
    }
}

/// The code [`FORCE_STATUS_ANNOTATION`] forces for `subresource` (`vnc`, `screenshot`,
/// `portforward` or `usbredir`), if any; entries with other codes than [`FORCIBLE_CODES`] are
/// ignored.
pub fn forced_status(annotations: &BTreeMap<String, String>, subresource: &str) -> Option<u16> {
    annotations
        .get(FORCE_STATUS_ANNOTATION)?
        .split(',')
        .filter_map(|entry| entry.split_once('='))
        .filter(|(sub, _)| sub.trim() == subresource)
        .filter_map(|(_, code)| code.trim().parse::<u16>().ok())
        .find(|code| FORCIBLE_CODES.contains(code))
}

/// StorageClass name the emulator reports for every volume.
pub const STORAGE_CLASS: &str = "sandbox-local";

/// The emulation's current settings.
#[derive(Clone, Debug)]
pub struct Knobs {
    /// VMI creation to `Running`.
    pub start: Duration,
    /// Stopping VMI to gone.
    pub stop: Duration,
    /// Time in each clone phase.
    pub clone_step: Duration,
    /// Clone targets that stall: `name` (in the first phase) or `name:Phase`.
    pub stall_clones: Vec<String>,
    /// Clone targets that fail.
    pub fail_clones: Vec<String>,
}

impl Default for Knobs {
    fn default() -> Self {
        Knobs {
            start: Duration::from_millis(800),
            stop: Duration::from_millis(400),
            clone_step: Duration::from_millis(300),
            stall_clones: Vec::new(),
            fail_clones: Vec::new(),
        }
    }
}

impl Knobs {
    /// Whether a clone of `target` now in `phase` stalls there: a bare entry stalls it in any
    /// phase after the first, `target:Phase` only in `Phase`.
    pub fn stalls(&self, target: &str, phase: &str) -> bool {
        self.stall_clones
            .iter()
            .any(|entry| match entry.split_once(':') {
                Some((name, at)) => name == target && at == phase,
                None => entry == target && !phase.is_empty(),
            })
    }

    /// Reads the ConfigMap; a missing one or a missing key keeps the default.
    pub async fn read(client: &Client) -> Knobs {
        let api: Api<ConfigMap> =
            Api::namespaced(client.clone(), crate::bootstrap::KUBEVIRT_NAMESPACE);
        let data = match api.get_opt(CONFIG_MAP).await {
            Ok(Some(cm)) => cm.data.unwrap_or_default(),
            _ => BTreeMap::new(),
        };
        let mut knobs = Knobs::default();
        let millis = |key: &str, default: Duration| {
            data.get(key)
                .and_then(|v| v.trim().parse::<u64>().ok())
                .map_or(default, Duration::from_millis)
        };
        let list = |key: &str| -> Vec<String> {
            data.get(key)
                .map(|v| {
                    v.split(',')
                        .map(str::trim)
                        .filter(|s| !s.is_empty())
                        .map(str::to_owned)
                        .collect()
                })
                .unwrap_or_default()
        };
        knobs.start = millis("startMillis", knobs.start);
        knobs.stop = millis("stopMillis", knobs.stop);
        knobs.clone_step = millis("cloneStepMillis", knobs.clone_step);
        knobs.stall_clones = list("stallClones");
        knobs.fail_clones = list("failClones");
        knobs
    }
}
