//! The helper programs a connect starts on this machine — remote-viewer or TigerVNC's viewer,
//! FreeRDP, ssh, a terminal emulator, usbredirect —: where they are found, what to install when
//! one is missing, and the argument vectors that start them (never shell strings; the shell
//! lines — ssh's ProxyCommand and the SSH line to copy — are quoted word by word with
//! [`shell_quote`]).
//!
//! A bottom module: it knows no cluster, stream or session, so [`crate::session`] (which runs
//! helpers) and [`crate::usb`] use it without depending on [`crate::connect`].

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use crate::error::{Error, ErrorKind, Result};

/// Where helper programs are looked for: the process's `PATH` (what the app and the CLI use),
/// or a given list of folders in `PATH`'s format (tests, with stand-ins or with none).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HelperSearch {
    /// The folders, `PATH`-style; `None` for the process's `PATH`.
    dirs: Option<OsString>,
}

impl HelperSearch {
    /// Looks on the process's `PATH`.
    pub fn on_path() -> Self {
        Self::default()
    }

    /// Looks only in `dirs`, a list in `PATH`'s format (`/a:/b`).
    pub fn in_dirs(dirs: impl Into<OsString>) -> Self {
        Self {
            dirs: Some(dirs.into()),
        }
    }

    /// The first of `programs` found, with its full path.
    pub fn find(&self, programs: &[&str]) -> Option<(String, PathBuf)> {
        programs.iter().find_map(|p| {
            let found = match &self.dirs {
                None => which::which(p),
                Some(dirs) => which::which_in(p, Some(dirs), Path::new("/")),
            };
            found.ok().map(|path| ((*p).to_owned(), path))
        })
    }

    /// The platform's VNC viewer: remote-viewer if installed, else TigerVNC's `vncviewer`.
    ///
    /// Errors: [`Error::Rejected`] `NotFound` naming both viewers and their packages.
    pub fn vnc_viewer(&self) -> Result<VncViewer> {
        match self.find(&["remote-viewer", "vncviewer"]) {
            Some((name, path)) if name == "remote-viewer" => Ok(VncViewer::RemoteViewer(path)),
            Some((_, path)) => Ok(VncViewer::TigerVnc(path)),
            None => Err(Error::rejected(
                ErrorKind::NotFound,
                "no VNC viewer is installed (neither remote-viewer nor vncviewer is on PATH)",
                install_hint("remote-viewer"),
            )),
        }
    }

    /// FreeRDP: `xfreerdp3`, else `xfreerdp`.
    ///
    /// Errors: [`Error::Rejected`] `NotFound` with the packages and the `.rdp` alternative.
    pub fn rdp_client(&self) -> Result<RdpClient> {
        self.find(&["xfreerdp3", "xfreerdp"])
            .map(|(_, path)| RdpClient(path))
            .ok_or_else(|| {
                Error::rejected(
                    ErrorKind::NotFound,
                    "no RDP client is installed (xfreerdp is not on PATH)",
                    install_hint("xfreerdp"),
                )
            })
    }

    /// The OpenSSH client.
    ///
    /// Errors: [`Error::Rejected`] `NotFound` with its packages.
    pub fn ssh(&self) -> Result<PathBuf> {
        self.required("ssh")
    }

    /// `usbredirect`, which takes a local USB device to a desktop ([`crate::usb`]).
    ///
    /// Errors: [`Error::Rejected`] `NotFound` with its packages.
    pub fn usbredirect(&self) -> Result<PathBuf> {
        self.required("usbredirect")
    }

    /// `program`, which has no alternative.
    ///
    /// Errors: [`Error::Rejected`] `NotFound` with its [`install_hint`].
    fn required(&self, program: &str) -> Result<PathBuf> {
        self.find(&[program]).map(|(_, path)| path).ok_or_else(|| {
            Error::rejected(
                ErrorKind::NotFound,
                format!("{program} is not installed (not found on PATH)"),
                install_hint(program),
            )
        })
    }

    /// A terminal emulator, if one is installed (none is not a refusal: the SSH line is shown
    /// to copy instead).
    pub fn terminal(&self) -> Option<Terminal> {
        self.find(&[
            "x-terminal-emulator",
            "gnome-terminal",
            "konsole",
            "xfce4-terminal",
            "xterm",
        ])
        .map(|(name, path)| Terminal { name, path })
    }
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

/// A VNC viewer found by [`HelperSearch::vnc_viewer`], with its full path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum VncViewer {
    /// virt-viewer's `remote-viewer`.
    RemoteViewer(PathBuf),
    /// TigerVNC's `vncviewer`.
    TigerVnc(PathBuf),
}

impl VncViewer {
    /// How to open the console forwarded to 127.0.0.1:`port`, the window titled `title`:
    /// remote-viewer reads the `.vv` settings on stdin (`-`); TigerVNC gets `127.0.0.1::PORT`
    /// (two colons: it reads `host:N` with N < 100 as a display number).
    pub fn launch(&self, port: u16, title: &str) -> Launch {
        match self {
            VncViewer::RemoteViewer(path) => Launch {
                program: path.display().to_string(),
                args: vec!["-".to_owned()],
                stdin: Some(
                    format!(
                        "[virt-viewer]\ntype=vnc\nhost=127.0.0.1\nport={port}\ntitle={title}\n\
                         delete-this-file=1\n"
                    )
                    .into_bytes(),
                ),
            },
            VncViewer::TigerVnc(path) => Launch {
                program: path.display().to_string(),
                args: vec![format!("127.0.0.1::{port}")],
                stdin: None,
            },
        }
    }
}

/// FreeRDP found by [`HelperSearch::rdp_client`]: its full path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RdpClient(pub PathBuf);

impl RdpClient {
    /// How to open RDP forwarded to 127.0.0.1:`port`, the window titled `title`; the
    /// certificate prompt is left to the client.
    pub fn launch(&self, port: u16, title: &str) -> Launch {
        Launch {
            program: self.0.display().to_string(),
            args: vec![
                format!("/v:127.0.0.1:{port}"),
                format!("/t:{title}"),
                "/dynamic-resolution".to_owned(),
                "+clipboard".to_owned(),
            ],
            stdin: None,
        }
    }
}

/// A terminal emulator found by [`HelperSearch::terminal`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Terminal {
    /// Its name (`xterm`, `gnome-terminal`, …): how it takes a command differs.
    pub name: String,
    /// Its full path.
    pub path: PathBuf,
}

impl Terminal {
    /// The terminal running `command` (an argument vector).
    pub fn launch(&self, command: &[String]) -> Launch {
        let mut args = vec![
            match self.name.as_str() {
                "gnome-terminal" => "--",
                "xfce4-terminal" => "-x",
                _ => "-e",
            }
            .to_owned(),
        ];
        args.extend(command.iter().cloned());
        Launch {
            program: self.path.display().to_string(),
            args,
            stdin: None,
        }
    }
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
/// `user` is a checked guest login ([`crate::validate::guest_login`]: no `@`, no leading `-`,
/// so ssh reads it as the login and nothing else).
pub fn ssh_args(port: u16, user: &str, namespace: &str, member: &str) -> Vec<String> {
    vec![
        "-p".to_owned(),
        port.to_string(),
        "-o".to_owned(),
        format!("HostKeyAlias={}", ssh_host_alias(namespace, member)),
        format!("{user}@127.0.0.1"),
    ]
}

/// The command line to copy for SSH through a forward on `port`: `ssh` and [`ssh_args`], each
/// quoted for a shell with [`shell_quote`] (a login like `CORP\alice` is pasted into one).
pub fn ssh_line(port: u16, user: &str, namespace: &str, member: &str) -> String {
    let words: Vec<String> = ssh_args(port, user, namespace, member)
        .iter()
        .map(|a| shell_quote(a))
        .collect();
    format!("ssh {}", words.join(" "))
}

/// ssh's arguments to reach `member` through `proxy` (an argument vector that bridges its
/// stdin/stdout to the guest's port 22, e.g. `corral-vdi port-forward --stdio`), as virtctl
/// does: `-o ProxyCommand=… -o HostKeyAlias=vmi.MEMBER.NS [-l LOGIN] vmi.MEMBER.NS EXTRA…`,
/// `login` a checked guest login ([`crate::validate::guest_login`]). ssh runs a ProxyCommand
/// through the user's shell, so each of its words is quoted.
pub fn ssh_proxy_args(
    proxy: &[String],
    namespace: &str,
    member: &str,
    login: Option<&str>,
    extra: &[String],
) -> Vec<String> {
    let proxy_command: Vec<String> = proxy.iter().map(|a| shell_quote(a)).collect();
    let host = ssh_host_alias(namespace, member);
    let mut args = vec![
        "-o".to_owned(),
        format!("ProxyCommand={}", proxy_command.join(" ")),
        // The guest's host key is known under the VMI's name, not under 127.0.0.1.
        "-o".to_owned(),
        format!("HostKeyAlias={host}"),
    ];
    if let Some(login) = login {
        args.extend(["-l".to_owned(), login.to_owned()]);
    }
    args.push(host);
    args.extend(extra.iter().cloned());
    args
}

/// Quotes `arg` for a POSIX shell (single quotes; a quote inside becomes `'\''`), unless it
/// holds only characters no shell interprets.
pub fn shell_quote(arg: &str) -> String {
    if !arg.is_empty()
        && arg
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_./:=@,+".contains(&b))
    {
        return arg.to_owned();
    }
    format!("'{}'", arg.replace('\'', r"'\''"))
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
        // Pasted into a shell, a domain login keeps its backslash.
        assert_eq!(
            ssh_line(40123, "CORP\\alice", "corral-vms", "desk-1"),
            r"ssh -p 40123 -o HostKeyAlias=vmi.desk-1.corral-vms 'CORP\alice@127.0.0.1'"
        );
        assert_eq!(
            ssh_args(40123, "CORP\\alice", "ns", "desk-1")
                .last()
                .unwrap(),
            "CORP\\alice@127.0.0.1",
            "the argument vector itself is not quoted"
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

    #[test]
    fn proxy_command_words_are_quoted_for_the_shell() {
        assert_eq!(shell_quote("corral-vms"), "corral-vms");
        assert_eq!(shell_quote("/tmp/my config"), "'/tmp/my config'");
        assert_eq!(shell_quote("a'b; rm -rf /"), r"'a'\''b; rm -rf /'");
        assert_eq!(shell_quote(""), "''");
        let args = ssh_proxy_args(
            &["/opt/my cli".to_owned(), "port-forward".to_owned()],
            "ns",
            "desk-1",
            Some("alice"),
            &["echo".to_owned()],
        );
        assert_eq!(
            args,
            [
                "-o",
                "ProxyCommand='/opt/my cli' port-forward",
                "-o",
                "HostKeyAlias=vmi.desk-1.ns",
                "-l",
                "alice",
                "vmi.desk-1.ns",
                "echo"
            ]
        );
    }

    #[test]
    fn a_search_in_given_folders_finds_only_what_is_there() {
        let none = HelperSearch::in_dirs("/nonexistent-corral-dir");
        assert_eq!(
            none.vnc_viewer().unwrap_err().kind(),
            ErrorKind::NotFound,
            "nothing found outside the folders given"
        );
        assert!(none.terminal().is_none());
        let missing = none.usbredirect().unwrap_err();
        assert_eq!(missing.kind(), ErrorKind::NotFound);
        assert!(
            missing.to_string().contains("usbredirect is not installed")
                && missing
                    .suggestion()
                    .is_some_and(|s| s.contains("apt install usbredirect")),
            "{missing:?}"
        );
        let bin = HelperSearch::in_dirs("/bin:/usr/bin");
        assert!(
            bin.find(&["no-such-program-xyz", "sh"])
                .is_some_and(|(n, _)| n == "sh")
        );
    }

    /// As tests/usb.rs does for the CLI: a stand-in usbredirect (an executable file) in the
    /// folders given is the one found.
    #[cfg(unix)]
    #[test]
    fn a_stand_in_usbredirect_in_the_folders_given_is_found() {
        use std::os::unix::fs::PermissionsExt;
        let dir = std::env::temp_dir().join(format!("corral-helpers-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let stand_in = dir.join("usbredirect");
        std::fs::write(&stand_in, "#!/bin/sh\n").unwrap();
        std::fs::set_permissions(&stand_in, std::fs::Permissions::from_mode(0o755)).unwrap();
        let found = HelperSearch::in_dirs(&dir).usbredirect();
        std::fs::remove_dir_all(&dir).unwrap();
        assert_eq!(found.unwrap(), stand_in);
    }
}
