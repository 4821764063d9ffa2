//! Which paths reach a member (SPEC "Connect"): VNC when its VMI runs with a graphics device,
//! RDP when the guest answers on TCP 3389, SSH when it answers on 22 — each with the reason
//! when it is unavailable — and the platform's own clients that open them (remote-viewer or
//! TigerVNC, FreeRDP, ssh), always as argument vectors.
//!
//! Before any stream is tried, SelfSubjectAccessReviews ask whether the identity may `get`
//! `virtualmachineinstances/vnc` and `/portforward`, so a path it may not open is listed with
//! the missing permission and no websocket is attempted. RDP and SSH are found by trying the
//! portforward upgrade: virt-api refuses a closed guest port before the upgrade (500 "dialing
//! VM").

use std::path::PathBuf;

use kube::Client;
use kube::api::{Api, DynamicObject};
use kube::core::{ApiResource, GroupVersionKind};
use serde::Serialize;
use serde_json::Value;
use ts_rs::TS;

use crate::error::{Error, Result, is_status};
use crate::identity::{Permission, can_i};
use crate::stream::{self, Subresource};
use crate::validate;

/// The guest's RDP port.
pub const RDP_PORT: u16 = 3389;
/// The guest's SSH port.
pub const SSH_PORT: u16 = 22;

/// A way to reach a desktop.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, TS, specta::Type)]
#[serde(rename_all = "camelCase")]
#[ts(export)]
pub enum PathKind {
    /// The VM's console (VNC), in the app or a native viewer.
    Vnc,
    /// Remote Desktop to the guest's port 3389, through a forward.
    Rdp,
    /// SSH to the guest's port 22, through a forward.
    Ssh,
}

/// One path to a member, available or not.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, TS, specta::Type)]
#[serde(rename_all = "camelCase")]
#[ts(export)]
pub struct ConnectPath {
    /// Which path.
    pub kind: PathKind,
    /// Whether it can be opened now.
    pub available: bool,
    /// Why not (not running, paused, no permission — naming it —, port closed, …).
    pub reason: Option<String>,
}

/// Every path to a member.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, TS, specta::Type)]
#[serde(rename_all = "camelCase")]
#[ts(export)]
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
            crate::error::ErrorKind::NotFound,
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
    let (vmi, allowed) = tokio::join!(vmis.get_opt(member), can_i(client, namespace, &wanted));
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

/// Where to get a helper program, by platform: the Debian and Fedora packages, and the
/// alternatives.
pub fn install_hint(program: &str) -> String {
    match program {
        "remote-viewer" => "install virt-viewer (Debian/Ubuntu: apt install virt-viewer; Fedora: \
                            dnf install virt-viewer), or TigerVNC's viewer; or use the console in \
                            the app"
            .to_owned(),
        "vncviewer" => "install TigerVNC's viewer (Debian/Ubuntu: apt install tigervnc-viewer; \
                        Fedora: dnf install tigervnc), or virt-viewer; or use the console in the app"
            .to_owned(),
        "xfreerdp" | "xfreerdp3" => "install FreeRDP (Debian/Ubuntu: apt install freerdp2-x11; \
                                     Fedora: dnf install freerdp), or save an .rdp file for \
                                     another RDP client (on Windows, mstsc)"
            .to_owned(),
        "ssh" => "install the OpenSSH client (Debian/Ubuntu: apt install openssh-client; Fedora: \
                  dnf install openssh-clients)"
            .to_owned(),
        "usbredirect" => "install usbredirect (Debian 12+/Ubuntu: apt install usbredirect; \
                          Fedora: dnf install usbredir-tools); on Windows it comes with \
                          virt-viewer's installer, with UsbDk"
            .to_owned(),
        other => format!("install {other} and make sure it is on PATH"),
    }
}

/// The first of `programs` found on PATH, with its full path.
pub fn find_program(programs: &[&str]) -> Option<(String, PathBuf)> {
    programs
        .iter()
        .find_map(|p| which::which(p).ok().map(|path| ((*p).to_owned(), path)))
}

/// How to open the VNC console on `port` in the platform's viewer: remote-viewer (the `.vv`
/// settings fed on stdin) if installed, else TigerVNC's `vncviewer 127.0.0.1::PORT` (two
/// colons: TigerVNC reads `host:N` with N < 100 as a display number).
///
/// Errors: [`Error::Rejected`] (`NotFound`) naming both viewers and their packages.
pub fn viewer_command(port: u16, title: &str) -> Result<Launch> {
    match find_program(&["remote-viewer", "vncviewer"]) {
        Some((name, path)) if name == "remote-viewer" => Ok(Launch {
            program: path.display().to_string(),
            args: vec!["-".to_owned()],
            stdin: Some(
                format!(
                    "[virt-viewer]\ntype=vnc\nhost=127.0.0.1\nport={port}\ntitle={title}\n\
                     delete-this-file=1\n"
                )
                .into_bytes(),
            ),
        }),
        Some((_, path)) => Ok(Launch {
            program: path.display().to_string(),
            args: vec![format!("127.0.0.1::{port}")],
            stdin: None,
        }),
        None => Err(Error::rejected(
            crate::error::ErrorKind::NotFound,
            "no VNC viewer is installed (neither remote-viewer nor vncviewer is on PATH)",
            install_hint("remote-viewer"),
        )),
    }
}

/// How to open RDP on `port` with FreeRDP (`xfreerdp3`, else `xfreerdp`); the certificate
/// prompt is left to the client.
///
/// Errors: [`Error::Rejected`] (`NotFound`) with the packages and the `.rdp` alternative.
pub fn rdp_command(port: u16, title: &str) -> Result<Launch> {
    let (_, path) = find_program(&["xfreerdp3", "xfreerdp"]).ok_or_else(|| {
        Error::rejected(
            crate::error::ErrorKind::NotFound,
            "no RDP client is installed (xfreerdp is not on PATH)",
            install_hint("xfreerdp"),
        )
    })?;
    Ok(Launch {
        program: path.display().to_string(),
        args: vec![
            format!("/v:127.0.0.1:{port}"),
            format!("/t:{title}"),
            "/dynamic-resolution".to_owned(),
            "+clipboard".to_owned(),
        ],
        stdin: None,
    })
}

/// An `.rdp` file for other RDP clients (mstsc, Remmina) reaching `127.0.0.1:port`.
pub fn rdp_file(port: u16) -> String {
    format!(
        "full address:s:127.0.0.1:{port}\r\nprompt for credentials:i:1\r\n\
         administrative session:i:0\r\nscreen mode id:i:1\r\n"
    )
}

/// The name ssh knows `member`'s host key under: `vmi.MEMBER.NAMESPACE`, whatever local port
/// or ProxyCommand reaches it (without it, a forward's new port every time looks like a new
/// host to ssh and trains users to accept new host keys). `member` and `namespace` are checked
/// names (DNS labels), so the alias needs no quoting.
pub fn ssh_host_alias(namespace: &str, member: &str) -> String {
    format!("vmi.{member}.{namespace}")
}

/// ssh's arguments for `user` on `member` through a forward on 127.0.0.1:`port`, its host key
/// known under [`ssh_host_alias`]: `-p PORT -o HostKeyAlias=vmi.MEMBER.NS USER@127.0.0.1`.
pub fn ssh_args(port: u16, user: &str, namespace: &str, member: &str) -> Vec<String> {
    vec![
        "-p".to_owned(),
        port.to_string(),
        "-o".to_owned(),
        format!("HostKeyAlias={}", ssh_host_alias(namespace, member)),
        format!("{user}@127.0.0.1"),
    ]
}

/// The command line to copy for SSH through a forward on `port`: `ssh` and [`ssh_args`].
pub fn ssh_line(port: u16, user: &str, namespace: &str, member: &str) -> String {
    format!("ssh {}", ssh_args(port, user, namespace, member).join(" "))
}

/// A terminal emulator found on PATH, and the arguments that make it run `command` (an
/// argument vector).
pub fn terminal_command(command: &[String]) -> Option<Launch> {
    let (name, path) = find_program(&[
        "x-terminal-emulator",
        "gnome-terminal",
        "konsole",
        "xfce4-terminal",
        "xterm",
    ])?;
    let mut args = Vec::new();
    match name.as_str() {
        "gnome-terminal" => args.push("--".to_owned()),
        "xfce4-terminal" => args.push("-x".to_owned()),
        _ => args.push("-e".to_owned()),
    }
    args.extend(command.iter().cloned());
    Some(Launch {
        program: path.display().to_string(),
        args,
        stdin: None,
    })
}

/// What "Save .rdp file" made: the forward's session and the file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, TS, specta::Type)]
#[serde(rename_all = "camelCase")]
#[ts(export)]
pub struct RdpFileSaved {
    /// The forward to guest port 3389 the file points at (ends with the session).
    pub session: crate::session::SessionView,
    /// Where the file was written.
    pub path: String,
}

/// What "SSH" opened: the forward, the command line to copy, and whether a terminal runs it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, TS, specta::Type)]
#[serde(rename_all = "camelCase")]
#[ts(export)]
pub struct SshOpened {
    /// The forward to guest port 22.
    pub session: crate::session::SessionView,
    /// `ssh -p PORT -o HostKeyAlias=vmi.MEMBER.NAMESPACE user@127.0.0.1`, to copy.
    pub command_line: String,
    /// Whether a terminal was found and started with it.
    pub terminal: bool,
}

/// A helper program to start: its path, arguments and what to feed its stdin.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Launch {
    /// Full path of the program.
    pub program: String,
    /// Its arguments (an argument vector: nothing is interpreted by a shell).
    pub args: Vec<String>,
    /// Bytes for its stdin, if any.
    pub stdin: Option<Vec<u8>>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rdp_files_and_ssh_lines() {
        let rdp = rdp_file(40123);
        assert!(rdp.starts_with("full address:s:127.0.0.1:40123\r\n"));
        assert_eq!(
            ssh_line(40123, "alice", "corral-vms", "desk-1"),
            "ssh -p 40123 -o HostKeyAlias=vmi.desk-1.corral-vms alice@127.0.0.1"
        );
    }

    #[test]
    fn every_helper_has_a_hint() {
        for program in [
            "remote-viewer",
            "vncviewer",
            "xfreerdp",
            "ssh",
            "usbredirect",
        ] {
            let hint = install_hint(program);
            assert!(
                hint.contains("apt install") && hint.contains("dnf install"),
                "{program}: {hint}"
            );
        }
    }
}
