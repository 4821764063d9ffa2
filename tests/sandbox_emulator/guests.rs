//! The real guest-side servers behind the streams: VNC (a real RFB server, one viewer at a
//! time), portforward to real SSH and RDP servers, usbredir's hellos in four slots, and a
//! stopped VM taking its display and streams with it; the opt-in xrdp guest's clipboard and
//! resize.

use std::time::Duration;

use corral_tests::{client_as, namespace};
use futures::{SinkExt, StreamExt};
use kube::Client;
use kube::api::DynamicObject;
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio_tungstenite::tungstenite::Message;

use crate::{
    Opened, STREAM_WAIT, create_vm, create_vm_with, open, open_offering, refused, stream,
    stream_client, subresource, vmi_url, vmis, wait_status,
};

async fn wait_annotation(admin: &Client, ns: &str, vmi: &str, key: &str, want: &str) {
    let api = vmis(admin, ns);
    corral_tests::eventually(
        &format!("VMI {vmi} annotated {key}={want}"),
        STREAM_WAIT,
        || async {
            let got = api.get(vmi).await.ok()?.metadata.annotations?;
            (got.get(key).map(String::as_str) == Some(want)).then_some(())
        },
    )
    .await
}

/// `(red, green, blue)` of a raw RFB pixel in the server's pixel format.
fn rgb(pixel: &[u8], init: &[u8]) -> (u8, u8, u8) {
    let value = if init[6] != 0 {
        u32::from_be_bytes(pixel.try_into().unwrap())
    } else {
        u32::from_le_bytes(pixel.try_into().unwrap())
    };
    let channel = |max_at: usize, shift_at: usize| {
        let max = u32::from(u16::from_be_bytes([init[max_at], init[max_at + 1]]));
        let raw = (value >> init[shift_at]) & max;
        (raw * 255 / max.max(1)) as u8
    };
    (channel(8, 14), channel(10, 15), channel(12, 16))
}

#[tokio::test]
async fn vnc_is_a_real_rfb_server_with_one_viewer_at_a_time() {
    let admin = client_as("admin").await;
    let alice = stream_client("alice").await;
    let ns = namespace("vnc").await;
    create_vm(&admin, &ns, "desk", "Always").await;
    wait_status(&admin, &ns, "desk", "Running").await;
    let url = vmi_url(&ns, "desk", "vnc");

    let mut first = stream(&alice, &url).await;
    assert_eq!(first.read(12).await, b"RFB 003.008\n");
    first.send(b"RFB 003.008\n").await;
    let count = first.read(1).await[0];
    let types = first.read(usize::from(count)).await;
    assert!(types.contains(&1), "security type None offered: {types:?}");
    first.send(&[1]).await;
    assert_eq!(first.read(4).await, [0, 0, 0, 0], "SecurityResult OK");
    first.send(&[1]).await; // ClientInit: shared
    let init = first.read(24).await;
    let width = u16::from_be_bytes([init[0], init[1]]);
    let height = u16::from_be_bytes([init[2], init[3]]);
    assert_eq!((width, height), (1024, 768), "ServerInit framebuffer size");
    assert_eq!(init[4], 32, "bits per pixel");
    let name_len = u32::from_be_bytes([init[20], init[21], init[22], init[23]]);
    let name = first.read(name_len as usize).await;
    assert_eq!(String::from_utf8_lossy(&name), format!("{ns}/desk"));

    // The whole screen, raw: the VM's colour around a window that names it.
    let [w0, w1] = width.to_be_bytes();
    let [h0, h1] = height.to_be_bytes();
    first.send(&[3, 0, 0, 0, 0, 0, w0, w1, h0, h1]).await;
    let header = first.read(4).await;
    assert_eq!(header[0], 0, "a FramebufferUpdate");
    let rects = u16::from_be_bytes([header[2], header[3]]);
    assert!(rects >= 1);
    let mut colours = std::collections::HashSet::new();
    let mut corner = None;
    for _ in 0..rects {
        let rect = first.read(12).await;
        let (x, y) = (
            u16::from_be_bytes([rect[0], rect[1]]),
            u16::from_be_bytes([rect[2], rect[3]]),
        );
        let (w, h) = (
            usize::from(u16::from_be_bytes([rect[4], rect[5]])),
            usize::from(u16::from_be_bytes([rect[6], rect[7]])),
        );
        assert_eq!(rect[8..12], [0, 0, 0, 0], "raw encoding");
        let pixels = first.read(w * h * 4).await;
        for pixel in pixels.chunks(4) {
            colours.insert(rgb(pixel, &init));
        }
        if (x, y) == (0, 0) && w > 0 && h > 0 {
            corner = Some(rgb(&pixels[..4], &init));
        }
    }
    assert!(colours.len() >= 2, "the screen is one flat colour");
    let key = sandbox::emulator::guests::GuestKey {
        namespace: ns.clone(),
        name: "desk".into(),
        uid: String::new(),
    };
    let want = sandbox::emulator::guests::screen_colour(&key);
    let hex = |i: usize| u8::from_str_radix(&want[i..i + 2], 16).unwrap();
    assert_eq!(corner, Some((hex(1), hex(3), hex(5))), "background {want}");

    // Someone views: preserveSession=true is refused, and so is a screenshot.
    let (code, message) = refused(&alice, &format!("{url}?preserveSession=true")).await;
    assert_eq!(
        (code, message.as_str()),
        (503, "Active VNC connection. Request denied.")
    );
    let (code, message) = refused(&alice, &vmi_url(&ns, "desk", "vnc/screenshot")).await;
    assert_eq!(code, 500, "{message}");
    assert!(message.contains("Active VNC connection"), "{message}");

    // Without preserveSession a second viewer, whoever it is, takes over: the first stream ends
    // (1006). Bob here, as the broker does to cut a former holder's console.
    let mut second = stream(&stream_client("bob").await, &url).await;
    assert_eq!(second.read(12).await, b"RFB 003.008\n");
    first.ends().await;
    drop(second);

    // Once nobody views, preserveSession=true connects, and a screenshot is a PNG.
    let free = corral_tests::eventually("the viewer slot freed", STREAM_WAIT, || async {
        match open(&alice, &format!("{url}?preserveSession=true")).await {
            Opened::Stream(ws, _) => Some(ws),
            Opened::Refused(..) => None,
        }
    })
    .await;
    drop(free);
    let png = corral_tests::eventually("a screenshot", STREAM_WAIT, || async {
        let request = http::Request::get(vmi_url(&ns, "desk", "vnc/screenshot"))
            .body(kube::client::Body::empty())
            .unwrap();
        let response = alice.send(request).await.ok()?;
        if response.status() != 200 {
            return None;
        }
        let content_type = response.headers().get(http::header::CONTENT_TYPE).cloned();
        assert_eq!(content_type.unwrap(), "image/png");
        Some(response.into_body().collect_bytes().await.unwrap())
    })
    .await;
    assert!(png.starts_with(b"\x89PNG\r\n\x1a\n"), "a PNG");
    let dims = (
        u32::from_be_bytes(png[16..20].try_into().unwrap()),
        u32::from_be_bytes(png[20..24].try_into().unwrap()),
    );
    assert_eq!(dims, (1024, 768));
}

/// Serves 127.0.0.1:<port>, each connection a portforward stream to `url` (what `virtctl
/// port-forward` does), and returns the port.
async fn forward_locally(client: Client, url: String) -> u16 {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            let mut pipe = stream(&client, &url).await;
            tokio::spawn(async move {
                let (mut read, mut write) = tcp.into_split();
                let mut buf = vec![0u8; 32 * 1024];
                loop {
                    tokio::select! {
                        n = read.read(&mut buf) => match n {
                            Ok(0) | Err(_) => break,
                            Ok(n) => pipe.send(&buf[..n]).await,
                        },
                        message = pipe.ws.next() => match message {
                            Some(Ok(Message::Binary(bytes))) => {
                                if write.write_all(&bytes).await.is_err() {
                                    break;
                                }
                            }
                            Some(Ok(_)) => {}
                            _ => break,
                        },
                    }
                }
            });
        }
    });
    port
}

#[tokio::test]
async fn portforward_reaches_real_ssh_and_rdp_servers() {
    let admin = client_as("admin").await;
    let alice = stream_client("alice").await;
    let ns = namespace("pf").await;
    create_vm(&admin, &ns, "desk", "Always").await;
    create_vm_with(&admin, &ns, "web", "Always", |o| {
        o["metadata"]["annotations"]["sandbox.corral.dev/guest-ports"] = json!("8080");
    })
    .await;
    wait_status(&admin, &ns, "desk", "Running").await;
    wait_status(&admin, &ns, "web", "Running").await;

    // Guest port 22: a real OpenSSH, pinged by virt-api every second.
    let mut ssh = stream(&alice, &vmi_url(&ns, "desk", "portforward/22")).await;
    let banner = ssh.read_line().await;
    assert!(banner.starts_with("SSH-2.0-OpenSSH"), "{banner:?}");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    while ssh.pings == 0 {
        assert!(tokio::time::Instant::now() < deadline, "no keep-alive ping");
        ssh.frame("a ping").await;
    }
    drop(ssh);

    // A real login with the sandbox's key, through a local port-forward.
    let shared = corral_tests::sandbox();
    let port = forward_locally(alice.clone(), vmi_url(&ns, "desk", "portforward/22")).await;
    let host_key = std::fs::read_to_string(&shared.ssh_host_public_key).unwrap();
    let host_key: Vec<&str> = host_key.split_whitespace().take(2).collect();
    let known_hosts = std::env::temp_dir().join(format!("corral-known-hosts-{ns}"));
    std::fs::write(
        &known_hosts,
        format!("[127.0.0.1]:{port} {}\n", host_key.join(" ")),
    )
    .unwrap();
    let output = tokio::time::timeout(
        Duration::from_secs(30),
        tokio::process::Command::new("ssh")
            .args([
                "-F",
                "/dev/null",
                "-o",
                "BatchMode=yes",
                "-o",
                "IdentitiesOnly=yes",
            ])
            .args(["-o", "StrictHostKeyChecking=yes", "-o", "ConnectTimeout=15"])
            .arg("-o")
            .arg(format!("UserKnownHostsFile={}", known_hosts.display()))
            .arg("-i")
            .arg(&shared.ssh_client_key)
            .args(["-p", &port.to_string()])
            .arg(format!("{}@127.0.0.1", shared.ssh_user))
            .args(["echo", "corral-ok"])
            .output(),
    )
    .await
    .expect("ssh finished within 30 s")
    .expect("ssh runs");
    let _ = std::fs::remove_file(&known_hosts);
    assert_eq!(
        String::from_utf8_lossy(&output.stdout).trim(),
        "corral-ok",
        "ssh: {}",
        String::from_utf8_lossy(&output.stderr)
    );

    // Guest port 3389: a real RDP server answers an X.224 Connection Request.
    let mut rdp = stream(&alice, &vmi_url(&ns, "desk", "portforward/3389/tcp")).await;
    rdp.send(&[
        3, 0, 0, 19, // TPKT, 19 bytes
        14, 0xE0, 0, 0, 0, 0, 0, // X.224 Connection Request
        1, 0, 8, 0, 3, 0, 0, 0, // RDP_NEG_REQ: TLS | CredSSP
    ])
    .await;
    let tpkt = rdp.read(4).await;
    assert_eq!(tpkt[0], 3, "TPKT version");
    let length = usize::from(u16::from_be_bytes([tpkt[2], tpkt[3]]));
    let x224 = rdp.read(length - 4).await;
    assert_eq!(x224[1], 0xD0, "X.224 Connection Confirm: {x224:?}");
    drop(rdp);

    // Per-VM open ports: "web" answers only on 8080 (an echo service).
    let (code, message) = refused(&alice, &vmi_url(&ns, "web", "portforward/22")).await;
    assert_eq!(code, 500, "{message}");
    assert!(
        message.contains("127.0.0.1:22: connect: connection refused"),
        "{message}"
    );
    let mut echo = stream(&alice, &vmi_url(&ns, "web", "portforward/8080")).await;
    echo.ws
        .send(Message::Text("text frames are dropped".into()))
        .await
        .unwrap();
    echo.send(b"hello guest").await;
    assert_eq!(echo.read(11).await, b"hello guest");

    // Without an offered subprotocol the server still upgrades, naming none.
    match open_offering(&alice, &vmi_url(&ns, "web", "portforward/8080"), None).await {
        Opened::Stream(_, protocol) => assert_eq!(protocol, None),
        Opened::Refused(code, body) => panic!("{code} {}", String::from_utf8_lossy(&body)),
    }
}

fn usbredir_hello() -> Vec<u8> {
    let mut hello = Vec::new();
    hello.extend_from_slice(&0u32.to_le_bytes()); // type: hello
    hello.extend_from_slice(&68u32.to_le_bytes()); // length
    hello.extend_from_slice(&0u32.to_le_bytes()); // id
    let mut version = [0u8; 64];
    version[..11].copy_from_slice(b"test client");
    hello.extend_from_slice(&version);
    hello.extend_from_slice(&0u32.to_le_bytes()); // caps
    hello
}

#[tokio::test]
async fn usbredir_exchanges_hellos_in_four_slots() {
    let admin = client_as("admin").await;
    let alice = stream_client("alice").await;
    let ns = namespace("usb").await;
    create_vm(&admin, &ns, "desk", "Always").await;
    wait_status(&admin, &ns, "desk", "Running").await;
    let url = vmi_url(&ns, "desk", "usbredir");
    let attached = "sandbox.corral.dev/usbredir-attached";

    let mut streams = Vec::new();
    for _ in 0..4 {
        let mut usb = stream(&alice, &url).await;
        usb.send(&usbredir_hello()).await;
        let header = usb.read(12).await;
        assert_eq!(
            header[..8],
            [0, 0, 0, 0, 68, 0, 0, 0],
            "a hello of 68 bytes"
        );
        let body = usb.read(68).await;
        assert!(
            body.starts_with(b"corral-sandbox usbredir\0"),
            "{:?}",
            String::from_utf8_lossy(&body[..64])
        );
        streams.push(usb);
    }
    wait_annotation(&admin, &ns, "desk", attached, "4").await;
    match open(&alice, &url).await {
        Opened::Refused(code, body) => assert_eq!((code, body.len()), (503, 0), "fifth device"),
        Opened::Stream(..) => panic!("a fifth usbredir stream was accepted"),
    }

    drop(streams.pop());
    wait_annotation(&admin, &ns, "desk", attached, "3").await;
    // A stream that does not start with a hello is closed without one.
    let mut bad = stream(&alice, &url).await;
    bad.send(&[7, 0, 0, 0, 4, 0, 0, 0, 0, 0, 0, 0]).await;
    bad.ends().await;
    wait_annotation(&admin, &ns, "desk", attached, "3").await;

    streams.clear();
    wait_annotation(&admin, &ns, "desk", attached, "0").await;
}

#[tokio::test]
async fn a_stopped_vm_takes_its_display_and_streams_with_it() {
    let admin = client_as("admin").await;
    let alice = stream_client("alice").await;
    let plain_alice = client_as("alice").await;
    let ns = namespace("xvncstop").await;
    create_vm(&admin, &ns, "desk", "Always").await;
    wait_status(&admin, &ns, "desk", "Running").await;
    let annotations = |vmi: DynamicObject| vmi.metadata.annotations.unwrap_or_default();
    let before = annotations(vmis(&admin, &ns).get("desk").await.unwrap());
    assert!(
        !before.contains_key("sandbox.corral.dev/xvnc-pid"),
        "a running VMI gets no display before anyone asks: {before:?}"
    );

    let mut viewer = stream(&alice, &vmi_url(&ns, "desk", "vnc")).await;
    assert_eq!(viewer.read(12).await, b"RFB 003.008\n");
    let after = annotations(vmis(&admin, &ns).get("desk").await.unwrap());
    let pid: u32 = after["sandbox.corral.dev/xvnc-pid"].parse().unwrap();
    let rfb: u16 = after["sandbox.corral.dev/xvnc-rfbport"].parse().unwrap();
    let rdp: u16 = after["sandbox.corral.dev/rdp-port"].parse().unwrap();
    assert!(std::path::Path::new(&format!("/proc/{pid}")).exists());
    for port in [rfb, rdp] {
        tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .unwrap_or_else(|e| panic!("port {port}: {e}"));
    }

    assert_eq!(subresource(&plain_alice, &ns, "desk", "stop").await.0, 202);
    viewer.ends().await;
    wait_status(&admin, &ns, "desk", "Stopped").await;
    corral_tests::eventually("Xvnc and its RDP server gone", STREAM_WAIT, || async {
        let alive = std::path::Path::new(&format!("/proc/{pid}")).exists();
        let listening = tokio::net::TcpStream::connect(("127.0.0.1", rfb))
            .await
            .is_ok()
            || tokio::net::TcpStream::connect(("127.0.0.1", rdp))
                .await
                .is_ok();
        (!alive && !listening).then_some(())
    })
    .await;
}

/// Where a test's RDP clients run: an X display (xfreerdp wants one even with `+auth-only`),
/// Xvfb on a free display number (`-displayfd`), and a `HOME` of their own (FreeRDP keeps its
/// settings there); the Xvfb is killed and the folder removed when dropped.
struct ClientDisplay {
    name: String,
    home: std::path::PathBuf,
    _xvfb: tokio::process::Child,
    /// Xvfb's standard output, kept open while it runs: a closed pipe would end it with
    /// SIGPIPE at its next write, and the display with it.
    _stdout: tokio::io::Lines<tokio::io::BufReader<tokio::process::ChildStdout>>,
}

impl Drop for ClientDisplay {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.home);
    }
}

async fn client_display(ns: &str) -> ClientDisplay {
    let mut xvfb = tokio::process::Command::new("Xvfb")
        .args([
            "-displayfd",
            "1",
            "-screen",
            "0",
            "1280x800x24",
            "-nolisten",
            "tcp",
        ])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("start Xvfb (apt-get install xvfb)");
    let stdout = xvfb.stdout.take().unwrap();
    let mut lines = tokio::io::AsyncBufReadExt::lines(tokio::io::BufReader::new(stdout));
    let number = tokio::time::timeout(Duration::from_secs(15), lines.next_line())
        .await
        .expect("Xvfb names its display within 15 s")
        .unwrap()
        .expect("Xvfb printed its display number");
    let home = std::env::temp_dir().join(format!("corral-xfreerdp-{ns}"));
    std::fs::create_dir_all(&home).unwrap();
    ClientDisplay {
        name: format!(":{}", number.trim()),
        home,
        _xvfb: xvfb,
        _stdout: lines,
    }
}

/// `xfreerdp` to 127.0.0.1:`port` as `user` with `password`, on `display`, taking the server's
/// (self-signed) certificate as `cert` says: `ignore`, `tofu` (trust and remember it on the
/// first connection) or `deny` (only a remembered one).
fn xfreerdp(
    display: &ClientDisplay,
    port: u16,
    user: &str,
    password: &str,
    cert: &str,
) -> tokio::process::Command {
    let mut cmd = tokio::process::Command::new("xfreerdp");
    cmd.env("DISPLAY", &display.name)
        .env("HOME", &display.home)
        .arg(format!("/v:127.0.0.1:{port}"))
        .arg(format!("/u:{user}"))
        .arg(format!("/p:{password}"))
        .arg(format!("/cert:{cert}"))
        .stdin(std::process::Stdio::null())
        .kill_on_drop(true);
    cmd
}

/// FreeRDP's exit code when the server dropped the connection: what a 2.11 server does to a
/// client whose NLA credentials it refused (it sends no logon error).
const XFREERDP_TRANSPORT_FAILED: i32 = 147;

/// `xfreerdp +auth-only` (NLA, then disconnect): its exit code and output.
async fn rdp_auth(
    display: &ClientDisplay,
    port: u16,
    user: &str,
    password: &str,
    cert: &str,
) -> (i32, String) {
    let output = tokio::time::timeout(
        Duration::from_secs(60),
        xfreerdp(display, port, user, password, cert)
            .arg("+auth-only")
            .output(),
    )
    .await
    .expect("xfreerdp +auth-only finished within 60 s")
    .expect("xfreerdp runs (apt-get install freerdp2-x11)");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    (output.status.code().unwrap_or(-1), text)
}

#[tokio::test]
async fn rdp_takes_nla_with_the_vm_credentials_only() {
    use sandbox::emulator::knobs::{
        DEFAULT_RDP_PASSWORD, DEFAULT_RDP_USER, RDP_CREDENTIALS_ANNOTATION,
    };
    let admin = client_as("admin").await;
    let alice = stream_client("alice").await;
    let ns = namespace("rdpnla").await;
    create_vm(&admin, &ns, "desk", "Always").await;
    create_vm_with(&admin, &ns, "custom", "Always", |o| {
        o["metadata"]["annotations"][RDP_CREDENTIALS_ANNOTATION] = json!("Carol:pass:word");
    })
    .await;
    wait_status(&admin, &ns, "desk", "Running").await;
    wait_status(&admin, &ns, "custom", "Running").await;
    let display = client_display(&ns).await;
    let desk = forward_locally(alice.clone(), vmi_url(&ns, "desk", "portforward/3389")).await;
    let custom = forward_locally(alice.clone(), vmi_url(&ns, "custom", "portforward/3389")).await;

    // The defaults let a client into a VM without the annotation; a wrong password, another
    // user or another letter case do not.
    let auth = |port, user: &'static str, password: &'static str| {
        let display = &display;
        async move { rdp_auth(display, port, user, password, "ignore").await }
    };
    let (code, output) = auth(desk, DEFAULT_RDP_USER, DEFAULT_RDP_PASSWORD).await;
    assert_eq!(code, 0, "the default credentials: {output}");
    for (user, password) in [
        (DEFAULT_RDP_USER, "wrong"),
        ("nobody", DEFAULT_RDP_PASSWORD),
        ("Corral", DEFAULT_RDP_PASSWORD),
    ] {
        let (code, output) = auth(desk, user, password).await;
        assert_eq!(
            code, XFREERDP_TRANSPORT_FAILED,
            "{user}/{password}: {output}"
        );
    }

    // The annotation's credentials (the password may hold ':') replace the defaults.
    let (code, output) = auth(custom, "Carol", "pass:word").await;
    assert_eq!(code, 0, "the annotated credentials: {output}");
    let (code, output) = auth(custom, DEFAULT_RDP_USER, DEFAULT_RDP_PASSWORD).await;
    assert_eq!(
        code, XFREERDP_TRANSPORT_FAILED,
        "defaults on the annotated VM: {output}"
    );

    // A changed annotation applies to the next connection, without a restart.
    let patch = json!({ "metadata": { "annotations": {
        RDP_CREDENTIALS_ANNOTATION: "Carol:new-password"
    } } });
    crate::vms(&admin, &ns)
        .patch(
            "custom",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(patch),
        )
        .await
        .unwrap();
    let (code, output) = auth(custom, "Carol", "pass:word").await;
    assert_eq!(
        code, XFREERDP_TRANSPORT_FAILED,
        "the old password: {output}"
    );
    let (code, output) = auth(custom, "Carol", "new-password").await;
    assert_eq!(code, 0, "the new password: {output}");

    // A client that will not do NLA is turned away at negotiation.
    let output = tokio::time::timeout(
        Duration::from_secs(60),
        xfreerdp(
            &display,
            desk,
            DEFAULT_RDP_USER,
            DEFAULT_RDP_PASSWORD,
            "ignore",
        )
        .args(["/sec:tls", "+auth-only"])
        .output(),
    )
    .await
    .unwrap()
    .unwrap();
    let text = String::from_utf8_lossy(&output.stderr).into_owned()
        + &String::from_utf8_lossy(&output.stdout);
    assert!(!output.status.success(), "TLS without NLA: {text}");
    assert!(text.contains("HYBRID_REQUIRED_BY_SERVER"), "{text}");
}

#[tokio::test]
async fn the_rdp_certificate_stays_through_a_restart() {
    use sandbox::emulator::knobs::{DEFAULT_RDP_PASSWORD, DEFAULT_RDP_USER};
    let admin = client_as("admin").await;
    let alice = stream_client("alice").await;
    let ns = namespace("rdpcert").await;
    create_vm(&admin, &ns, "desk", "Always").await;
    wait_status(&admin, &ns, "desk", "Running").await;
    let display = client_display(&ns).await;
    let port = forward_locally(alice.clone(), vmi_url(&ns, "desk", "portforward/3389")).await;
    let auth = |cert: &'static str| {
        let display = &display;
        async move { rdp_auth(display, port, DEFAULT_RDP_USER, DEFAULT_RDP_PASSWORD, cert).await }
    };

    // A certificate the client does not know yet is refused with `deny`, remembered with `tofu`.
    let (code, output) = auth("deny").await;
    assert_ne!(code, 0, "an unknown certificate with /cert:deny: {output}");
    let (code, output) = auth("tofu").await;
    assert_eq!(code, 0, "first connection, /cert:tofu: {output}");
    let (code, output) = auth("deny").await;
    assert_eq!(code, 0, "the remembered certificate: {output}");

    // A restart makes a new VMI (new servers), which shows the same certificate.
    let first = vmis(&admin, &ns).get("desk").await.unwrap().metadata.uid;
    assert_eq!(subresource(&admin, &ns, "desk", "restart").await.0, 202);
    corral_tests::eventually("desk running on a new VMI", STREAM_WAIT, || async {
        let vmi = vmis(&admin, &ns).get_opt("desk").await.unwrap()?;
        (vmi.metadata.uid != first && vmi.data["status"]["phase"] == "Running").then_some(())
    })
    .await;
    let (code, output) = auth("deny").await;
    assert_eq!(code, 0, "after the restart: {output}");
}

/// Runs `xdotool` on `display` with `args`; its stdout, trimmed, when it succeeded.
async fn xdotool(display: &str, args: &[&str]) -> Option<String> {
    let output = tokio::process::Command::new("xdotool")
        .env("DISPLAY", display)
        .args(args)
        .stdin(std::process::Stdio::null())
        .kill_on_drop(true)
        .output()
        .await
        .expect("xdotool runs (apt-get install xdotool)");
    output
        .status
        .success()
        .then(|| String::from_utf8_lossy(&output.stdout).trim().to_owned())
}

/// A whole RDP session: `xfreerdp` with `args` to 127.0.0.1:`port` on `display`, in a window
/// titled `rdp-<ns>` (its output in `xfreerdp.log` in the display's HOME); returns the client
/// and its window id once the window shows and the client is still connected.
async fn rdp_session(
    display: &ClientDisplay,
    ns: &str,
    port: u16,
    user: &str,
    password: &str,
    args: &[&str],
) -> (tokio::process::Child, String) {
    let title = format!("rdp-{ns}");
    let log = display.home.join("xfreerdp.log");
    let log_file = std::fs::File::create(&log).unwrap();
    let mut client = xfreerdp(display, port, user, password, "ignore")
        .arg(format!("/title:{title}"))
        .args(args)
        .stdout(log_file.try_clone().unwrap())
        .stderr(log_file)
        .spawn()
        .unwrap();
    let window =
        corral_tests::eventually("the RDP client's window", Duration::from_secs(30), || {
            let (display, title) = (&display.name, &title);
            if let Some(status) = client.try_wait().unwrap() {
                let output = std::fs::read_to_string(&log).unwrap_or_default();
                panic!("xfreerdp exited ({status}) before its window showed: {output}");
            }
            async move {
                xdotool(display, &["search", "--name", title])
                    .await
                    .filter(|w| !w.is_empty())
            }
        })
        .await;
    assert!(
        client.try_wait().unwrap().is_none(),
        "xfreerdp is still connected"
    );
    (client, window)
}

#[tokio::test]
async fn keys_typed_in_an_rdp_client_reach_the_guests_typing_sink() {
    use sandbox::emulator::guests::TYPING_SINK_TITLE;
    use sandbox::emulator::knobs::{
        DEFAULT_RDP_PASSWORD, DEFAULT_RDP_USER, TYPED_TEXT_ANNOTATION, XVNC_DISPLAY_ANNOTATION,
    };
    let admin = client_as("admin").await;
    let alice = stream_client("alice").await;
    let ns = namespace("rdptype").await;
    create_vm(&admin, &ns, "desk", "Always").await;
    wait_status(&admin, &ns, "desk", "Running").await;
    let display = client_display(&ns).await;
    let port = forward_locally(alice.clone(), vmi_url(&ns, "desk", "portforward/3389")).await;

    // The first connection starts the guest's display (which can take a while on a busy
    // machine): a logon alone first, so that the session below does not wait for it.
    let (code, output) = rdp_auth(
        &display,
        port,
        DEFAULT_RDP_USER,
        DEFAULT_RDP_PASSWORD,
        "ignore",
    )
    .await;
    assert_eq!(code, 0, "{output}");

    // A whole RDP session, in a window of its own title on the client's display.
    let (mut client, window) = rdp_session(
        &display,
        &ns,
        port,
        DEFAULT_RDP_USER,
        DEFAULT_RDP_PASSWORD,
        &["/size:1024x768"],
    )
    .await;
    xdotool(&display.name, &["windowfocus", "--sync", &window])
        .await
        .expect("focus the RDP client's window");

    // The guest's display runs now: its typing sink window is there, and its file is named.
    let annotations = vmis(&admin, &ns)
        .get("desk")
        .await
        .unwrap()
        .metadata
        .annotations
        .unwrap_or_default();
    let guest_display = &annotations[XVNC_DISPLAY_ANNOTATION];
    let sink = xdotool(guest_display, &["search", "--name", TYPING_SINK_TITLE]).await;
    assert!(sink.is_some_and(|w| !w.is_empty()), "no typing sink window");
    let typed = std::path::PathBuf::from(&annotations[TYPED_TEXT_ANNOTATION]);
    assert_eq!(
        std::fs::read_to_string(&typed).unwrap(),
        "",
        "nothing typed yet"
    );

    // Keys sent before the session is fully up may be lost: type a probe until one arrives.
    corral_tests::eventually("a probe key in the guest", Duration::from_secs(30), || {
        let (display, typed) = (&display.name, &typed);
        async move {
            xdotool(display, &["type", "."]).await?;
            for _ in 0..10 {
                if !std::fs::read_to_string(typed).ok()?.is_empty() {
                    return Some(());
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            None
        }
    })
    .await;
    let before = std::fs::read_to_string(&typed).unwrap().len();
    let text = "Hello from RDP: 42 & <more>!";
    xdotool(&display.name, &["type", "--delay", "30", text])
        .await
        .unwrap();
    xdotool(&display.name, &["key", "Return"]).await.unwrap();
    let want = format!("{text}\n");
    corral_tests::eventually("the typed text in the guest", STREAM_WAIT, || async {
        let all = std::fs::read_to_string(&typed).ok()?;
        // Late probes ('.') may come first.
        (all.get(before..)?.trim_start_matches('.') == want).then_some(())
    })
    .await;
    assert!(
        client.try_wait().unwrap().is_none(),
        "xfreerdp is still connected"
    );
}

/// A running VM whose RDP server is xrdp (`sandbox.corral.dev/rdp-server: xrdp`), a client
/// display, and a local port forwarded to the VM's guest port 3389.
async fn xrdp_vm(ns: &str) -> (ClientDisplay, u16) {
    use sandbox::emulator::knobs::{RDP_SERVER_ANNOTATION, XRDP};
    let admin = client_as("admin").await;
    let alice = stream_client("alice").await;
    create_vm_with(&admin, ns, "desk", "Always", |o| {
        o["metadata"]["annotations"][RDP_SERVER_ANNOTATION] = json!(XRDP);
    })
    .await;
    wait_status(&admin, ns, "desk", "Running").await;
    let display = client_display(ns).await;
    let port = forward_locally(alice, vmi_url(ns, "desk", "portforward/3389")).await;
    (display, port)
}

/// The X display (`":<n>"`) of the VMI `desk` in `ns`, once it runs.
async fn guest_display(ns: &str) -> String {
    use sandbox::emulator::knobs::XVNC_DISPLAY_ANNOTATION;
    let admin = client_as("admin").await;
    corral_tests::eventually("the guest's display", STREAM_WAIT, || async {
        let vmi = vmis(&admin, ns).get("desk").await.ok()?;
        vmi.metadata.annotations?.remove(XVNC_DISPLAY_ANNOTATION)
    })
    .await
}

#[tokio::test]
async fn clipboard_text_crosses_an_xrdp_session_both_ways() {
    use sandbox::emulator::xrdp::{clipboard_text, set_clipboard_text};
    let ns = namespace("xrdpclip").await;
    let (display, port) = xrdp_vm(&ns).await;

    // The client's clipboard when the session starts reaches the guest's.
    let from_client = format!("copied on the client {ns}");
    set_clipboard_text(&display.name, &from_client)
        .await
        .unwrap();
    // xrdp takes TLS and any user name and password (it has no NLA and asks for no login).
    let (mut client, _window) = rdp_session(
        &display,
        &ns,
        port,
        "anyone",
        "anything",
        &["/sec:tls", "+clipboard"],
    )
    .await;
    let guest = guest_display(&ns).await;
    corral_tests::eventually(
        "the client's text on the guest's clipboard",
        STREAM_WAIT,
        || {
            let (guest, want) = (&guest, &from_client);
            async move { (clipboard_text(guest).await.unwrap()? == *want).then_some(()) }
        },
    )
    .await;

    // Text copied in the guest reaches the client's clipboard.
    let from_guest = format!("copied in the guest {ns}: 42 & <more>!");
    set_clipboard_text(&guest, &from_guest).await.unwrap();
    corral_tests::eventually(
        "the guest's text on the client's clipboard",
        STREAM_WAIT,
        || {
            let (display, want) = (&display.name, &from_guest);
            async move { (clipboard_text(display).await.unwrap()? == *want).then_some(()) }
        },
    )
    .await;
    assert!(
        client.try_wait().unwrap().is_none(),
        "xfreerdp is still connected"
    );
}

#[tokio::test]
async fn an_xrdp_guests_screen_follows_the_rdp_window_size() {
    use sandbox::emulator::knobs::RDP_PORT_ANNOTATION;
    use sandbox::emulator::xrdp::screen_size;
    let ns = namespace("xrdpsize").await;
    let (display, port) = xrdp_vm(&ns).await;

    // The session starts at the client's size: the guest's screen (1024×768 before) takes it.
    let (mut client, window) = rdp_session(
        &display,
        &ns,
        port,
        "anyone",
        "anything",
        &["/size:800x600", "/dynamic-resolution"],
    )
    .await;
    let guest = guest_display(&ns).await;
    corral_tests::eventually("the guest's screen at 800×600", STREAM_WAIT, || async {
        (screen_size(&guest).await.unwrap() == (800, 600)).then_some(())
    })
    .await;

    // The client shows the guest's desktop: its background colour at the bottom right.
    let key = sandbox::emulator::guests::GuestKey {
        namespace: ns.clone(),
        name: "desk".into(),
        uid: String::new(),
    };
    let want = sandbox::emulator::guests::screen_colour(&key);
    corral_tests::eventually(
        "the guest's background in the client",
        STREAM_WAIT,
        || async {
            let got = window_pixel(&display.name, &window, 790, 590).await?;
            got.eq_ignore_ascii_case(&want).then_some(())
        },
    )
    .await;

    // Resizing the client's window resizes the guest's screen.
    xdotool(&display.name, &["windowsize", &window, "1000", "700"])
        .await
        .expect("resize the RDP client's window");
    corral_tests::eventually("the guest's screen at 1000×700", STREAM_WAIT, || async {
        (screen_size(&guest).await.unwrap() == (1000, 700)).then_some(())
    })
    .await;
    assert!(
        client.try_wait().unwrap().is_none(),
        "xfreerdp is still connected"
    );

    // Stopping the VM stops xrdp with the display: its port closes and the client is dropped.
    let admin = client_as("admin").await;
    let annotations = vmis(&admin, &ns)
        .get("desk")
        .await
        .unwrap()
        .metadata
        .annotations;
    let rdp: u16 = annotations.unwrap()[RDP_PORT_ANNOTATION].parse().unwrap();
    assert_eq!(subresource(&admin, &ns, "desk", "stop").await.0, 202);
    wait_status(&admin, &ns, "desk", "Stopped").await;
    corral_tests::eventually("xrdp gone and the client dropped", STREAM_WAIT, || {
        let dropped = client.try_wait().unwrap().is_some();
        async move {
            let listening = tokio::net::TcpStream::connect(("127.0.0.1", rdp))
                .await
                .is_ok();
            (!listening && dropped).then_some(())
        }
    })
    .await;
}

/// The colour (`#RRGGBB`) of the pixel at `x`,`y` of `window` on `display` (ImageMagick's
/// `import`), when it could be read.
async fn window_pixel(display: &str, window: &str, x: u32, y: u32) -> Option<String> {
    let output = tokio::process::Command::new("import")
        .env("DISPLAY", display)
        .args(["-window", window, "-crop"])
        .arg(format!("1x1+{x}+{y}"))
        .args(["-depth", "8", "txt:-"])
        .stdin(std::process::Stdio::null())
        .kill_on_drop(true)
        .output()
        .await
        .expect("import runs (apt-get install imagemagick)");
    let text = String::from_utf8_lossy(&output.stdout);
    let hash = text.lines().last()?.find('#')?;
    text.lines().last()?.get(hash..hash + 7).map(str::to_owned)
}
