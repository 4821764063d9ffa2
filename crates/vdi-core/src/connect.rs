//! Connect (SPEC "Connect"): which paths reach a member, and one call per action that opens
//! one — the same call for the app and the CLI, so they cannot disagree.
//!
//! **Paths.** VNC when its VMI runs with a graphics device, RDP when the guest answers on TCP
//! 3389, SSH when it answers on 22 — each with the reason when it is unavailable. Before any
//! stream is tried, SelfSubjectAccessReviews ask whether the identity may `get`
//! `virtualmachineinstances/vnc` and `/portforward`, so a path it may not open is listed with
//! the missing permission and no websocket is attempted. RDP and SSH are found by trying the
//! portforward upgrade: virt-api refuses a closed guest port before the upgrade (500 "dialing
//! VM").
//!
//! **Actions** ([`Connector`]: open a viewer, open RDP, save an `.rdp` file, forward ports,
//! SSH). Each takes its steps in one order, and stops at the first refusal:
//! 1. the input (names, the user) — no request;
//! 2. the helper program it needs (remote-viewer or TigerVNC, FreeRDP: [`crate::programs`]),
//!    and the folder of an `.rdp` file — no request;
//! 3. the cluster: the stream is opened once and closed (not running, paused, someone viewing,
//!    no permission, port closed: the refusal of [`stream::open`]);
//! 4. the local side: listening on 127.0.0.1 (a port in use), then starting the helper or
//!    writing the file — a failure here stops the forward it started.
//!
//! So a refusal leaves nothing behind: no session, nothing listening, no helper running.

use std::path::Path;

use kube::Client;
use kube::api::{Api, DynamicObject};
use kube::core::{ApiResource, GroupVersionKind};
use serde::Serialize;
use serde_json::Value;
use tokio::io::{AsyncRead, AsyncWrite};

use crate::error::{Error, ErrorKind, Result, is_status};
use crate::identity::{Permission, can_i_on};
use crate::programs::{self, HelperSearch, Launch};
use crate::session::{About, SessionKind, SessionView, Started, Supervisor, Target};
use crate::stream::{self, Subresource};
use crate::validate;

/// The guest's RDP port.
pub const RDP_PORT: u16 = 3389;
/// The guest's SSH port.
pub const SSH_PORT: u16 = 22;

/// A way to reach a desktop.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "bindings", derive(specta::Type))]
#[serde(rename_all = "camelCase")]
pub enum PathKind {
    /// The VM's console (VNC), in the app or a native viewer.
    Vnc,
    /// Remote Desktop to the guest's port 3389, through a forward.
    Rdp,
    /// SSH to the guest's port 22, through a forward.
    Ssh,
}

/// One path to a member, available or not.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "bindings", derive(specta::Type))]
#[serde(rename_all = "camelCase")]
pub struct ConnectPath {
    /// Which path.
    pub kind: PathKind,
    /// Whether it can be opened now.
    pub available: bool,
    /// Why not (not running, paused, no permission — naming it —, port closed, …).
    pub reason: Option<String>,
}

/// Every path to a member.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "bindings", derive(specta::Type))]
#[serde(rename_all = "camelCase")]
pub struct MemberPaths {
    /// Namespace of the member.
    pub namespace: String,
    /// The member.
    pub member: String,
    /// The VMI's phase (`Running`, …), or `null` when it has none (not running).
    pub phase: Option<String>,
    /// VNC, RDP and SSH, in that order.
    pub paths: Vec<ConnectPath>,
}

impl MemberPaths {
    /// The path of `kind`.
    pub fn path(&self, kind: PathKind) -> Option<&ConnectPath> {
        self.paths.iter().find(|p| p.kind == kind)
    }
}

fn vmi_api(client: &Client, namespace: &str) -> Api<DynamicObject> {
    let resource = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("kubevirt.io", "v1", "VirtualMachineInstance"),
        "virtualmachineinstances",
    );
    Api::namespaced_with(client.clone(), namespace, &resource)
}

fn permission(subresource: &'static str) -> Permission {
    Permission {
        verb: "get",
        group: "subresources.kubevirt.io",
        resource: "virtualmachineinstances",
        subresource: Some(subresource),
    }
}

fn unavailable(kind: PathKind, reason: impl Into<String>) -> ConnectPath {
    ConnectPath {
        kind,
        available: false,
        reason: Some(reason.into()),
    }
}

fn available(kind: PathKind) -> ConnectPath {
    ConnectPath {
        kind,
        available: true,
        reason: None,
    }
}

/// Without a VMI, tells a stopped VM from a name that is no VM at all (one more request,
/// only when nothing runs).
///
/// Errors: [`Error::Rejected`] `NotFound` naming the VM and the namespace; the VM cannot be
/// read (but a 403 passes: the caller then says only that nothing runs).
async fn no_such_vm(client: &Client, namespace: &str, member: &str) -> Result<()> {
    let vms: Api<crate::resources::VirtualMachine> = Api::namespaced(client.clone(), namespace);
    match vms.get_opt(member).await {
        Ok(Some(_)) => Ok(()),
        Ok(None) => Err(Error::rejected(
            ErrorKind::NotFound,
            format!("there is no VirtualMachine \"{member}\" in namespace \"{namespace}\""),
            format!(
                "check the name and the namespace (-n); `corral-vdi pool list -n {namespace}` \
                 lists the members"
            ),
        )),
        // Who may not read VMs still learns that nothing runs.
        Err(e) if is_status(&e, 403) => Ok(()),
        Err(e) => Err(Error::kube(
            format!("read VirtualMachine {member} in namespace \"{namespace}\""),
            e,
        )),
    }
}

/// Works out which paths reach `member` in `namespace`, with `client` (a
/// [`stream::stream_client`]: the probes must not be retried).
///
/// Errors: [`Error::Invalid`] for a bad name (no request); [`Error::Rejected`] `NotFound` when
/// there is no such VirtualMachine; the VMI cannot be read (403, the cluster unreachable).
pub async fn paths(client: &Client, namespace: &str, member: &str) -> Result<MemberPaths> {
    validate::namespace(namespace)?;
    validate::member_name(member)?;
    let vmis = vmi_api(client, namespace);
    let wanted = [permission("vnc"), permission("portforward")];
    let (vmi, allowed) = tokio::join!(
        vmis.get_opt(member),
        can_i_on(client, namespace, Some(member), &wanted)
    );
    let vmi = match vmi {
        Ok(vmi) => vmi,
        Err(e) if is_status(&e, 404) => None,
        Err(e) => {
            return Err(Error::kube(
                format!("read VirtualMachineInstance {member} in namespace \"{namespace}\""),
                e,
            ));
        }
    };
    let phase = vmi
        .as_ref()
        .and_then(|v| v.data.pointer("/status/phase"))
        .and_then(Value::as_str)
        .map(str::to_owned);
    if vmi.is_none() {
        no_such_vm(client, namespace, member).await?;
    }
    let all = [PathKind::Vnc, PathKind::Rdp, PathKind::Ssh];
    let Some(vmi) = vmi.filter(|_| phase.as_deref() == Some("Running")) else {
        let why = match &phase {
            None => format!("{member} is not running — start it"),
            Some(p) => format!("{member} is {p}, not Running — wait for it to run"),
        };
        return Ok(MemberPaths {
            namespace: namespace.to_owned(),
            member: member.to_owned(),
            phase,
            paths: all.iter().map(|k| unavailable(*k, why.clone())).collect(),
        });
    };
    let paused = vmi
        .data
        .pointer("/status/conditions")
        .and_then(Value::as_array)
        .is_some_and(|cs| {
            cs.iter()
                .any(|c| c["type"] == "Paused" && c["status"] == "True")
        });
    let devices = vmi
        .data
        .pointer("/spec/domain/devices")
        .cloned()
        .unwrap_or(Value::Null);
    let graphics = devices.get("autoattachGraphicsDevice") != Some(&Value::Bool(false));
    let interfaces = devices
        .get("interfaces")
        .and_then(Value::as_array)
        .is_some_and(|i| !i.is_empty());

    let vnc = if !allowed[0].allowed {
        unavailable(PathKind::Vnc, allowed[0].reason.clone().unwrap_or_default())
    } else if !graphics {
        unavailable(
            PathKind::Vnc,
            format!("{member} has no graphics device (autoattachGraphicsDevice: false)"),
        )
    } else {
        available(PathKind::Vnc)
    };
    let forward = |kind: PathKind, port: u16| {
        let (allowed, vmis) = (&allowed[1], client);
        async move {
            if !allowed.allowed {
                return unavailable(kind, allowed.reason.clone().unwrap_or_default());
            }
            if paused {
                return unavailable(kind, format!("{member} is paused — unpause it"));
            }
            if !interfaces {
                return unavailable(kind, format!("{member} has no network interface"));
            }
            match stream::open(vmis, namespace, member, Subresource::PortForward { port }).await {
                Ok(mut ws) => {
                    let _ = ws.close(None).await;
                    available(kind)
                }
                Err(Error::Stream(refusal)) => unavailable(kind, refusal.message),
                Err(e) => unavailable(kind, e.to_string()),
            }
        }
    };
    let (rdp, ssh) = tokio::join!(
        forward(PathKind::Rdp, RDP_PORT),
        forward(PathKind::Ssh, SSH_PORT)
    );
    Ok(MemberPaths {
        namespace: namespace.to_owned(),
        member: member.to_owned(),
        phase,
        paths: vec![vnc, rdp, ssh],
    })
}

/// What "Save .rdp file" made: the forward's session and the file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "bindings", derive(specta::Type))]
#[serde(rename_all = "camelCase")]
pub struct RdpFileSaved {
    /// The forward to guest port 3389 the file points at (ends with the session).
    pub session: SessionView,
    /// Where the file was written.
    pub path: String,
}

/// What "SSH" opened: the forward, the command line to copy, and whether a terminal runs it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "bindings", derive(specta::Type))]
#[serde(rename_all = "camelCase")]
pub struct SshOpened {
    /// The forward to guest port 22.
    pub session: SessionView,
    /// `ssh -p PORT -o HostKeyAlias=vmi.MEMBER.NAMESPACE user@127.0.0.1`, to copy (each word
    /// quoted for a shell: [`programs::ssh_line`]).
    pub command_line: String,
    /// Whether a terminal was found and started with it.
    pub terminal: bool,
}

/// A port to forward, as `port-forward` takes it: `REMOTE` (a free local port) or
/// `LOCAL:REMOTE`, each 1 to 65535.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PortSpec {
    /// The local port on 127.0.0.1, or `None` for a free one.
    pub local: Option<u16>,
    /// The guest's port.
    pub remote: u16,
}

impl std::str::FromStr for PortSpec {
    type Err = Error;

    /// kubectl's forms: `LOCAL:REMOTE`; `:REMOTE` and `0:REMOTE` for any free local port.
    /// A bare `REMOTE` also takes a free local port (kubectl would listen on the same number,
    /// which for a guest's 22 or 3389 is seldom free and often privileged on the workstation).
    ///
    /// Errors: [`Error::Invalid`] naming the text and the forms it may take.
    fn from_str(spec: &str) -> Result<Self> {
        let bad = || {
            Error::invalid(
                format!("\"{spec}\" is not a port or LOCAL:REMOTE pair"),
                "write ports like 22, 2222:22, :22 or 0:22 (any free local port); each 1 to \
                 65535",
            )
        };
        let port = |p: &str| p.parse::<u16>().ok().filter(|p| *p != 0).ok_or_else(bad);
        match spec.split_once(':') {
            Some(("" | "0", remote)) => Ok(Self {
                local: None,
                remote: port(remote)?,
            }),
            Some((local, remote)) => Ok(Self {
                local: Some(port(local)?),
                remote: port(remote)?,
            }),
            None => Ok(Self {
                local: None,
                remote: port(spec)?,
            }),
        }
    }
}

/// What every connect action acts with: a stream client, the supervisor that keeps every
/// forward and helper an action starts (the app's one, or the CLI command's own), and where
/// helper programs are looked for. Cheap to make per action (clones of shared handles).
#[derive(Clone)]
pub struct Connector {
    /// A [`stream::stream_client`]: the probes must not be retried.
    pub client: Client,
    /// Keeps the sessions the actions start.
    pub supervisor: Supervisor,
    /// Where helper programs are found ([`HelperSearch::on_path`] in the app and the CLI).
    pub helpers: HelperSearch,
}

/// The names every action checks first, before any request (DNS labels).
///
/// Errors: [`Error::Invalid`] naming the bad one.
fn check_names(namespace: &str, member: &str) -> Result<()> {
    validate::namespace(namespace)?;
    validate::member_name(member)
}

impl Connector {
    /// A connector on `client` whose sessions `supervisor` keeps, finding helpers on `PATH`.
    pub fn new(client: Client, supervisor: Supervisor) -> Self {
        Self {
            client,
            supervisor,
            helpers: HelperSearch::on_path(),
        }
    }

    /// Opens `member`'s console in the platform's viewer (remote-viewer, else TigerVNC)
    /// through a VNC forward on 127.0.0.1:`local_port` (default: a free port); `take_over`
    /// disconnects whoever views it now, else someone viewing is a refusal.
    ///
    /// Errors, in this order: a bad name ([`Error::Invalid`]); no viewer installed
    /// (`NotFound`, with the packages); the stream's refusal ([`Error::Stream`]); the port in
    /// use; the viewer cannot start (the forward is stopped).
    pub async fn open_viewer(
        &self,
        namespace: &str,
        member: &str,
        take_over: bool,
        local_port: Option<u16>,
    ) -> Result<SessionView> {
        check_names(namespace, member)?;
        let viewer = self.helpers.vnc_viewer()?;
        let target = Target::Vnc {
            preserve_session: !take_over,
        };
        let started = self
            .forward(namespace, member, SessionKind::Viewer, target, local_port)
            .await?;
        let title = format!("{member} ({namespace})");
        self.attach(started, viewer.launch(started.local.port(), &title))
    }

    /// Opens RDP to `member` with FreeRDP through a forward to guest port 3389 on
    /// 127.0.0.1:`local_port` (default: a free port).
    ///
    /// Errors, in this order: a bad name; no RDP client installed (`NotFound`, with the
    /// packages and the `.rdp` alternative); the stream's refusal (port closed, not running,
    /// …); the port in use; the client cannot start (the forward is stopped).
    pub async fn open_rdp(
        &self,
        namespace: &str,
        member: &str,
        local_port: Option<u16>,
    ) -> Result<SessionView> {
        check_names(namespace, member)?;
        let client = self.helpers.rdp_client()?;
        let started = self.forward_rdp(namespace, member, local_port).await?;
        self.attach(started, client.launch(started.local.port(), member))
    }

    /// Starts a forward to `member`'s port 3389 on 127.0.0.1:`local_port` (default: a free
    /// port) and writes `path`, an `.rdp` file pointing at it, for another RDP client.
    ///
    /// Errors, in this order: a bad name; `path`'s folder does not exist ([`Error::Invalid`]);
    /// the stream's refusal; the port in use; the file cannot be written (the forward is
    /// stopped).
    pub async fn save_rdp_file(
        &self,
        namespace: &str,
        member: &str,
        local_port: Option<u16>,
        path: &Path,
    ) -> Result<RdpFileSaved> {
        check_names(namespace, member)?;
        let cannot_write = |why: &dyn std::fmt::Display| {
            Error::invalid(
                format!("cannot write {}: {why}", path.display()),
                "pick a folder you may write to for the .rdp file",
            )
        };
        if let Some(folder) = path.parent().filter(|f| !f.as_os_str().is_empty())
            && !folder.is_dir()
        {
            return Err(cannot_write(&format_args!(
                "there is no folder {}",
                folder.display()
            )));
        }
        let started = self.forward_rdp(namespace, member, local_port).await?;
        if let Err(e) = std::fs::write(path, programs::rdp_file(started.local.port())) {
            self.supervisor.stop(started.id);
            return Err(cannot_write(&e));
        }
        Ok(RdpFileSaved {
            session: self.view(started.id)?,
            path: path.display().to_string(),
        })
    }

    /// Starts a forward to `member`'s port 22 for `user` (a guest login:
    /// [`validate::guest_login`]), and ssh in a terminal when one is installed (none is not a
    /// refusal: the line to copy is returned either way), its host key known under the alias
    /// the CLI's `ssh` uses too ([`programs::ssh_host_alias`]).
    ///
    /// Errors, in this order: a bad name or guest login ([`Error::Invalid`]); the stream's
    /// refusal; no local port.
    pub async fn open_ssh(&self, namespace: &str, member: &str, user: &str) -> Result<SshOpened> {
        check_names(namespace, member)?;
        validate::guest_login(user)?;
        let started = self
            .forward(
                namespace,
                member,
                SessionKind::Ssh,
                Target::Port(SSH_PORT),
                None,
            )
            .await?;
        let port = started.local.port();
        let mut ssh = vec!["ssh".to_owned()];
        ssh.extend(programs::ssh_args(port, user, namespace, member));
        let terminal = self.helpers.terminal().is_some_and(|terminal| {
            let launch = terminal.launch(&ssh);
            self.supervisor
                .attach_helper(started.id, &launch.program, &launch.args, None)
                .is_ok()
        });
        Ok(SshOpened {
            session: self.view(started.id)?,
            command_line: programs::ssh_line(port, user, namespace, member),
            terminal,
        })
    }

    /// Forwards 127.0.0.1:`local_port` (default: a free port) to `target` on `member`, as a
    /// session of `kind`, with no helper: the stream is opened once first, so a refusal is
    /// said now, before anything listens.
    ///
    /// Errors, in this order: a bad name; the stream's refusal; the port in use.
    pub async fn forward(
        &self,
        namespace: &str,
        member: &str,
        kind: SessionKind,
        target: Target,
        local_port: Option<u16>,
    ) -> Result<Started> {
        check_names(namespace, member)?;
        self.probe(namespace, member, target).await?;
        self.supervisor
            .start_forward(
                self.client.clone(),
                namespace,
                member,
                kind,
                target,
                local_port,
            )
            .await
    }

    /// Forwards each of `ports` of `member` (sessions of kind `Forward`): every guest port is
    /// tried first, then each listens.
    ///
    /// Errors, in this order: a bad name, or a local port given twice ([`distinct_local_ports`]),
    /// before any request; the first stream refused; a local port in use (the forwards already
    /// listening are stopped).
    pub async fn forward_ports(
        &self,
        namespace: &str,
        member: &str,
        ports: &[PortSpec],
    ) -> Result<Vec<Started>> {
        check_names(namespace, member)?;
        distinct_local_ports(ports)?;
        for spec in ports {
            self.probe(namespace, member, Target::Port(spec.remote))
                .await?;
        }
        let mut started: Vec<Started> = Vec::with_capacity(ports.len());
        for spec in ports {
            let forward = self
                .supervisor
                .start_forward(
                    self.client.clone(),
                    namespace,
                    member,
                    SessionKind::Forward,
                    Target::Port(spec.remote),
                    spec.local,
                )
                .await;
            match forward {
                Ok(s) => started.push(s),
                Err(e) => {
                    for s in &started {
                        self.supervisor.stop(s.id);
                    }
                    return Err(e);
                }
            }
        }
        Ok(started)
    }

    /// Bridges `member`'s guest `port` to `local` (a reader and a writer: stdin/stdout for
    /// ssh's ProxyCommand) as a session that ends with the stream. Returns its id.
    ///
    /// Errors, in this order: a bad name; the stream's refusal.
    pub async fn bridge<R, W>(
        &self,
        namespace: &str,
        member: &str,
        port: u16,
        local: (R, W),
    ) -> Result<u32>
    where
        R: AsyncRead + Unpin + Send + 'static,
        W: AsyncWrite + Unpin + Send + 'static,
    {
        check_names(namespace, member)?;
        let ws = stream::open(
            &self.client,
            namespace,
            member,
            Subresource::PortForward { port },
        )
        .await?;
        Ok(self.supervisor.start_bridge(
            ws,
            local,
            About {
                namespace: namespace.to_owned(),
                member: member.to_owned(),
                kind: SessionKind::Forward,
                target: format!("port {port}"),
            },
        ))
    }

    /// [`Connector::forward`] to guest port 3389, as an RDP session.
    async fn forward_rdp(
        &self,
        namespace: &str,
        member: &str,
        local_port: Option<u16>,
    ) -> Result<Started> {
        let rdp = Target::Port(RDP_PORT);
        self.forward(namespace, member, SessionKind::Rdp, rdp, local_port)
            .await
    }

    /// Opens `target`'s stream once and closes it: the cluster's refusal, if any, now.
    async fn probe(&self, namespace: &str, member: &str, target: Target) -> Result<()> {
        let probe = stream::open(&self.client, namespace, member, target.subresource()).await?;
        drop(probe);
        Ok(())
    }

    /// Starts `launch` as the helper of `started`; stops the forward if it cannot start.
    fn attach(&self, started: Started, launch: Launch) -> Result<SessionView> {
        if let Err(e) =
            self.supervisor
                .attach_helper(started.id, &launch.program, &launch.args, launch.stdin)
        {
            self.supervisor.stop(started.id);
            return Err(e);
        }
        self.view(started.id)
    }

    /// Session `id` as shown.
    ///
    /// Errors: it is gone from the list already (ended and cleared at once).
    fn view(&self, id: u32) -> Result<SessionView> {
        self.supervisor.get(id).ok_or_else(|| {
            Error::rejected(
                ErrorKind::Other,
                format!("session {id} ended at once"),
                "open it again; if it ends again, the log says why",
            )
        })
    }
}

/// How the CLI's `ssh` reaches `member`: ssh itself with `proxy` as its ProxyCommand (an
/// argument vector bridging stdin/stdout to the guest's port 22), `login` (a guest login:
/// [`validate::guest_login`]) and `extra` (ssh's own options and command), the host key known
/// under [`programs::ssh_host_alias`].
///
/// Errors, in this order: a bad name or login ([`Error::Invalid`]); ssh not installed
/// (`NotFound`, with its packages). No request: the ProxyCommand meets the cluster's refusals.
pub fn ssh_through_proxy(
    helpers: &HelperSearch,
    namespace: &str,
    member: &str,
    login: Option<&str>,
    proxy: &[String],
    extra: &[String],
) -> Result<Launch> {
    check_names(namespace, member)?;
    if let Some(login) = login {
        validate::guest_login(login)?;
    }
    let ssh = helpers.ssh()?;
    Ok(Launch {
        program: ssh.display().to_string(),
        args: programs::ssh_proxy_args(proxy, namespace, member, login, extra),
        stdin: None,
    })
}

/// Refuses `ports` that name one local port twice (`2222:22 2222:3389`): the second could never
/// listen, and the first would be stopped with it.
///
/// Errors: [`Error::Invalid`] naming the port and both forwards.
fn distinct_local_ports(ports: &[PortSpec]) -> Result<()> {
    for (i, spec) in ports.iter().enumerate() {
        let Some(local) = spec.local else { continue };
        if let Some(other) = ports[..i].iter().find(|p| p.local == Some(local)) {
            return Err(Error::invalid(
                format!(
                    "local port {local} is given twice ({local}:{} and {local}:{}); nothing was \
                     started",
                    other.remote, spec.remote
                ),
                "give each forward its own local port, or :REMOTE for any free one",
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::{PortSpec, distinct_local_ports};

    #[test]
    fn a_local_port_given_twice_is_refused_and_free_ones_never_clash() {
        let specs =
            |list: &[&str]| -> Vec<PortSpec> { list.iter().map(|s| s.parse().unwrap()).collect() };
        let err = distinct_local_ports(&specs(&["2222:22", "3390:3389", "2222:3389"]))
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("local port 2222 is given twice (2222:22 and 2222:3389)"),
            "{err}"
        );
        assert!(distinct_local_ports(&specs(&["22", ":22", "0:3389", "2222:22"])).is_ok());
    }

    #[test]
    fn ports_parse() {
        let parse = |s: &str| s.parse::<PortSpec>().map(|p| (p.local, p.remote));
        assert_eq!(parse("22").unwrap(), (None, 22));
        assert_eq!(parse("2222:22").unwrap(), (Some(2222), 22));
        // kubectl's "any free local port".
        assert_eq!(parse(":22").unwrap(), (None, 22));
        assert_eq!(parse("0:22").unwrap(), (None, 22));
        for bad in [
            "", "0", "x", "1:70000", "a:22", ":", "0:", ":0", "00:", "-1:22", "22:",
        ] {
            assert!(parse(bad).is_err(), "{bad}");
        }
    }
}
