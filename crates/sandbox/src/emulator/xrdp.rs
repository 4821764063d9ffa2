//! The second kind of sandbox RDP guest, chosen per VM by
//! [`RDP_SERVER_ANNOTATION`](super::knobs::RDP_SERVER_ANNOTATION) `"xrdp"`: xrdp (Debian's
//! `xrdp`, 0.9.21) as an RDP front end to the VMI's own Xvnc, through xrdp's VNC module
//! (`libvnc.so`, RFB to Xvnc's `-SecurityTypes None` port on 127.0.0.1). No sesman, no PAM, no
//! system user: xrdp runs as the sandbox's process (`--nodaemon`, which writes no pid file, and
//! `fork=false`, one process with a thread per connection) with a config file of its own
//! (`--config <guest dir>/xrdp/xrdp.ini`), logging to `<guest dir>/xrdp/xrdp.log`. It reads only
//! the package's files in `/etc/xrdp` (keymaps, and `rsakeys.ini`, which it wants to exist).
//!
//! What a client gets:
//! - **TLS only** (`security_layer=tls`), with the VM's certificate (ECDSA P-256, self-signed,
//!   made on the VM's first start and kept through restarts in
//!   `<guests root>/rdp-identities/<ns>_<name>/xrdp-tls.pem`). No NLA: xrdp 0.9 has none.
//! - **No login.** A client that sends any user name and password (the autologon flag) gets the
//!   desktop at once (`autorun`); one that sends none sees xrdp's login window, whose only
//!   session needs nothing typed: OK connects.
//! - **Clipboard text both ways** (cliprdr ⇄ RFB cut text): the guest's X `CLIPBOARD` (and
//!   `PRIMARY`) to the client, and the client's clipboard to the guest's. Text only, and only
//!   ISO-8859-1 (what RFB cut text carries): other characters become `?` from the guest (Xvnc
//!   converts them) and are dropped from the client (xrdp does).
//! - **The screen follows the client's size**: at connection xrdp sets Xvnc's screen to the
//!   client's desktop size (RFB `SetDesktopSize`, which TigerVNC implements with RandR), and
//!   again whenever the client sends a new layout on the display control channel (a resized
//!   window with `/dynamic-resolution`). The size stays after the client leaves.
//!
//! Known limit, seen with xfreerdp 2.11 as the client: xrdp 0.9.21 passes a client's clipboard
//! on to the guest only once every data request it sent has been answered (`vnc/vnc_clip.c`,
//! `handle_cb_format_data_response`). For a copy made during a session xfreerdp mostly
//! announces its formats twice and answers one of the two requests, and from then on no
//! client-to-guest copy of that session reaches the guest (neutrinolabs/xrdp#1955 reports a
//! client-to-server clipboard that stops working with xfreerdp, not with Windows' client). What is on the client's
//! clipboard when a session starts does arrive, as the tests check, and guest-to-client copies
//! are not affected.
//!
//! Tests reach the guest's X display through
//! [`XVNC_DISPLAY_ANNOTATION`](super::knobs::XVNC_DISPLAY_ANNOTATION) (`":<n>"`) and read or set
//! clipboards and read screen sizes with [`clipboard_text`], [`set_clipboard_text`] and
//! [`screen_size`], which work on any X display (the client's too).

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use tokio::process::{Child, Command};

use crate::process::{command, log_tail, program, spawn_listening};

/// The one session in the guest's xrdp.ini, run for every connection.
const SESSION: &str = "corral-guest";

/// Starts xrdp on a free port of 127.0.0.1 in front of the Xvnc whose RFB port is `rfb_port`,
/// with its files in `<dir>/xrdp/` and the VM's certificate in `home` (made there when
/// missing). Returns the port, once it accepts connections, and the process.
///
/// Errors: xrdp is not installed, the certificate could not be made, or xrdp did not listen
/// within 15 s (three tries; its output and log are in the error).
pub(super) async fn start(rfb_port: u16, dir: &Path, home: &Path) -> Result<(u16, Child)> {
    let xrdp = program("xrdp", "xrdp")?;
    let tls = certificate(home)?;
    let dir = dir.join("xrdp");
    std::fs::create_dir_all(&dir).with_context(|| format!("create {}", dir.display()))?;
    let ini = dir.join("xrdp.ini");
    let log = dir.join("xrdp.log");
    let output = dir.join("xrdp.out");
    spawn_listening(&output, |port| {
        std::fs::write(&ini, config(port, rfb_port, &tls, &log))
            .with_context(|| format!("write {}", ini.display()))?;
        let mut cmd = command(&xrdp, &output)?;
        cmd.args(["--nodaemon", "--config"]).arg(&ini);
        Ok(cmd)
    })
    .await
    .with_context(|| format!("xrdp's log:\n{}", log_tail(&log)))
}

/// The guest's xrdp.ini: xrdp on 127.0.0.1:`port`, TLS with the certificate and key in `tls`,
/// the clipboard and dynamic channels on (the rest off), and one VNC session to 127.0.0.1:
/// `rfb_port` run without asking anything. Option names: xrdp.ini(5) of xrdp 0.9.21.
fn config(port: u16, rfb_port: u16, tls: &Path, log: &Path) -> String {
    let tls = tls.display();
    format!(
        "[Globals]
ini_version=1
fork=false
port=tcp://127.0.0.1:{port}
security_layer=tls
certificate={tls}
key_file={tls}
ssl_protocols=TLSv1.2, TLSv1.3
autorun={SESSION}
allow_channels=true
max_bpp=32
[Logging]
LogFile={log}
LogLevel=INFO
EnableSyslog=false
EnableConsole=false
[Channels]
cliprdr=true
drdynvc=true
rdpdr=false
rdpsnd=false
rail=false
xrdpvr=false
tcutils=false
[{SESSION}]
name={SESSION}
lib=libvnc.so
ip=127.0.0.1
port={rfb_port}
username=corral
password=
",
        log = log.display()
    )
}

/// The VM's TLS certificate and key for xrdp (one PEM file, mode 0600) in `home`, made when
/// missing: self-signed, for `localhost` and 127.0.0.1.
///
/// Errors: the file could not be made or written.
fn certificate(home: &Path) -> Result<PathBuf> {
    let path = home.join("xrdp-tls.pem");
    if path.exists() {
        return Ok(path);
    }
    std::fs::create_dir_all(home).with_context(|| format!("create {}", home.display()))?;
    let mut params = rcgen::CertificateParams::new(vec!["localhost".to_owned()])?;
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, "Corral sandbox RDP guest");
    params.subject_alt_names.push(rcgen::SanType::IpAddress(
        std::net::Ipv4Addr::LOCALHOST.into(),
    ));
    let key = rcgen::KeyPair::generate()?;
    let cert = params.self_signed(&key)?;
    // Written beside it and renamed, so that xrdp never reads half a file.
    let partial = path.with_extension("partial");
    std::fs::write(&partial, "")
        .and_then(|()| {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&partial, std::fs::Permissions::from_mode(0o600))
        })
        .and_then(|()| std::fs::write(&partial, cert.pem() + &key.serialize_pem()))
        .and_then(|()| std::fs::rename(&partial, &path))
        .with_context(|| format!("write {}", path.display()))?;
    Ok(path)
}

/// Runs `xclip -selection clipboard` with `args` on the X `display` (`":3"`), feeding it
/// `input` (then its output is not read); its output when it exits 0 within 10 s.
async fn xclip(display: &str, args: &[&str], input: Option<&str>) -> Result<Option<Vec<u8>>> {
    let xclip = program("xclip", "xclip")?;
    let mut cmd = Command::new(xclip);
    cmd.env("DISPLAY", display)
        .args(["-selection", "clipboard"])
        .args(args)
        .stdin(if input.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        // `-i` forks a child that keeps serving the selection: it must not hold a pipe open.
        .stdout(if input.is_some() {
            Stdio::null()
        } else {
            Stdio::piped()
        })
        .stderr(Stdio::null())
        .kill_on_drop(true);
    let mut child = cmd.spawn().context("start xclip")?;
    if let (Some(text), Some(mut stdin)) = (input, child.stdin.take()) {
        use tokio::io::AsyncWriteExt;
        stdin.write_all(text.as_bytes()).await?;
    }
    let output = tokio::time::timeout(Duration::from_secs(10), child.wait_with_output())
        .await
        .context("xclip took more than 10 s")??;
    Ok(output.status.success().then_some(output.stdout))
}

/// The text on the X `CLIPBOARD` selection of `display` (`":3"`), as its owner gives it
/// (`xclip -o`); `None` when nobody owns the selection or the owner has no text.
///
/// Errors: xclip is missing (Debian's `xclip`) or took more than 10 s.
pub async fn clipboard_text(display: &str) -> Result<Option<String>> {
    let text = xclip(display, &["-o"], None).await?;
    Ok(text.map(|bytes| String::from_utf8_lossy(&bytes).into_owned()))
}

/// Puts `text` on the X `CLIPBOARD` selection of `display` (`":3"`) with `xclip -i`, which
/// stays in the background serving it until another client takes the selection or the display
/// ends.
///
/// Errors: xclip is missing (Debian's `xclip`), failed (e.g. no such display) or took more than
/// 10 s.
pub async fn set_clipboard_text(display: &str, text: &str) -> Result<()> {
    match xclip(display, &["-i"], Some(text)).await? {
        Some(_) => Ok(()),
        None => bail!("xclip -i on {display} failed"),
    }
}

/// The screen size of the X `display` (`":3"`) in pixels, width and height (`xdpyinfo`'s
/// `dimensions`).
///
/// Errors: xdpyinfo is missing (Debian's `x11-utils`), failed, took more than 10 s, or printed
/// no dimensions.
pub async fn screen_size(display: &str) -> Result<(u32, u32)> {
    let xdpyinfo = program("xdpyinfo", "x11-utils")?;
    let mut cmd = Command::new(xdpyinfo);
    cmd.env("DISPLAY", display)
        .stdin(Stdio::null())
        .kill_on_drop(true);
    let output = tokio::time::timeout(Duration::from_secs(10), cmd.output())
        .await
        .context("xdpyinfo took more than 10 s")??;
    if !output.status.success() {
        bail!(
            "xdpyinfo on {display} failed ({}): {}",
            output.status,
            String::from_utf8_lossy(&output.stderr).trim()
        );
    }
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .find_map(|line| {
            let size = line
                .trim()
                .strip_prefix("dimensions:")?
                .split_whitespace()
                .next()?;
            let (width, height) = size.split_once('x')?;
            Some((width.parse().ok()?, height.parse().ok()?))
        })
        .with_context(|| format!("xdpyinfo on {display} printed no dimensions"))
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::os::unix::fs::PermissionsExt;

    use super::*;
    use crate::emulator::knobs::{RDP_SERVER_ANNOTATION, RdpServer, XRDP, rdp_server};

    #[test]
    fn only_the_xrdp_annotation_chooses_xrdp() {
        let with =
            |value: &str| BTreeMap::from([(RDP_SERVER_ANNOTATION.to_owned(), value.to_owned())]);
        assert_eq!(rdp_server(&BTreeMap::new()), RdpServer::Shadow);
        assert_eq!(rdp_server(&with(XRDP)), RdpServer::Xrdp);
        for other in ["", "XRDP", "shadow", "xrdp "] {
            assert_eq!(rdp_server(&with(other)), RdpServer::Shadow, "{other:?}");
        }
    }

    #[test]
    fn the_certificate_is_made_once_and_private() {
        let home = std::env::temp_dir().join(format!("corral-xrdp-cert-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&home);
        let path = certificate(&home).unwrap();
        let first = std::fs::read_to_string(&path).unwrap();
        assert!(first.contains("-----BEGIN CERTIFICATE-----"), "{first}");
        assert!(first.contains("-----BEGIN PRIVATE KEY-----"), "{first}");
        let mode = std::fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        assert_eq!(certificate(&home).unwrap(), path);
        assert_eq!(std::fs::read_to_string(&path).unwrap(), first, "kept");
        std::fs::remove_dir_all(&home).unwrap();
    }
}
